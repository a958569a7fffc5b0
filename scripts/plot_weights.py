#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Training without fp32 master weights, from scripts/weights_experiment.sh's CSV
(docs/results.md "Without fp32 master weights"):

    /usr/bin/python3 scripts/plot_weights.py OUT.png CSV

Two panels, one point per seed: each configuration's final test accuracy and final
train loss minus those of fp32 (--grad-formats fp32 --aps off) of the same seed.
Prints the same numbers as a table."""
import csv
import sys
from collections import defaultdict

try:
    import matplotlib
except ImportError:
    sys.exit(f"{sys.argv[0]}: needs matplotlib (Debian: apt-get install python3-matplotlib; run with /usr/bin/python3)")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def label(r):
    c = r["config"].split()
    opt = dict(zip(c[::2], c[1::2]))
    if "--weights" not in opt:
        return f"{r['grad_format']} gradients, fp32 weights" if r["grad_format"] != "fp32" else "fp32"
    return f"{opt['--weights']} throughout, {opt['--update-rounding']} updates"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[2], newline="") as f:
        rows = list(csv.DictReader(f))
    base = {r["seed"]: r for r in rows if r["grad_format"] == "fp32"}
    groups = defaultdict(list)
    for r in rows:
        if r["grad_format"] != "fp32":
            groups[label(r)].append(r)
    names = sorted(groups)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    print("configuration | accuracy, seeds | vs fp32 (points) | train loss vs fp32")
    for i, name in enumerate(names):
        rs = sorted(groups[name], key=lambda r: r["seed"])
        da = [100 * (float(r["final_accuracy"]) - float(base[r["seed"]]["final_accuracy"])) for r in rs]
        dl = [float(r["final_loss"]) - float(base[r["seed"]]["final_loss"]) for r in rs]
        axes[0].scatter(da, [i] * len(da), color="C0")
        axes[1].scatter(dl, [i] * len(dl), color="C1")
        print(f"{name} | {' / '.join(r['final_accuracy'] for r in rs)} | "
              f"{' / '.join(f'{x:+.2f}' for x in da)} | {' / '.join(f'{x:+.4f}' for x in dl)}")
    for ax in axes:
        ax.axvline(0, color="0.5", lw=1)
        ax.grid(alpha=0.3)
    axes[0].set_yticks(range(len(names)), names, fontsize=8)
    axes[0].set_xlabel("final test accuracy minus fp32's, same seed (points)")
    axes[1].set_xlabel("final train loss minus fp32's, same seed")
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=110)


if __name__ == "__main__":
    main()
