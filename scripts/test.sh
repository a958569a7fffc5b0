#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# cpd's full test run, as CI does it:
#   ci     Release, -Wall -Wextra -Wpedantic -Werror, every label but cuda
#   asan   RelWithDebInfo (-O2 -g) with ASan + UBSan, label quick
#   clang  Release with clang++, label quick
# asan and clang build only what their tests run (CPD_TEST_LABELS=quick: no
# exhaustive or MPI tests, no benchmarks, no nvcc); ci builds everything.
# usage: scripts/test.sh [preset...]     (default: ci asan clang)
# env:   CPD_JOBS (default 2), CPD_SKIP_DEPS=1 to skip the dependency check
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs="${CPD_JOBS:-2}"
presets=("$@")
if [[ ${#presets[@]} -eq 0 ]]; then
  presets=(ci asan clang)
fi

if [[ "${CPD_SKIP_DEPS:-0}" != 1 ]]; then
  scripts/deps.sh --tests
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

for preset in "${presets[@]}"; do
  echo
  echo "==== ${preset}: configure, build, test ===="
  cmake --preset "$preset"
  cmake --build --preset "$preset" -j "$jobs"
  log="build/${preset}/ctest-summary.log"
  set +e
  ctest --preset "$preset" -j "$jobs" --output-on-failure 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  set -e
  result="$(grep -E 'tests passed|No tests were found' "$log" | tail -n 1 || true)"
  summary+=("${preset}: ${result:-no ctest summary}")
  if [[ $status -ne 0 ]]; then
    exit "$status"
  fi
done
