#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The scaling-rule experiment of docs/results.md ("The scaling rules side by side"): for each
# seed and gradient format, one cpd-train process trains the format with every rule of SCALERS
# for EPOCHS epochs (fp32 runs once, without a rule). Each process keeps its whole output
# (the table, loss scaling's skipped steps) and its per-epoch CSV in OUTDIR as
# SEED-FORMAT.txt and SEED-FORMAT.csv, for scripts/plot_scalers.py:
#   scripts/scaler_experiment.sh TRAIN OUTDIR SEEDS FORMATS SCALERS EPOCHS [cpd-train args...]
# e.g. scripts/scaler_experiment.sh build/ci/examples/cpd-train /tmp/scalers 1,2,3 fp32,e4m3 none,aps,mx32 8
# Two processes at a time (--threads 1 each), each bounded by a 2-hour timeout.
set -euo pipefail
train=${1:?usage: $0 TRAIN OUTDIR SEEDS FORMATS SCALERS EPOCHS [args...]}
outdir=${2:?}; seeds=${3:?}; formats=${4:?}; scalers=${5:?}; epochs=${6:?}
shift 6
mkdir -p "$outdir"
jobs=0
for seed in ${seeds//,/ }; do
  for fmt in ${formats//,/ }; do
    rules=$scalers
    [[ "$fmt" == fp32 ]] && rules=none
    base="$outdir/$seed-$fmt"
    timeout 7200 "$train" --seed "$seed" --grad-formats "$fmt" --scaler "$rules" --epochs "$epochs" --threads 1 \
      --no-progress --csv "$base.csv" "$@" > "$base.txt" 2>&1 &
    jobs=$((jobs + 1))
    if (( jobs >= 2 )); then wait -n || true; jobs=$((jobs - 1)); fi  # exit 3: a run diverged
  done
done
wait || true
for f in "$outdir"/*.txt; do
  grep -q "weights-hash" "$f" || { echo "failed: $f"; tail -3 "$f"; }
done
echo "wrote $(ls "$outdir"/*.csv | wc -l) CSVs to $outdir"
