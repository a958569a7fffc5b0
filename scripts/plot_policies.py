#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Accuracy against average bits per value, one point per run, from the CSVs that
scripts/policy_experiment.sh writes (docs/results.md "Hybrid precision"):

    /usr/bin/python3 scripts/plot_policies.py OUT.png CSV [CSV...]

Runs of the policy "-" (no policy) and the others in different markers; each run's
label is its format and scaling rule. A horizontal band marks the fp32 runs' accuracies
(min to max over the seeds) when an fp32 row is present. Prints, per (policy, format,
rule), the mean bits and the mean paired difference from fp32 of the same seed."""
import csv
import sys
from collections import defaultdict

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rows = []
    for path in sys.argv[2:]:
        with open(path, newline="") as f:
            rows += list(csv.DictReader(f))
    fp32 = {r["seed"]: float(r["final_accuracy"]) for r in rows if r["grad_format"] == "fp32"}
    groups = defaultdict(list)
    for r in rows:
        groups[(r["policy"], r["grad_format"].replace("+policy", ""), r["scaler"])].append(r)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    if fp32:
        ax.axhspan(min(fp32.values()), max(fp32.values()), color="0.85", label="fp32 (seeds' range)")
    markers = "os^vD<>pPX*h"
    policies = sorted({k[0] for k in groups})
    for (policy, fmt, rule), rs in sorted(groups.items()):
        if fmt == "fp32":
            continue
        m = markers[policies.index(policy) % len(markers)]
        xs = [float(r["bits_per_value"]) for r in rs]
        ys = [float(r["final_accuracy"]) for r in rs]
        ax.scatter(xs, ys, marker=m, s=28, label=f"{fmt} {rule}: {policy}")
    print("policy | format | rule | bits/value | accuracy (mean) | paired difference from fp32 (mean, per seed)")
    for (policy, fmt, rule), rs in sorted(groups.items()):
        bits = sum(float(r["bits_per_value"]) for r in rs) / len(rs)
        acc = sum(float(r["final_accuracy"]) for r in rs) / len(rs)
        diffs = [float(r["final_accuracy"]) - fp32[r["seed"]] for r in rs if r["seed"] in fp32]
        d = f"{sum(diffs) / len(diffs):+.4f} ({', '.join(f'{x:+.4f}' for x in diffs)})" if diffs else "-"
        print(f"{policy} | {fmt} | {rule} | {bits:.2f} | {acc:.4f} | {d}")
    ax.set_xlabel("average bits per gradient value sent")
    ax.set_ylabel("final test accuracy")
    ax.set_ylim(bottom=max(0.0, ax.get_ylim()[0]))
    ax.legend(fontsize=6, loc="lower right", ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=110)


if __name__ == "__main__":
    main()
