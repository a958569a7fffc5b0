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

try:
    import matplotlib
except ImportError:
    sys.exit(f"{sys.argv[0]}: needs matplotlib (Debian: apt-get install python3-matplotlib; run with /usr/bin/python3)")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rows = []
    for path in sys.argv[2:]:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if "policy" not in r:  # another experiment's CSV (weights_experiment.sh): its fp32 runs only
                    if r["grad_format"] != "fp32":
                        continue
                    r["policy"] = "-"
                    r["scaler"] = r.get("aps", "off")
                rows.append(r)
    fp32 = {r["seed"]: float(r["final_accuracy"]) for r in rows if r["grad_format"] == "fp32"}
    groups = defaultdict(list)
    for r in rows:
        groups[(r["policy"], r["grad_format"].replace("+policy", ""), r["scaler"])].append(r)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    if fp32:
        ax.axhspan(min(fp32.values()), max(fp32.values()), color="0.85", label="fp32, the seeds' range")
    # colour: the base format and scaling rule; marker: the kind of policy. Runs below 0.7
    # (diverged or untrained) are left out of the picture and counted in its title.
    kinds = {"-": ("o", "no policy"), "tensors": ("s", "per tensor"), "from": ("^", "phase"),
             "adapt": ("D", "adaptive")}
    combos = sorted({(k[1], k[2]) for k in groups if k[1] != "fp32"})
    left_out = 0
    seen = set()
    for (policy, fmt, rule), rs in sorted(groups.items()):
        if fmt == "fp32":
            continue
        kind = policy.split()[0] if policy != "-" else "-"
        m, kname = kinds.get(kind, ("x", kind))
        c = f"C{combos.index((fmt, rule)) % 10}"
        pts = [(float(r["bits_per_value"]), float(r["final_accuracy"])) for r in rs]
        left_out += sum(1 for _, y in pts if y < 0.7)
        pts = [(x, y) for x, y in pts if y >= 0.7]
        lab = None
        if (fmt, rule, kind) not in seen:
            seen.add((fmt, rule, kind))
            lab = f"{fmt} {rule}, {kname}"
        if pts:
            ax.scatter([x for x, _ in pts], [y for _, y in pts], marker=m, color=c, s=30, alpha=0.8, label=lab)
    ax.set_title(f"one point per run and seed; {left_out} runs below 0.70 (diverged or flushed) not shown",
                 fontsize=9)
    # Indistinguishable from fp32: every seed's paired difference inside the range of the
    # 8-bit runs' paired differences (docs/results.md "Seed-to-seed spread": -0.48 .. +0.61
    # points) and their mean within one standard deviation of them (0.38 points).
    lo, hi, sd = -0.0048, 0.0061, 0.0038
    print("policy | format | rule | bits/value | accuracy (mean) | paired difference from fp32 (mean, per seed) "
          "| like fp32")
    for (policy, fmt, rule), rs in sorted(groups.items()):
        bits = sum(float(r["bits_per_value"]) for r in rs) / len(rs)
        acc = sum(float(r["final_accuracy"]) for r in rs) / len(rs)
        diffs = [float(r["final_accuracy"]) - fp32[r["seed"]] for r in rs if r["seed"] in fp32]
        d = f"{sum(diffs) / len(diffs):+.4f} ({', '.join(f'{x:+.4f}' for x in diffs)})" if diffs else "-"
        like = bool(diffs) and all(lo <= x <= hi for x in diffs) and abs(sum(diffs) / len(diffs)) <= sd
        print(f"{policy} | {fmt} | {rule} | {bits:.2f} | {acc:.4f} | {d} | {'yes' if like else 'no'}")
    ax.set_xlabel("average bits per gradient value sent")
    ax.set_ylabel("final test accuracy")
    top = max([float(r["final_accuracy"]) for r in rows] + [0.87])
    ax.set_ylim(0.7, top + 0.005)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=110)


if __name__ == "__main__":
    main()
