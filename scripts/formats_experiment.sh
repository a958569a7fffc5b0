#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The formats of 2026 on one harness (docs/results.md, "The formats of 2026 side by side";
# issue 33, item 9): for each seed, the groups below, one cpd-train process each, every run
# for EPOCHS epochs on the default task (8 workers, batch 256, ring). Each process keeps its
# whole output and its per-epoch CSV in OUTDIR as SEED-GROUP.txt and SEED-GROUP.csv, for
# scripts/plot_formats.py:
#   scripts/formats_experiment.sh TRAIN OUTDIR SEEDS EPOCHS [cpd-train args...]
# e.g. scripts/formats_experiment.sh build/ci/examples/cpd-train /tmp/formats 1,2,3 8
# Two processes at a time (--threads 1 each), each bounded by a 2-hour timeout; an
# unknown group, a failed run or a missing weights-hash is reported at the end (status 1).
set -euo pipefail
train=${1:?usage: $0 TRAIN OUTDIR SEEDS EPOCHS [args...]}
outdir=${2:?}; seeds=${3:?}; epochs=${4:?}
shift 4
[[ -x "$train" ]] || { echo "$0: $train is not an executable" >&2; exit 2; }
[[ "$epochs" =~ ^[1-9][0-9]*$ ]] || { echo "$0: EPOCHS must be a positive integer, not '$epochs'" >&2; exit 2; }
mkdir -p "$outdir"

# NAME|ARGS: the exchange of each group (format runs sum in the format through the ring;
# codec runs encode once and sum the decoded values in float32: docs/codecs.md). APS and
# the per-tensor rules are scripts/scaler_experiment.sh's (the same runs, the same bits:
# plot_formats.py takes them from docs/img/results-scalers.csv, and checks e3m0 with mx32,
# which both experiments run, against it).
groups=(
  "fp32|--grad-formats fp32 --scaler none"
  "nvfp4|--grad-formats e2m1fn --scaler nvfp4"                   # NVFP4: e2m1 + e4m3 per 16 + fp32
  "nvfp4-rotate16|--grad-formats e2m1fn --scaler nvfp4 --rotate 16"
  "mxfp4|--grad-formats e2m1fn,e3m0 --scaler mx32"               # OCP MXFP4, and e3m0 with MX-32
  "mxfp6|--grad-formats e3m2fn,e2m3fn --scaler mx32"             # OCP MXFP6
  "mxfp8|--grad-formats e4m3fn,e5m2 --scaler mx32"               # OCP MXFP8
  "int|--grad-formats none --codec int:8:32,int:4:32"            # symmetric integers, a float scale per 32
  "p3109|--grad-formats none --codec fp:binary8p3se,fp:binary8p4se,fp:e4m3fn,fp:e5m2"
  "posit|--grad-formats none --codec posit:8"                    # posit<8, 2>, a power of two per tensor
)

jobs=0
for seed in ${seeds//,/ }; do
  [[ "$seed" =~ ^[0-9]+$ ]] || { echo "$0: a seed must be a non-negative integer, not '$seed'" >&2; exit 2; }
  for g in "${groups[@]}"; do
    name=${g%%|*}
    read -r -a args <<< "${g#*|}"
    base="$outdir/$seed-$name"
    timeout 7200 "$train" --seed "$seed" "${args[@]}" --epochs "$epochs" --threads 1 --no-progress \
      --csv "$base.csv" "$@" > "$base.txt" 2>&1 &
    jobs=$((jobs + 1))
    if (( jobs >= 2 )); then wait -n || true; jobs=$((jobs - 1)); fi  # exit 3: a run diverged
  done
done
wait || true
status=0
for f in "$outdir"/*.txt; do
  grep -q "weights-hash" "$f" || { echo "failed: $f"; tail -3 "$f"; status=1; }
done
echo "wrote $(ls "$outdir"/*.csv 2>/dev/null | wc -l) CSVs to $outdir"
exit $status
