#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Ratios of bench_bulk results to memcpy of the same size, from Google Benchmark JSON.

  python3 bench/bulk_ratios.py bulk.json [more.json ...]

Uses the median aggregate when the run had repetitions, else the single run.
bytes ratio = bytes_per_second / memcpy's; element ratio = items_per_second /
memcpy's (memcpy of n float32 moves 8n bytes, n elements). Two-thread runs are
compared with BM_memcpy_2threads of the same size.
"""
import json
import re
import sys


def load(paths):
    runs = {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for b in data["benchmarks"]:
            if b.get("error_occurred"):
                continue
            agg = b.get("aggregate_name")
            if agg not in (None, "median"):
                continue
            name = b["run_name"] if "run_name" in b else b["name"]
            name = re.sub(r"/real_time$", "", name)
            if agg == "median" or name not in runs:
                runs[name] = b
    return runs


def size_of(name):
    m = re.search(r"/(\d+)(/-?\d+)?$", name)
    return int(m.group(1)) if m else None


def main():
    runs = load(sys.argv[1:])
    print("| benchmark | elements | GB/s | Gelem/s | bytes / memcpy | elements / memcpy |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, b in runs.items():
        n = size_of(name)
        ref_name = ("BM_memcpy_2threads/%d" if "2threads" in name else "BM_memcpy/%d") % n
        ref = runs.get(ref_name)
        bps, ips = b.get("bytes_per_second", 0), b.get("items_per_second", 0)
        rb = bps / ref["bytes_per_second"] if ref else float("nan")
        ri = ips / ref["items_per_second"] if ref else float("nan")
        print("| %s | %d | %.2f | %.3f | %.2f | %.2f |" % (name, n, bps / 1e9, ips / 1e9, rb, ri))


if __name__ == "__main__":
    main()
