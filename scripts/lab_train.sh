#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Training end to end on the network lab (docs/netlab.md; docs/performance.md, "End to
# end"): cpd-train --mpi with one rank per network namespace over links of each rate,
# fp32 against a low-precision format with APS, on a model where communication matters
# (--hidden 1024,1024: 1.86M parameters, 7.5 MB of float32 gradient per step). Then the
# same runs emulated in one process, whose weights-hash must be the MPI runs' bit for bit,
# and the performance model's prediction (cpd-model) of each run's exchange time and of
# the speedup, from the compute time per step the runs measured.
#
#   sudo scripts/lab_train.sh [--ranks W] [--rates "1gbit 10gbit"] [--epochs N]
#                             [--format e4m3] [--algorithm ring] [--out DIR]
#                             [--codec-ns NS] [--report-only]
#
# --codec-ns: the format's codec cost for the model (cpd-model --codec-ns; default: the
# costs measured for e4m3fn, whose codec e4m3's equals in shape); --report-only: only the
# table, from the outputs a previous run left in DIR.
#
# Needs root (the lab's namespaces and tc), Open MPI, iproute2, Eigen, zlib and
# Fashion-MNIST (scripts/deps.sh installs them); exits 77 where the lab cannot run.
# Writes DIR (default results/lab-train): RATE.txt (cpd-train's output), emulated.txt,
# pingpong-RATE.txt, summary.csv; prints the table. Every run is bounded by a timeout.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ranks=4
rates="1gbit 10gbit"
epochs=1
format=e4m3
algorithm=ring
out=results/lab-train
codec_ns=0.42:0.65:0.93:0.23
report_only=0
usage() { echo "usage: $0 [--ranks W] [--rates \"R ...\"] [--epochs N] [--format F] [--algorithm A] [--out DIR] [--codec-ns NS] [--report-only]" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) [[ $# -ge 2 ]] || usage; ranks=$2; shift 2 ;;
    --rates) [[ $# -ge 2 ]] || usage; rates=$2; shift 2 ;;
    --epochs) [[ $# -ge 2 ]] || usage; epochs=$2; shift 2 ;;
    --format) [[ $# -ge 2 ]] || usage; format=$2; shift 2 ;;
    --algorithm) [[ $# -ge 2 ]] || usage; algorithm=$2; shift 2 ;;
    --out) [[ $# -ge 2 ]] || usage; out=$2; shift 2 ;;
    --codec-ns) [[ $# -ge 2 ]] || usage; codec_ns=$2; shift 2 ;;
    --report-only) report_only=1; shift ;;
    *) usage ;;
  esac
done
[[ $ranks =~ ^[0-9]+$ && $ranks -ge 2 && $ranks -le 16 ]] || { echo "lab_train.sh: --ranks must be 2 to 16" >&2; exit 2; }
[[ $epochs =~ ^[0-9]+$ && $epochs -ge 1 && $epochs -le 50 ]] || { echo "lab_train.sh: --epochs must be 1 to 50" >&2; exit 2; }
case "$algorithm" in ring|pipelined_ring|two_step|all_gather) ;; *) echo "lab_train.sh: --algorithm: ring, pipelined_ring, two_step or all_gather" >&2; exit 2 ;; esac
build=build/lab
model=$build/examples/cpd-model
params=$(( 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10 ))
cores=$(nproc)
python=/usr/bin/python3
[[ -x $python ]] || { echo "lab_train.sh: needs /usr/bin/python3 to read the outputs" >&2; exit 1; }
if [[ $report_only -eq 0 ]]; then
if [[ $(id -u) -ne 0 ]]; then
  echo "lab_train.sh: needs root for the network lab (network namespaces and tc); run it with sudo" >&2
  exit 77
fi
if [[ "${CPD_SKIP_DEPS:-0}" != 1 ]]; then
  scripts/deps.sh --tests
fi
# One build for the lab: cpd-train as the main job builds it (its -march is fixed to
# x86-64-v3 by examples/CMakeLists.txt, whatever CPD_TRAIN_FLAGS say: every rank and the
# emulation run this binary), cpd-model and netlab_pingpong for this machine (-march=native).
cmake -S . -B $build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="${CPD_TRAIN_FLAGS--march=native}" \
  -DCPD_BUILD_TESTS=ON -DCPD_BUILD_BENCHMARKS=OFF -DCPD_BUILD_EXAMPLES=ON >/dev/null
cmake --build $build --target cpd-train cpd-model netlab_pingpong -j "${CPD_JOBS:-2}"
train=$build/examples/cpd-train
pingpong=$build/tests/mpi/netlab_pingpong
mkdir -p "$out"

hidden=1024,1024
flags=(--workers "$ranks" --hidden $hidden --grad-formats "fp32,$format" --aps on --algorithm "$algorithm"
       --epochs "$epochs" --no-progress --seed 1)

# What the machine's network stack moves in all (two ranks exchanging over unshaped links):
# its CPU cost per byte sent or received, on the ranks' cores (cpd-model --cpu-ns-per-byte).
echo "lab_train.sh: measuring the host's network capacity (2 ranks, 100gbit links)"
scripts/netlab.sh --ranks 2 --rate 100gbit --timeout 120 -- $pingpong --seconds 2 > "$out/pingpong-host.txt"

for rate in $rates; do
  echo "lab_train.sh: $rate: latency and bandwidth"
  scripts/netlab.sh --ranks 2 --rate "$rate" --timeout 120 -- $pingpong --seconds 2 > "$out/pingpong-$rate.txt"
  echo "lab_train.sh: $rate: cpd-train --mpi, $ranks ranks, fp32 and $format with APS ($epochs epoch(s))"
  scripts/netlab.sh --ranks "$ranks" --rate "$rate" --timeout 3600 -- $train --mpi "${flags[@]}" \
    --csv "$out/$rate.csv" > "$out/$rate.txt"
done
echo "lab_train.sh: the same runs emulated in one process"
$train "${flags[@]}" > "$out/emulated.txt"
fi
cpu_ns=$($python -c 'import re,sys; m=re.search(r"exchange_gbit=([0-9.]+)", open(sys.argv[1]).read()); print(1 / (2 * float(m.group(1)) / 8))' "$out/pingpong-host.txt")

$python - "$out" "$model" "$ranks" "$format" "$algorithm" "$params" "$cores" "$cpu_ns" "$epochs" "$codec_ns" $rates <<'EOF'
import csv, re, subprocess, sys
out, model, ranks, fmt, algorithm, params, cores, cpu_ns, epochs, codec_ns = sys.argv[1:11]
rates = sys.argv[11:]

def runs(path):
    """{run: (hash, seconds, exchange_s, steps, other_ms_per_step, final_acc)} from cpd-train's output."""
    text = open(path).read()
    r = {}
    for m in re.finditer(r"weights-hash: ([0-9a-f]+)  \(([^,]+), aps (\w+)\)", text):
        r.setdefault(m.group(2), {})["hash"] = m.group(1)
    for m in re.finditer(r"time: ([0-9.]+) s, exchange ([0-9.]+) s in (\d+) steps \(([0-9.]+) ms per step\), "
                         r"compute and the rest ([0-9.]+) ms per step  \(([^,]+), aps", text):
        r.setdefault(m.group(6), {}).update(seconds=float(m.group(1)), exchange=float(m.group(2)),
                                            steps=int(m.group(3)), other_ms=float(m.group(5)))
    for m in re.finditer(r"^(\S+)\s+(on|off)\s+[0-9.]+\s+[0-9.na]+\s+([0-9.]+)", text, re.M):
        if m.group(1) in r: r[m.group(1)]["acc"] = float(m.group(3))
    return r

emulated = runs(f"{out}/emulated.txt")
rows = []
for rate in rates:
    pp = open(f"{out}/pingpong-{rate}.txt").read()
    alpha = float(re.search(r"alpha_us=([0-9.]+)", pp).group(1))
    gbit = float(re.search(r"bandwidth_gbit=([0-9.]+)", pp).group(1))
    mpi = runs(f"{out}/{rate}.txt")
    f32, low = mpi["fp32"], mpi[fmt]
    compute_ms = (f32["other_ms"] + low["other_ms"]) / 2
    csv_path = f"{out}/model-{rate}.csv"
    subprocess.run([model, "--bandwidth", str(gbit), "--latency", str(alpha), "--values", params,
                    "--workers", ranks, "--formats", fmt, "--algorithms", algorithm, "--tensors", "6",
                    "--compute-ms", f"{compute_ms:.3f}", "--cores", cores, "--cpu-ns-per-byte", cpu_ns,
                    "--codec-ns", f"{fmt}={codec_ns}",
                    "--csv", csv_path], check=True, stdout=subprocess.DEVNULL)
    pred = {r["format"]: r for r in csv.DictReader(open(csv_path))}
    for run, m in (("fp32", f32), (fmt, low)):
        p = pred["fp32" if run == "fp32" else fmt]
        rows.append(dict(rate=rate, run=run, seconds_per_epoch=m["seconds"] / int(epochs),
                         exchange_ms=m["exchange"] / m["steps"] * 1e3, model_exchange_ms=float(p["allreduce_s"]) * 1e3,
                         measured_speedup=f32["seconds"] / m["seconds"], model_speedup=float(p["speedup_vs_fp32"]),
                         accuracy=m.get("acc", float("nan")), hash=m["hash"],
                         emulated_hash=emulated.get(run, {}).get("hash", "-")))
with open(f"{out}/summary.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)
print(f"\n{ranks} ranks, {params} parameters, algorithm {algorithm}, compute per step measured; model: cpd-model")
print(f"{'link':8s} {'run':6s} {'s/epoch':>8s} {'exchange ms/step':>17s} {'model ms/step':>14s} "
      f"{'speedup':>8s} {'model':>7s} {'accuracy':>9s}  weights-hash (MPI = emulated)")
bad = 0
for r in rows:
    same = r["hash"] == r["emulated_hash"]
    bad += not same
    print(f"{r['rate']:8s} {r['run']:6s} {r['seconds_per_epoch']:8.1f} {r['exchange_ms']:17.2f} "
          f"{r['model_exchange_ms']:14.2f} {r['measured_speedup']:7.2f}x {r['model_speedup']:6.2f}x "
          f"{r['accuracy']:9.4f}  {r['hash']} {'=' if same else '!='} {r['emulated_hash']}")
sys.exit(1 if bad else 0)
EOF
