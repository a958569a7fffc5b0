#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# cpd's full test run, as CI does it:
#   ci     Release at -O2, the host code of .cu files too (cpd-train's model code at -O3,
#          the flags of its documented weights-hashes), -Wall -Wextra -Wpedantic -Werror, every label but cuda;
#          the Python package without its CUDA module (CPD_TEST_PYTHON_CUDA=OFF: no
#          GPU runs it here, and nvcc's units held up every python test)
#   asan   clang++ -O1 -g1 (line tables, all a sanitizer report needs) with
#          ASan + UBSan, label quick: the second compiler and the sanitizers
#          in one build; the tests that run briefly at -O0 (CPD_TEST_COMPILE_OPTIONS:
#          half their compile time); the baseline loops only (CPD_ISA_DISPATCH=OFF: the
#          AVX2/AVX-512 loops are the same source, run by ci on every path)
#   fuzz   the libFuzzer targets only (clang++, ASan + UBSan), each run for
#          CPD_FUZZ_SECONDS (40) from its committed corpus (tests/fuzz), all at once
# asan builds only what its tests run (CPD_TEST_LABELS=quick: no exhaustive or
# MPI tests, no benchmarks, no nvcc); ci builds everything. The preset `clang`
# (Release clang++, label quick: the fast kernels as clang compiles them) is
# not a default stage: CI must finish in 40 minutes on 2 cores, and the quick
# tests compile for ~15 CPU minutes per preset. Run it by name.
# Before configuring, scripts/venv.sh makes build/venv: Debian's python3 with the pinned test
# oracles from PyPI (scripts/oracles.txt) and the build backend scikit-build-core
# (scripts/python-build.txt), the Python of the tests. The Python package is built once, by
# pip: ci's ctest python.install pip-installs it into build/venv (first, while other tests
# run), and the python tests import it from there (docs/python.md).
# usage: scripts/test.sh [preset...]     (default: ci asan fuzz)
# env:   CPD_JOBS (default 2), CPD_SKIP_DEPS=1 to skip the dependency check
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs="${CPD_JOBS:-2}"
presets=("$@")
if [[ ${#presets[@]} -eq 0 ]]; then
  presets=(ci asan fuzz)
fi

if [[ "${CPD_SKIP_DEPS:-0}" != 1 ]]; then
  scripts/deps.sh --tests
fi
if ! scripts/venv.sh; then
  if [[ "${CI:-}" == true ]]; then
    echo "test.sh: scripts/venv.sh failed; under CI every test oracle must be installed" >&2
    exit 1
  fi
  echo "test.sh: scripts/venv.sh failed (is PyPI reachable?): the tests that need its oracles skip" >&2
fi

summary=()
print_summary() {
  local status=$?
  echo
  echo "==== scripts/test.sh summary ===="
  local line
  for line in "${summary[@]}"; do
    echo "$line"
  done
  if [[ $status -ne 0 ]]; then
    echo "FAILED (exit status $status)"
  fi
}
trap print_summary EXIT

# Every preset is configured, then all are built, then each is tested, in order.
for preset in "${presets[@]}"; do
  echo
  echo "==== ${preset}: configure ===="
  start=$SECONDS
  cmake --preset "$preset"
  summary+=("${preset}: configured in $((SECONDS - start)) s")
done

# The builds are compile-bound, and each ends with its longest compile running
# alone. With Makefiles, one make jobserver shares the $jobs slots among all the
# presets' builds, so a free slot takes the next preset's work; output lines are
# prefixed with [preset]. Otherwise the presets are built one after another.
echo
echo "==== build: ${presets[*]} ===="
start=$SECONDS
shared=0
if [[ ${#presets[@]} -gt 1 ]] && command -v make >/dev/null 2>&1; then
  shared=1
  for preset in "${presets[@]}"; do
    if ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Unix Makefiles' "build/${preset}/CMakeCache.txt" 2>/dev/null; then
      shared=0
    fi
  done
fi
if [[ $shared -eq 1 ]]; then
  makefile="$(mktemp)"
  {
    echo 'SHELL := /bin/bash'
    echo '.SHELLFLAGS := -o pipefail -c'
    echo ".PHONY: all ${presets[*]}"
    echo "all: ${presets[*]}"
    for preset in "${presets[@]}"; do
      printf '%s:\n\t+@$(MAKE) --no-print-directory -C build/%s all 2>&1 | sed -u "s/^/[%s] /"\n' \
        "$preset" "$preset" "$preset"
    done
  } >"$makefile"
  set +e
  make -j "$jobs" -f "$makefile"
  status=$?
  set -e
  rm -f "$makefile"
  if [[ $status -ne 0 ]]; then
    exit "$status"
  fi
else
  for preset in "${presets[@]}"; do
    cmake --build --preset "$preset" -j "$jobs"
  done
fi
summary+=("build (${presets[*]}): $((SECONDS - start)) s")

for preset in "${presets[@]}"; do
  echo
  echo "==== ${preset}: test ===="
  start=$SECONDS
  log="build/${preset}/ctest-summary.log"
  tjobs=$jobs
  if [[ "$preset" == fuzz ]]; then
    # Each fuzz target runs for CPD_FUZZ_SECONDS of wall time: all at once, so that the stage
    # takes that time once (with more targets than cores, each fuzzes for a share of it).
    targets=$(ctest --preset fuzz -N 2>/dev/null | grep -c 'Test *#' || true)
    if [[ "$targets" -gt "$tjobs" ]]; then
      tjobs=$targets
    fi
  fi
  set +e
  ctest --preset "$preset" -j "$tjobs" --output-on-failure 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  set -e
  result="$(grep -E 'tests passed|No tests were found' "$log" | tail -n 1 || true)"
  summary+=("${preset}: ${result:-no ctest summary} ($((SECONDS - start)) s)")
  if [[ $status -ne 0 ]]; then
    exit "$status"
  fi
done
