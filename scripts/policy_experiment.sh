#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The precision-policy experiment of docs/results.md ("Hybrid precision: policies"): for
# each seed and each policy (one a line in POLICIES, "-" for none), cpd-train's default task
# with the given formats and scaling rules; one CSV row per run with its average bits per
# value and final accuracy:
#   scripts/policy_experiment.sh TRAIN OUT.csv SEEDS FORMATS SCALERS POLICIES [cpd-train args...]
# e.g. scripts/policy_experiment.sh build/ci/examples/cpd-train out.csv 1,2,3 e3m0 aps,amax-sqrtw policies.txt
# Runs two cpd-train processes at a time (--threads 1 each). With CPD_LOGS=DIR set, every
# run's whole output (loss scaling's skipped steps, times) is kept there as SEED-N.txt.
set -euo pipefail
train=${1:?usage: $0 TRAIN OUT.csv SEEDS FORMATS SCALERS POLICIES [args...]}
out=${2:?}; seeds=${3:?}; formats=${4:?}; scalers=${5:?}; policies=${6:?}
shift 6
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
jobs=0
n=0
while IFS= read -r policy || [[ -n "$policy" ]]; do
  [[ -z "$policy" || "$policy" == \#* ]] && continue
  for seed in ${seeds//,/ }; do
    n=$((n + 1))
    args=(--seed "$seed" --grad-formats "$formats" --scaler "$scalers" --threads 1 --no-progress "$@")
    [[ "$policy" != "-" ]] && args+=(--policy "$policy")
    printf '%s\n%s\n' "$seed" "$policy" > "$tmp/$n.meta"
    timeout 3600 "$train" "${args[@]}" > "$tmp/$n.out" 2>&1 &
    jobs=$((jobs + 1))
    if (( jobs >= 2 )); then wait -n || true; jobs=$((jobs - 1)); fi  # exit 3: a run diverged
  done
done < "$policies"
wait || true
echo "seed,policy,grad_format,scaler,bits_per_value,final_loss,final_accuracy,flushed,overflowed" > "$out"
for ((i = 1; i <= n; i++)); do
  seed=$(sed -n 1p "$tmp/$i.meta"); policy=$(sed -n 2p "$tmp/$i.meta")
  # the table: format APS bits/value final-loss final-acc best-acc flushed overflowed non-finite seconds
  awk -v seed="$seed" -v policy="$policy" '
    /^format +APS +bits\/value/ { table = 1; next }
    table && NF >= 10 && $1 != "weights-hash:" { printf "%s,\"%s\",%s,%s,%s,%s,%s,%s,%s\n", seed, policy, $1, $2, $3, $4, $5, $7, $8 }
    /^weights-hash:/ { table = 0 }' "$tmp/$i.out" >> "$out"
  grep -q "weights-hash" "$tmp/$i.out" || { echo "run $i (seed $seed, policy '$policy') failed:"; tail -5 "$tmp/$i.out"; }
done
if [[ -n "${CPD_LOGS:-}" ]]; then
  mkdir -p "$CPD_LOGS"
  for ((i = 1; i <= n; i++)); do cp "$tmp/$i.out" "$CPD_LOGS/$(sed -n 1p "$tmp/$i.meta")-$i.txt"; done
fi
echo "wrote $out ($(($(wc -l < "$out") - 1)) runs)"
