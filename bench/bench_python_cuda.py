#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The speed of the Python package on a CUDA GPU (docs/performance.md#python-on-a-gpu), in one run:

cpd.quantize (nearest_even and stochastic) and cpd.encode on a CUDA tensor (256 MiB of float32
by default) against, in the same run:
- the device-to-device copy of the same tensor (y.copy_(x)): the yardstick;
- torch's own round trips through its narrow dtypes (x.to(torch.float8_e4m3fn).to(float32),
  float8_e5m2, float16, bfloat16), where torch has the dtype;
- a QPyTorch/CPD-style float_quantize written in torch operations (bench_python.py's);
and cpd.quantize on bfloat16 and float16 tensors (the same dtype out) against their copy.

Each time is the median of --repeats CUDA-event timings after two warm-up calls, taken two ways:
per call (events around one call, so the Python work before the launch counts) and back to back
(events around --burst calls, divided by --burst: the rate a training step sees while the GPU
queue stays full). The inputs are random normal values times 10^U(-6, 5) (never zeros). Ratios:
copy time / cpd time (1.0 = at the copy's speed), each copy timed the same way. Last, the host
cost of one call (a 1024-value tensor, so the GPU never waits) against torch's copy_, and where
that time goes (cProfile, --profile). Run: python3 bench/bench_python_cuda.py [--size-mib 256] [--csv out.csv], with cpd
(and its CUDA module cpd._cpd_cuda) importable."""

import argparse
import cProfile
import csv
import os
import pstats
import sys
import time

import torch

import cpd
from cpd import _cuda

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_python import EM, float_quantize_torch  # noqa: E402  (the torch-ops baseline, written once)


def median_ms(fn, repeats, burst=1):
    """The median time of fn() in milliseconds, timed with CUDA events on the current stream
    around `burst` calls in a row (divided by burst)."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(burst):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / burst)
    times.sort()
    return times[len(times) // 2]


def host_us(fn, calls=2000):
    """Microseconds of wall time per call of fn over `calls` calls, synchronized at the end."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def overhead(a, rows):
    """The host cost of one call on a tensor too small to keep the GPU busy."""
    x = inputs(1024, torch.float32)
    y = torch.empty_like(x)
    codes = torch.empty(1024, dtype=torch.uint8, device="cuda")
    calls = [("copy_", lambda: y.copy_(x)),
             ("cpd.quantize e4m3fn", lambda: cpd.quantize(x, "e4m3fn", out=y)),
             ("cpd.quantize e4m3fn (new out)", lambda: cpd.quantize(x, "e4m3fn")),
             ("cpd.encode e4m3fn", lambda: cpd.encode(x, "e4m3fn", out=codes)),
             ("torch x.to(float8_e4m3fn).to(float32)", lambda: x.to(torch.float8_e4m3fn).to(torch.float32))]
    print("host cost per call (1024 values):")
    for name, fn in calls:
        us = host_us(fn)
        rows.append(["host_us", "float32", name, "", us / 1e3, "", "host"])
        print(f"  {name:40s} {us:7.1f} us")
    if a.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(500):
            cpd.quantize(x, "e4m3fn", out=y)
        prof.disable()
        torch.cuda.synchronize()
        print("where 500 calls of cpd.quantize(x, 'e4m3fn', out=y) spend their host time:")
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)


def inputs(n, dtype):
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(n, device="cuda", generator=g)
    x *= torch.pow(10.0, torch.empty(n, device="cuda").uniform_(-6, 5, generator=g))
    return x.to(dtype)


TORCH_CASTS = {"e4m3fn": "float8_e4m3fn", "e5m2": "float8_e5m2", "fp16": "float16", "bf16": "bfloat16"}


def bench(a, rows):
    n = a.size_mib * (1 << 20) // 4
    x = inputs(n, torch.float32)
    y = torch.empty_like(x)
    copy = median_ms(lambda: y.copy_(x), a.repeats)
    copy_b = median_ms(lambda: y.copy_(x), a.repeats, a.burst)
    gbs = 2 * x.numel() * 4 / copy / 1e6
    print(f"{torch.cuda.get_device_name()}: {a.size_mib} MiB float32, device copy {copy:.3f} ms ({gbs:.0f} GB/s), "
          f"back to back {copy_b:.3f} ms")
    rows.append(["copy", "float32", "", "", copy, 1.0, "per_call"])
    rows.append(["copy", "float32", "", "", copy_b, 1.0, "back_to_back"])
    codes = torch.empty(n, dtype=torch.uint8, device="cuda")
    codes16 = torch.empty(n, dtype=torch.int16, device="cuda")
    print(f"  {'':31s} per call            back to back ({a.burst} calls)")
    for fmt in a.formats:
        for mode in ("nearest_even", "stochastic"):
            q = lambda: cpd.quantize(x, fmt, rounding=mode, seed=1, out=y)  # noqa: E731
            t, tb = median_ms(q, a.repeats), median_ms(q, a.repeats, a.burst)
            rows.append(["quantize", "float32", fmt, mode, t, copy / t, "per_call"])
            rows.append(["quantize", "float32", fmt, mode, tb, copy_b / tb, "back_to_back"])
            print(f"  quantize {fmt:7s} {mode:13s} {t:7.3f} ms {copy / t:5.2f}x   "
                  f"{tb:7.3f} ms {copy_b / tb:5.2f}x copy")
            out = codes if cpd.finfo(fmt).bits <= 8 else codes16
            e = lambda: cpd.encode(x, fmt, rounding=mode, seed=1, out=out)  # noqa: E731
            te, teb = median_ms(e, a.repeats), median_ms(e, a.repeats, a.burst)
            # encode writes 1 or 2 bytes per value: its yardstick is a copy of 4 + bytes per value
            rows.append(["encode", "float32", fmt, mode, te, copy / te, "per_call"])
            rows.append(["encode", "float32", fmt, mode, teb, copy_b / teb, "back_to_back"])
            print(f"  encode   {fmt:7s} {mode:13s} {te:7.3f} ms {copy / te:5.2f}x   {teb:7.3f} ms {copy_b / teb:5.2f}x "
                  "copy of the floats")
        cast = TORCH_CASTS.get(fmt)
        if cast is not None and hasattr(torch, cast):
            dt = getattr(torch, cast)
            tc = median_ms(lambda: x.to(dt).to(torch.float32), a.repeats)
            rows.append(["torch_cast", "float32", fmt, "nearest_even", tc, copy / tc, "per_call"])
            tq = median_ms(lambda: cpd.quantize(x, fmt, out=y), a.repeats)
            print(f"  torch x.to({cast}).to(float32) {tc:7.3f} ms: cpd.quantize {tc / tq:.2f}x faster")
        e, m = EM[fmt]
        to = median_ms(lambda: float_quantize_torch(x, e, m), max(3, a.repeats // 4))
        rows.append(["torch_ops", "float32", fmt, "nearest_even", to, copy / to, "per_call"])
        print(f"  float_quantize in torch ops {to:7.3f} ms ({copy / to:.2f}x copy)")
    for dtype in (torch.bfloat16, torch.float16):
        xh = inputs(2 * n, dtype)
        yh = torch.empty_like(xh)
        ch = median_ms(lambda: yh.copy_(xh), a.repeats, a.burst)
        for fmt in ("e4m3fn", "e5m2"):
            t = median_ms(lambda: cpd.quantize(xh, fmt, out=yh), a.repeats, a.burst)
            name = str(dtype).split(".")[1]
            rows.append(["quantize", name, fmt, "nearest_even", t, ch / t, "back_to_back"])
            print(f"  {name} tensor ({a.size_mib} MiB) quantize {fmt} {t:.3f} ms  {ch / t:.2f}x its copy "
                  f"({ch:.3f} ms), back to back")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mib", type=int, default=256, help="float32 tensor size in MiB (default 256)")
    p.add_argument("--formats", default="e4m3fn,e5m2,fp16,bf16", help="formats (default e4m3fn,e5m2,fp16,bf16)")
    p.add_argument("--repeats", type=int, default=20, help="timed calls per measurement, median taken")
    p.add_argument("--burst", type=int, default=10, help="calls in a row per back-to-back timing (default 10)")
    p.add_argument("--profile", action="store_true", help="print cProfile's top entries of cpd.quantize's host time")
    p.add_argument("--csv", help="write the measurements to this CSV file")
    a = p.parse_args()
    a.formats = [f for f in a.formats.split(",") if f]
    for f in a.formats:
        if f not in EM:
            p.error(f"--formats: {f} has no torch-ops baseline here (one of {', '.join(EM)})")
    if not torch.cuda.is_available() or not _cuda.available():
        print(f"bench_python_cuda: needs a CUDA GPU and cpd._cpd_cuda ({_cuda.why_missing()})", file=sys.stderr)
        return 77
    print(f"cpd {cpd.__version__}, torch {torch.__version__}")
    rows = []
    bench(a, rows)
    overhead(a, rows)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["what", "dtype", "format", "rounding", "ms", "copy_over_time", "timing"])
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
