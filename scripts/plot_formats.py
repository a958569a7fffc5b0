#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The formats of 2026 side by side (docs/results.md), from the directory that
scripts/formats_experiment.sh fills (SEED-GROUP.txt with cpd-train's table, SEED-GROUP.csv
with every epoch), next to the per-tensor rules of scripts/scaler_experiment.sh
(SCALERS.csv: docs/img/results-scalers.csv):

    /usr/bin/python3 scripts/plot_formats.py DIR SCALERS.csv OUT.csv OUT.png [EPOCH ...]

Epoch E of a longer cpd-train run is the run of E epochs bit for bit (EPOCHs: the epochs to
report, default 3 and the last). Writes OUT.csv (one row per run and reported epoch: seed,
epochs, group, format, rule, exchange, bits per value with the scales, accuracy, train loss,
its paired difference from fp32 of the same seed, the whole run's flushed fraction, whether
it diverged by then), OUT.png (accuracy against bits per value, a panel per reported epoch)
and prints the markdown table of docs/results.md. "Like fp32" is scaler_experiment's rule:
every seed's difference inside the range of the 8-bit none/aps runs' differences (from
SCALERS.csv) and the mean within one of their standard deviations of 0. Fails when this
experiment's fp32 or e3m0 + mx32 runs differ from SCALERS.csv's (the same runs)."""
import csv
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_output import pyplot, save_figure, table_rows  # noqa: E402

plt = pyplot()

# (group, format, rule) -> the row's family and exchange, in the table's order.
FAMILIES = [
    ("fp32", "fp32", "none", "fp32", "float32 ring"),
    ("nvfp4", "e2m1fn", "nvfp4", "NVFP4", "ring, block scales"),
    ("nvfp4-rotate16", "e2m1fn", "nvfp4", "NVFP4 + Hadamard 16", "ring, block scales"),
    ("mxfp4", "e2m1fn", "mx32", "MXFP4", "ring, block scales"),
    ("mxfp4", "e3m0", "mx32", "e3m0 + MX-32", "ring, block scales"),
    ("mxfp6", "e3m2fn", "mx32", "MXFP6 (E3M2)", "ring, block scales"),
    ("mxfp6", "e2m3fn", "mx32", "MXFP6 (E2M3)", "ring, block scales"),
    ("mxfp8", "e4m3fn", "mx32", "MXFP8 (E4M3)", "ring, block scales"),
    ("mxfp8", "e5m2", "mx32", "MXFP8 (E5M2)", "ring, block scales"),
    ("scalers", "e4m3", "aps", "e4m3 + APS", "ring, one scale"),
    ("scalers", "e5m2", "aps", "e5m2 + APS", "ring, one scale"),
    ("scalers", "e3m0", "aps", "e3m0 + APS", "ring, one scale"),
    ("int", "int:8:32", "-", "int8, a scale per 32", "codec, float sum"),
    ("int", "int:4:32", "-", "int4, a scale per 32", "codec, float sum"),
    ("p3109", "fp:binary8p3se", "-", "P3109 binary8p3se", "codec, float sum"),
    ("p3109", "fp:binary8p4se", "-", "P3109 binary8p4se", "codec, float sum"),
    ("p3109", "fp:e4m3fn", "-", "OCP e4m3fn", "codec, float sum"),
    ("p3109", "fp:e5m2", "-", "OCP e5m2", "codec, float sum"),
    ("posit", "posit:8:2", "-", "posit<8, 2>", "codec, float sum"),
]


def read_run_dir(d):
    """{(seed, group, format, rule): {'bits', 'flushed', 'epochs': {e: (acc, loss)}}}"""
    runs = {}
    for name in sorted(os.listdir(d)):
        m = re.fullmatch(r"(\d+)-(.+)\.txt", name)
        if not m:
            continue
        seed, group = m.group(1), m.group(2)
        here = {(w[0], w[1]): {"bits": float(w[2]), "flushed": float(w[6]), "epochs": {}}
                for w in table_rows(open(os.path.join(d, name)).read())}
        if not here:
            sys.exit(f"{sys.argv[0]}: no table in {name} (did the run fail?)")
        with open(os.path.join(d, f"{seed}-{group}.csv"), newline="") as f:
            for r in csv.DictReader(f):
                rule = {"off": "none", "on": "aps"}.get(r["aps"], r["aps"])
                key = (r["grad_format"], r["aps"]) if (r["grad_format"], r["aps"]) in here else (r["grad_format"], rule)
                here[key]["epochs"][int(r["epoch"])] = (float(r["test_accuracy"]), float(r["train_loss"]))
        for (fmt, rule), v in here.items():
            runs[(seed, group, fmt, {"off": "none", "on": "aps"}.get(rule, rule))] = v
    return runs


def read_scalers(path):
    """{(seed, epochs, format, rule): row} of scaler_experiment's CSV."""
    with open(path, newline="") as f:
        return {(r["seed"], int(r["epochs"]), r["grad_format"], r["scaler"]): r for r in csv.DictReader(f)}


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    d, scalers_csv, out_csv, out_png = sys.argv[1:5]
    runs = read_run_dir(d)
    scalers = read_scalers(scalers_csv)
    last = max(max(v["epochs"]) for v in runs.values())
    report = [int(e) for e in sys.argv[5:]] or sorted({3, last})
    seeds = sorted({k[0] for k in runs})
    fp32 = {(s, e): runs[(s, "fp32", "fp32", "none")]["epochs"][e][0] for s in seeds for e in report}

    # The same runs in both experiments must have the same results (cpd-train's bits).
    for s in seeds:
        for e in report:
            for group, fmt, rule in (("fp32", "fp32", "none"), ("mxfp4", "e3m0", "mx32")):
                old = scalers.get((s, e, fmt, rule))
                new = runs.get((s, group, fmt, rule))
                if old is None or new is None:
                    continue
                if float(old["accuracy"]) != new["epochs"][e][0] or float(old["bits_per_value"]) != new["bits"]:
                    sys.exit(f"{sys.argv[0]}: seed {s}, {e} epochs, {fmt} {rule}: accuracy {new['epochs'][e][0]}, "
                             f"{new['bits']} bits here, {old['accuracy']}, {old['bits_per_value']} in {scalers_csv}")
                print(f"seed {s}, {e} epochs, {fmt} {rule}: the same as in {scalers_csv}")

    rows = []
    for group, fmt, rule, family, exchange in FAMILIES:
        for s in seeds:
            for e in report:
                if group == "scalers":
                    r = scalers.get((s, e, fmt, rule))
                    if r is None:
                        continue
                    acc, loss, bits = float(r["accuracy"]), float(r["train_loss"]), float(r["bits_per_value"])
                    flushed, diverged = float(r["flushed"]), int(r["diverged"])
                else:
                    v = runs.get((s, group, fmt, rule))
                    if v is None:
                        continue
                    acc, loss = v["epochs"][e]
                    bits, flushed = v["bits"], v["flushed"]
                    diverged = int(any(not math.isfinite(v["epochs"][k][1]) for k in v["epochs"] if k <= e))
                rows.append({"seed": s, "epochs": e, "group": group, "grad_format": fmt, "scaler": rule,
                             "family": family, "exchange": exchange, "bits_per_value": bits, "accuracy": acc,
                             "train_loss": loss, "vs_fp32_points": round(100 * (acc - fp32[(s, e)]), 2),
                             "flushed": flushed, "diverged": diverged})
    with open(out_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)

    # The noise: scaler_experiment's 8-bit runs without a rule and with APS, per epoch.
    noise = {}
    for e in report:
        ref = [float(r["vs_fp32_points"]) for (s, ep, fmt, rule), r in scalers.items()
               if ep == e and fmt in ("e5m2", "e4m3") and rule in ("none", "aps") and r["diverged"] == "0"]
        if len(ref) >= 2:
            m = sum(ref) / len(ref)
            sd = math.sqrt(sum((x - m) ** 2 for x in ref) / (len(ref) - 1))
            noise[e] = (min(ref), max(ref), sd)
            print(f"{e} epochs: the 8-bit none/aps runs' paired differences {min(ref):+.2f} .. {max(ref):+.2f} "
                  f"points, sd {sd:.2f} ({len(ref)} runs)")
    for e in report:
        print(f"{e} epochs, fp32: " + " / ".join(f"{fp32[(s, e)]:.4f}" for s in seeds))

    def like_fp32(rs, e):
        if e not in noise or any(r["diverged"] for r in rs):
            return "no"
        lo, hi, sd = noise[e]
        dd = [r["vs_fp32_points"] for r in rs]
        return "yes" if all(lo <= x <= hi for x in dd) and abs(sum(dd) / len(dd)) <= sd else "no"

    head = "".join(f" {e} epochs, seeds {' / '.join(seeds)} | mean | like fp32 |" for e in report)
    print("\n| format | exchange | bits/value |" + head)
    print("|---|---|---|" + "---|---|---|" * len(report))
    for group, fmt, rule, family, exchange in FAMILIES[1:]:
        line = None
        for e in report:
            rs = [r for r in rows if r["group"] == group and r["grad_format"] == fmt and r["scaler"] == rule
                  and r["epochs"] == e]
            if not rs:
                break
            if line is None:
                line = f"| {family} | {exchange} | {rs[0]['bits_per_value']:.2f} |"
            ok = [r["vs_fp32_points"] for r in rs if not r["diverged"]]
            per = " / ".join("diverged" if r["diverged"] else f"{r['vs_fp32_points']:+.2f}" for r in rs)
            mean = f"{sum(ok) / len(ok):+.2f}" if ok else "—"
            line += f" {per} | {mean} | {like_fp32(rs, e)} |"
        if line:
            print(line)

    fig, axes = plt.subplots(1, len(report), figsize=(6.5 * len(report), 5.5), squeeze=False)
    for ax, e in zip(axes[0], report):
        band = [fp32[(s, e)] for s in seeds]
        ax.axhspan(min(band), max(band), color="0.85", label="fp32, the seeds' range" if e == report[0] else None)
        low = 0.8
        for i, (group, fmt, rule, family, exchange) in enumerate(FAMILIES[1:]):
            pts = [(r["bits_per_value"], r["accuracy"]) for r in rows
                   if r["group"] == group and r["grad_format"] == fmt and r["scaler"] == rule and r["epochs"] == e
                   and not r["diverged"]]
            if not pts:
                continue
            low = min([low] + [y for _, y in pts])
            marker = "o" if "block" in exchange else "s" if "one scale" in exchange else "^"
            ax.scatter([x + 0.04 * (i % 5 - 2) for x, _ in pts], [y for _, y in pts], marker=marker,
                       color=plt.cm.tab20(i % 20), s=30, label=f"{family} ({exchange})" if e == report[0] else None)
        ax.set_xlabel("bits per gradient value sent (scales included)")
        ax.set_ylabel("final test accuracy")
        ax.set_title(f"{e} epochs")
        ax.set_ylim(max(low - 0.01, 0.5), max(band) + 0.01)
        ax.grid(alpha=0.3)
    save_figure(fig, 0.78, out_csv, len(rows), out_png)


if __name__ == "__main__":
    main()
