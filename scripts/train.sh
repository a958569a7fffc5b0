#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# cpd's main job: installs what it needs from Debian (compiler, Eigen, zlib,
# Fashion-MNIST, gnuplot), builds cpd-train in Release and runs the default
# experiment: fp32, e5m2, e4m3 and e3m0 gradients, each with and without APS,
# 8 emulated workers. Prints the table and writes results/default.{csv,png}.
# Extra arguments go to cpd-train (see build/train/examples/cpd-train --help).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ "${CPD_SKIP_DEPS:-0}" != 1 ]]; then
  scripts/deps.sh
fi
# -march=native: cpd-train is built and run on this machine (Eigen gains AVX/FMA).
cmake -S . -B build/train -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="${CPD_TRAIN_FLAGS--march=native}" \
  -DCPD_BUILD_TESTS=OFF -DCPD_BUILD_BENCHMARKS=OFF -DCPD_BUILD_EXAMPLES=ON >/dev/null
cmake --build build/train --target cpd-train -j "${CPD_JOBS:-2}"
mkdir -p results
exec build/train/examples/cpd-train --csv results/default.csv --plot results/default.png "$@"
