#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The speedup of each format's fastest algorithm over fp32 MPI_Allreduce, from the CSV
rows of bench_mpi_allreduce runs on the network lab (docs/performance.md):

    python3 bench/mpi/lab_summary.py docs/img/lab-2026-11-25.csv > summary.csv

A run's --label must name its link as <rate>gbit (e.g. lab-10gbit-w2). Output columns:
ranks, link_gbit, mib, format, speedup, algorithm (the fastest one for that format).
"""
import csv
import re
import sys


def main(paths):
    if not paths:
        sys.exit(__doc__)
    fp32, best = {}, {}
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                m = re.search(r"(\d+)gbit", row["label"])
                if not m:
                    sys.exit(f"lab_summary: label {row['label']!r} names no <rate>gbit link")
                key = (int(row["ranks"]), int(m.group(1)), int(row["bytes"]) // (1 << 20))
                seconds = float(row["seconds"])
                method = row["method"]
                if method == "fp32 MPI_Allreduce":
                    fp32[key] = seconds
                elif " " in method and not method.startswith(("fp32", "memcpy")):
                    fmt, algorithm = method.split(" ", 1)
                    k = key + (fmt,)
                    if k not in best or seconds < best[k][0]:
                        best[k] = (seconds, algorithm)
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["ranks", "link_gbit", "mib", "format", "speedup", "algorithm"])
    # One series (ranks, size, format) after another, by link rate: a plot's lines connect.
    for k in sorted(best, key=lambda k: (k[0], k[2], k[3], k[1])):
        if k[:3] in fp32:
            out.writerow(list(k) + [f"{fp32[k[:3]] / best[k][0]:.3f}", best[k][1]])


if __name__ == "__main__":
    main(sys.argv[1:])
