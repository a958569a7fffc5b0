#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Training without fp32 master weights (docs/results.md "Without fp32 master weights"):
# for each seed and each line of CONFIGS (cpd-train arguments, space-separated, no
# quotes), one cpd-train invocation of the default task; one CSV row per run:
#   scripts/weights_experiment.sh TRAIN OUT.csv SEEDS CONFIGS [cpd-train args...]
# Runs two cpd-train processes at a time (--threads 1 each).
set -euo pipefail
train=${1:?usage: $0 TRAIN OUT.csv SEEDS CONFIGS [args...]}
out=${2:?}; seeds=${3:?}; configs=${4:?}
shift 4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
jobs=0
n=0
while IFS= read -r config || [[ -n "$config" ]]; do
  [[ -z "$config" || "$config" == \#* ]] && continue
  read -r -a extra <<< "$config"
  for seed in ${seeds//,/ }; do
    n=$((n + 1))
    printf '%s\n%s\n' "$seed" "$config" > "$tmp/$n.meta"
    timeout 3600 "$train" --seed "$seed" --threads 1 --no-progress "${extra[@]}" "$@" > "$tmp/$n.out" 2>&1 &
    jobs=$((jobs + 1))
    if (( jobs >= 2 )); then wait -n || true; jobs=$((jobs - 1)); fi  # exit 3: a run diverged
  done
done < "$configs"
wait || true
echo "seed,config,grad_format,aps,bits_per_value,final_loss,final_accuracy,flushed,overflowed,diverged" > "$out"
for ((i = 1; i <= n; i++)); do
  seed=$(sed -n 1p "$tmp/$i.meta"); config=$(sed -n 2p "$tmp/$i.meta")
  awk -v seed="$seed" -v config="$config" '
    /^format +APS +bits\/value/ { table = 1; next }
    table && NF >= 10 && $1 != "weights-hash:" { printf "%s,\"%s\",%s,%s,%s,%s,%s,%s,%s,%s\n", seed, config, $1, $2, $3, $4, $5, $7, $8, ($11 == "diverged" ? "yes" : "no") }
    /^weights-hash:/ { table = 0 }' "$tmp/$i.out" >> "$out"
  grep -q "weights-hash" "$tmp/$i.out" || { echo "run $i (seed $seed, '$config') failed:"; tail -5 "$tmp/$i.out"; }
done
echo "wrote $out ($(($(wc -l < "$out") - 1)) runs)"
