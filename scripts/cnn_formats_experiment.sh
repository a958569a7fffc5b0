#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The formats of 2026 on the LeNet-5 (docs/results.md, "The formats of 2026 on the LeNet-5";
# issue 33, item 9): scripts/train_cnn.sh once per seed, every exchange below for EPOCHS
# epochs (8 emulated workers, cpd.torch.EmulatedWorkers, one torch thread a process), then
# one table and plot of all seeds together with the runs of docs/img/cnn-emulated.csv (fp32,
# e5m2, e4m3, e3m0 without and with APS; 10 epochs, so only when EPOCHS is 10):
#   scripts/cnn_formats_experiment.sh OUTDIR SEEDS EPOCHS [train_cnn.sh options...] [-- train_cnn.py options...]
# e.g. scripts/cnn_formats_experiment.sh /tmp/cnn-formats 1,2,3 10 --pythonpath DIR
# Writes OUTDIR/seed-S.{csv,md,png,log} per seed and OUTDIR/cnn-formats.{md,png}. The seeds
# run at once, one process each (CPD_JOBS=N: at most N at a time); a failed seed is reported
# at the end (status 1).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
outdir=${1:?usage: $0 OUTDIR SEEDS EPOCHS [train_cnn.sh options...] [-- train_cnn.py options...]}
seeds=${2:?}; epochs=${3:?}
shift 3
sh_args=()
py_args=()
while [[ $# -gt 0 ]]; do
  if [[ $1 == -- ]]; then shift; py_args=("$@"); break; fi
  sh_args+=("$1"); shift
done
[[ "$epochs" =~ ^[1-9][0-9]*$ ]] || { echo "$0: EPOCHS must be a positive integer, not '$epochs'" >&2; exit 2; }
max_jobs=${CPD_JOBS:-1000}
[[ "$max_jobs" =~ ^[1-9][0-9]*$ ]] || { echo "$0: CPD_JOBS must be a positive integer" >&2; exit 2; }

exchanges=(
  e2m1fn/nvfp4 e2m1fn/nvfp4+h16             # NVFP4, without and with a 16-point Hadamard rotation
  e2m1fn/mx32 e3m0/mx32                     # MXFP4, and e3m0 with MX-32
  e3m2fn/mx32 e2m3fn/mx32                   # MXFP6
  e4m3fn/mx32 e5m2/mx32                     # MXFP8
  codec=int:8:32 codec=int:4:32             # symmetric integers, a float scale per 32 values
  codec=fp:binary8p3se codec=fp:binary8p4se # IEEE P3109, a power of two per tensor
  codec=posit:8                             # posit<8, 2>, a power of two per tensor
)
list=$(IFS=,; echo "${exchanges[*]}")
mkdir -p "$outdir"

csvs=""
if [[ $epochs -eq 10 ]]; then csvs=docs/img/cnn-emulated.csv; fi
jobs=0
for seed in ${seeds//,/ }; do
  [[ "$seed" =~ ^[0-9]+$ ]] || { echo "$0: a seed must be a non-negative integer, not '$seed'" >&2; exit 2; }
  scripts/train_cnn.sh --out "$outdir" --name "seed-$seed" --seeds "$seed" --epochs "$epochs" "${sh_args[@]}" \
    -- --exchanges "$list" --no-progress "${py_args[@]}" 2>"$outdir/seed-$seed.log" &
  csvs+="${csvs:+,}$outdir/seed-$seed.csv"
  jobs=$((jobs + 1))
  if (( jobs >= max_jobs )); then wait -n || true; jobs=$((jobs - 1)); fi
done
wait || true

status=0
for seed in ${seeds//,/ }; do
  grep -q "weights-hash" "$outdir/seed-$seed.md" 2>/dev/null || { echo "failed: seed $seed"; tail -3 "$outdir/seed-$seed.log"; status=1; }
done
if [[ $status -eq 0 ]]; then
  /usr/bin/python3 examples/torch/train_cnn.py --plot-from "$csvs" --plot "$outdir/cnn-formats.png" \
    >"$outdir/cnn-formats.md" || status=1
  cat "$outdir/cnn-formats.md"
fi
exit $status
