#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# cpd's main job: installs what it needs from Debian (compiler, Eigen, zlib,
# Fashion-MNIST, gnuplot), builds cpd-train in Release and runs the default
# experiment: fp32, e5m2, e4m3 and e3m0 gradients, each with and without APS,
# 8 emulated workers. Prints the table and writes results/default.{csv,png}.
# Extra arguments go to cpd-train (see build/train/examples/cpd-train --help).
#
# cpd-train is compiled for one fixed instruction set, x86-64-v3 (AVX2 and FMA), with
# Eigen's blocking pinned, so that the table and its weights-hashes are those of
# docs/results.md on every x86-64 machine that has AVX2 and FMA (docs/train.md#reproducibility).
# On a machine without them the script says so and builds for the machine's own
# instruction set: the run works, but its last bits differ from the documented ones.
# env: CPD_TRAIN_FLAGS (extra compiler flags; they do not change -march), CPD_JOBS (2)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ "${CPD_SKIP_DEPS:-0}" != 1 ]]; then
  scripts/deps.sh
fi

# x86-64-v3 where this processor runs it (glibc's loader knows; the flags are the fallback).
arch=x86-64-v3
if [[ "$(uname -m)" != x86_64 ]]; then
  arch=""
elif ! /lib64/ld-linux-x86-64.so.2 --help 2>/dev/null | grep -q 'x86-64-v3 (supported'; then
  flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null) "
  for f in avx avx2 bmi1 bmi2 f16c fma abm movbe xsave; do
    [[ "$flags" == *" $f "* ]] || { arch=""; break; }
  done
fi
if [[ -z "$arch" ]]; then
  echo "train.sh: this processor ($(uname -m)) cannot run x86-64-v3 code (AVX2, FMA): cpd-train is built" \
       "for its own instruction set, and the weights-hashes will differ from docs/results.md" >&2
fi
cmake -S . -B build/train -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="${CPD_TRAIN_FLAGS-}" \
  -DCPD_TRAIN_ARCH="$arch" -DCPD_BUILD_TESTS=OFF -DCPD_BUILD_BENCHMARKS=OFF -DCPD_BUILD_EXAMPLES=ON >/dev/null
cmake --build build/train --target cpd-train -j "${CPD_JOBS:-2}"
mkdir -p results
exec build/train/examples/cpd-train --csv results/default.csv --plot results/default.png "$@"
