#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The scaling rules side by side (docs/results.md), from the directory that
scripts/scaler_experiment.sh fills (SEED-FORMAT.txt with cpd-train's table, SEED-FORMAT.csv
with every epoch):

    /usr/bin/python3 scripts/plot_scalers.py DIR OUT.csv OUT.png [EPOCH ...]

cpd-train has no schedule that depends on --epochs, so epoch E of a longer run is the run
of E epochs bit for bit: one 8-epoch experiment gives the 3-epoch task too (EPOCHs: the
epochs to report, default 3 and the last). Writes OUT.csv (one row per run and reported
epoch: seed, epochs, format, rule, bits per value, accuracy, train loss, its paired
difference from fp32 of the same seed, flushed and overflowed fractions of the whole run,
the steps loss scaling skipped, whether it diverged by then), OUT.png (accuracy against
bits per value, one point per run, a panel per reported epoch), and prints the markdown
table of docs/results.md: the paired differences per seed, and the mean."""
import csv
import math
import os
import re
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_output import pyplot, save_figure, table_rows  # noqa: E402

plt = pyplot()

RULES = ["none", "aps", "amax", "amax-sqrtw", "predivide", "delayed", "mx32", "loss"]


def column_rule(aps):
    """The table's APS column back to the --scaler name."""
    return {"off": "none", "on": "aps"}.get(aps, aps)


def read_run_dir(d):
    """{(seed, format, rule): {'bits', 'flushed', 'overflowed', 'skipped', 'epochs': {e: (acc, loss)}}}"""
    runs = {}
    for name in sorted(os.listdir(d)):
        m = re.fullmatch(r"(\d+)-(.+)\.txt", name)
        if not m:
            continue
        seed, fmt = m.group(1), m.group(2)
        text = open(os.path.join(d, name)).read()
        for w in table_rows(text):
            runs[(seed, w[0], column_rule(w[1]))] = {
                "bits": float(w[2]), "flushed": float(w[6]), "overflowed": float(w[7]), "skipped": "", "epochs": {}}
        for line in text.splitlines():
            sk = re.match(r"loss scaling: (\d+) of (\d+) steps skipped.*\((\S+), aps (\S+)\)", line)
            if sk:
                runs[(seed, sk.group(3), column_rule(sk.group(4)))]["skipped"] = sk.group(1)
        with open(os.path.join(d, f"{seed}-{fmt}.csv"), newline="") as f:
            for r in csv.DictReader(f):
                key = (seed, r["grad_format"], column_rule(r["aps"]))
                runs[key]["epochs"][int(r["epoch"])] = (float(r["test_accuracy"]), float(r["train_loss"]))
    return runs


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    d, out_csv, out_png = sys.argv[1:4]
    runs = read_run_dir(d)
    last = max(max(v["epochs"]) for v in runs.values())
    report = [int(e) for e in sys.argv[4:]] or sorted({3, last})
    fp32 = {(s, e): v["epochs"][e][0] for (s, f, _), v in runs.items() if f == "fp32" for e in report}
    rows = []
    for (seed, fmt, rule), v in sorted(runs.items()):
        for e in report:
            acc, loss = v["epochs"][e]
            diverged = any(not math.isfinite(v["epochs"][k][1]) for k in v["epochs"] if k <= e)
            rows.append({"seed": seed, "epochs": e, "grad_format": fmt, "scaler": rule, "bits_per_value": v["bits"],
                         "accuracy": acc, "train_loss": loss,
                         "vs_fp32_points": round(100 * (acc - fp32[(seed, e)]), 2) if (seed, e) in fp32 else math.nan,
                         "flushed": v["flushed"], "overflowed": v["overflowed"], "skipped_steps": v["skipped"],
                         "diverged": int(diverged)})
    with open(out_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)

    formats = [f for f in ["e5m2", "e4m3", "e3m0", "e2m1"] if any(r["grad_format"] == f for r in rows)]
    seeds = sorted({r["seed"] for r in rows})

    def cells(fmt, rule, e):
        rs = sorted((r for r in rows if r["grad_format"] == fmt and r["scaler"] == rule and r["epochs"] == e),
                    key=lambda r: r["seed"])
        if not rs:
            return None
        if all(r["diverged"] for r in rs):
            return rs, "diverged in all", "—"
        per = " / ".join("diverged" if r["diverged"] else f"{r['vs_fp32_points']:+.2f}" for r in rs)
        ok = [r["vs_fp32_points"] for r in rs if not r["diverged"]]
        mean = f"{sum(ok) / len(ok):+.2f}" + ("" if len(ok) == len(rs) else f" ({len(ok)} seeds)")
        return rs, per, mean

    # The noise: the paired differences of the 8-bit runs without a rule and with APS (the
    # runs of docs/results.md's "Seed-to-seed spread"), per reported epoch. A rule is "like
    # fp32" when every seed's difference lies in their range and the mean within one
    # standard deviation of 0.
    noise = {}
    for e in report:
        ref = [r["vs_fp32_points"] for r in rows if r["epochs"] == e and r["grad_format"] in ("e5m2", "e4m3")
               and r["scaler"] in ("none", "aps") and not r["diverged"]]
        if len(ref) >= 2:
            m = sum(ref) / len(ref)
            sd = math.sqrt(sum((x - m) ** 2 for x in ref) / (len(ref) - 1))
            noise[e] = (min(ref), max(ref), sd)
            print(f"{e} epochs: the 8-bit none/aps runs' paired differences {min(ref):+.2f} .. {max(ref):+.2f} "
                  f"points, sd {sd:.2f} ({len(ref)} runs)")

    def like_fp32(rs, e):
        if e not in noise or any(r["diverged"] for r in rs):
            return "no"
        lo, hi, sd = noise[e]
        d = [r["vs_fp32_points"] for r in rs]
        return "yes" if all(lo <= x <= hi for x in d) and abs(sum(d) / len(d)) <= sd else "no"

    for e in report:
        print(f"{e} epochs, fp32: " + " / ".join(f"{fp32.get((s, e), math.nan):.4f}" for s in seeds))
    head = "".join(f" {e} epochs, seeds {' / '.join(seeds)} | mean | like fp32 |" for e in report)
    print("\n| format | rule | bits/value |" + head)
    print("|---|---|---|" + "---|---|---|" * len(report))
    for fmt in formats:
        for rule in RULES:
            got = [cells(fmt, rule, e) for e in report]
            if got[0] is None:
                continue
            line = f"| {fmt} | {rule} | {got[0][0][0]['bits_per_value']:.2f} |"
            for e, (rs, per, mean) in zip(report, got):
                line += f" {per} | {mean} | {like_fp32(rs, e)} |"
            print(line)
    skipped = [f"{r['grad_format']} seed {r['seed']}: {r['skipped_steps']}" for r in rows
               if r["scaler"] == "loss" and r["epochs"] == report[-1]]
    if skipped:
        print("\nloss scaling, steps skipped: " + ", ".join(skipped))

    fig, axes = plt.subplots(1, len(report), figsize=(6.5 * len(report), 5.5), squeeze=False)
    markers = {"e5m2": "o", "e4m3": "s", "e3m0": "^", "e2m1": "D"}
    for ax, e in zip(axes[0], report):
        band = [fp32[(s, e)] for s in seeds if (s, e) in fp32] or [0.86]
        ax.axhspan(min(band), max(band), color="0.85", label="fp32, the seeds' range" if e == report[0] else None)
        left_out = 0
        top = max(band)
        for fmt in formats:
            for i, rule in enumerate(RULES):
                pts = [(r["bits_per_value"], r["accuracy"]) for r in rows
                       if r["grad_format"] == fmt and r["scaler"] == rule and r["epochs"] == e]
                shown = [(x, y) for x, y in pts if y >= 0.7]
                left_out += len(pts) - len(shown)
                top = max([top] + [y for _, y in shown])
                if shown:
                    ax.scatter([x + 0.03 * (i - 3.5) for x, _ in shown], [y for _, y in shown], marker=markers[fmt],
                               color=f"C{i}", s=28, label=f"{fmt} {rule}" if e == report[0] else None)
        ax.set_xlabel("bits per gradient value sent")
        ax.set_ylabel("final test accuracy")
        ax.set_title(f"{e} epochs ({left_out} runs below 0.7 or diverged, not shown)")
        ax.set_ylim(0.7, top + 0.01)
        ax.grid(alpha=0.3)
    save_figure(fig, 0.84, out_csv, len(rows), out_png)


if __name__ == "__main__":
    main()
