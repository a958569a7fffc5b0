#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The GPU checks of docs/cuda.md, in one go, on a machine with an NVIDIA GPU:
#   scripts/gpu_check.sh BIN_DIR OUT_DIR [STEP...]
# BIN_DIR holds test_cuda, test_thrust_cuda, test_nccl, bench_cuda and cpd_dump
# (built with -DCMAKE_CUDA_ARCHITECTURES=<the GPU's>, e.g. from build/<preset>/tests
# and bench/, copied together), and any shared libraries they need that the machine
# lacks (libbenchmark). Runs, each bounded in time, logging to OUT_DIR:
#   1. the device tests (bit for bit against the host), the Thrust CUDA system, NCCL;
#   2. the cross-check against ml_dtypes (tests/ml_dtypes/check_ml_dtypes.py);
#   3. bench_cuda (JSON and a table);
#   4. compute-sanitizer memcheck and racecheck over the device tests.
#   5. python: the Python package's GPU tests (python/tests/test_cuda.py, and the GPU tests
#      of test_fakequant.py and test_torch.py) against the package in $CPD_PYTHON_DIR (a
#      directory holding cpd/ with _cpd and _cpd_cuda built for the machine's Python);
#   6. python_bench: bench/bench_python_cuda.py --profile (CSV into OUT_DIR);
#   7. torch_step: bench/bench_torch_step.py, a ResNet-18 step with cpd's layers and hook;
#   8. ncu: Nsight Compute's speed-of-light, compute and warp-state sections of one
#      stochastic and one nearest-even quantize kernel (why stochastic rounding is slower).
# STEPs (default: tests ml_dtypes bench sanitizers) choose among: tests ml_dtypes bench
# sanitizers python python_bench torch_step ncu; a lease that allows ten minutes a command
# runs them in two or three calls.
# Prints a summary last; exit status: the number of failed steps.
set -uo pipefail

usage="usage: $0 BIN_DIR OUT_DIR [tests|ml_dtypes|bench|sanitizers|python|python_bench|torch_step|ncu]..."
bin=${1:?$usage}
out=${2:?$usage}
shift 2
steps=("$@")
(( ${#steps[@]} )) || steps=(tests ml_dtypes bench sanitizers)
for s in "${steps[@]}"; do
  case $s in tests|ml_dtypes|bench|sanitizers|python|python_bench|torch_step|ncu) ;; *) echo "$0: unknown step '$s'" >&2; exit 2 ;; esac
done
wanted() { [[ " ${steps[*]} " == *" $1 "* ]]; }
mkdir -p "$out"
here=$(cd "$(dirname "$0")/.." && pwd)
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# NCCL: the machine's own (the toolkit's or the nvidia-nccl wheel's).
nccl=$(find /usr/local/cuda*/lib* /usr/lib/x86_64-linux-gnu /opt /usr/local/lib -name 'libnccl.so.2' 2>/dev/null | head -1)
[[ -n "$nccl" ]] && export LD_LIBRARY_PATH="$(dirname "$nccl"):$LD_LIBRARY_PATH"

summary=()
failed=0
step() {  # step NAME SECONDS COMMAND...
  local name=$1 secs=$2
  shift 2
  local t0=$SECONDS
  echo "=== $name: $*" | tee -a "$out/gpu_check.log"
  timeout --kill-after=10 "$secs" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$out/$name.log" | tee -a "$out/gpu_check.log"
  local verdict=ok
  case $rc in
    0) ;;
    77) verdict=skipped ;;
    124|137) verdict="TIMED OUT after ${secs}s"; failed=$((failed + 1)) ;;
    *) verdict="FAILED (exit $rc)"; failed=$((failed + 1)) ;;
  esac
  summary+=("$(printf '%-22s %-24s %4ss' "$name" "$verdict" $((SECONDS - t0)))")
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv \
  | tee "$out/nvidia-smi.txt"
nvcc --version 2>/dev/null | tail -2 | tee -a "$out/nvidia-smi.txt"

if wanted tests; then
  step test_cuda_device 300 "$bin/test_cuda" --device
  step test_cuda_host 120 "$bin/test_cuda"
  step test_thrust_cuda 300 "$bin/test_thrust_cuda"
  step test_nccl 120 "$bin/test_nccl"
fi
if wanted ml_dtypes; then
  step ml_dtypes 300 python3 "$here/tests/ml_dtypes/check_ml_dtypes.py" --tool "$bin/cpd_dump" --json "$out/ml_dtypes.json"
fi
if wanted bench; then
  step bench_cuda 400 "$bin/bench_cuda" --benchmark_counters_tabular=true \
    --benchmark_out="$out/bench_cuda.json" --benchmark_out_format=json
fi
if ! wanted sanitizers; then
  :
elif command -v compute-sanitizer >/dev/null; then
  step memcheck 400 compute-sanitizer --tool memcheck --error-exitcode 1 "$bin/test_cuda" --device
  step racecheck 400 compute-sanitizer --tool racecheck --error-exitcode 1 "$bin/test_cuda" --device
  step memcheck_thrust 300 compute-sanitizer --tool memcheck --error-exitcode 1 "$bin/test_thrust_cuda"
  # NCCL's initialization probes its own kernels (cudaFuncGetAttributes answers
  # cudaErrorNoKernelImageForDevice for architectures its build lacks) and handles the
  # errors: they are not reported; memory errors still are.
  step memcheck_nccl 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 "$bin/test_nccl"
else
  summary+=("compute-sanitizer      not on this machine")
fi

if ! wanted ncu; then
  :
elif command -v ncu >/dev/null; then
  ncu=(ncu --clock-control none --kernel-name-base demangled --section SpeedOfLight --section ComputeWorkloadAnalysis
       --section WarpStateStats --section Occupancy --launch-count 1)
  step ncu_stochastic 120 "${ncu[@]}" -k regex:stochastic "$bin/bench_cuda" \
    "--benchmark_filter=^quantize_sr<cpd::float8_e4m3fn, random_generator::v2>/67108864" --benchmark_min_time=0
  step ncu_nearest 120 "${ncu[@]}" -k regex:quantizer "$bin/bench_cuda" \
    "--benchmark_filter=^quantize<cpd::float8_e4m3fn, rounding::nearest_even>/67108864" --benchmark_min_time=0
else
  summary+=("ncu                    not on this machine")
fi

if wanted python || wanted python_bench || wanted torch_step; then
  pydir=${CPD_PYTHON_DIR:?CPD_PYTHON_DIR must name the directory that holds the package cpd/}
  pydir=$(cd "$pydir" && pwd)
fi
if wanted python; then
  # test_cuda.py whole; the GPU tests of the others (their CPU tests run in CI)
  step python 400 env PYTHONPATH="$pydir" PYTHONUNBUFFERED=1 CPD_EXPECT_CUDA_MODULE=1 XLA_PYTHON_CLIENT_PREALLOCATE=false \
    python3 -m pytest -q -rs -p no:cacheprovider --junitxml="$out/python.xml" "$here/python/tests/test_cuda.py" \
    "$here/python/tests/test_fakequant.py::test_ste_and_qtorch_on_a_gpu_give_the_cpus_bits" \
    "$here/python/tests/test_torch.py::test_hook_and_all_reduce_on_a_gpu_with_nccl"
fi
if wanted python_bench; then
  step python_bench 300 env PYTHONPATH="$pydir" PYTHONUNBUFFERED=1 python3 "$here/bench/bench_python_cuda.py" \
    --profile --csv "$out/bench_python_cuda.csv"
fi
if wanted torch_step; then
  step torch_step 300 env PYTHONPATH="$pydir" PYTHONUNBUFFERED=1 python3 "$here/bench/bench_torch_step.py" \
    --csv "$out/bench_torch_step.csv"
fi

echo "=== summary"
printf '%s\n' "${summary[@]}" | tee -a "$out/gpu_check.log"
exit "$failed"
