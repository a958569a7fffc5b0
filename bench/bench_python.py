#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The speed of the Python package (docs/performance.md#python), in one run:

1. cpd.quantize on a float32 array (64 MiB by default) against the same C++ bulk call
   timed inside the native module (no Python in between), a memory copy of the same
   bytes (numpy.copyto), torch's own bf16 and fp16 round trips, and a QPyTorch/CPD-style
   float_quantize written in torch operations (below); best of --repeats each.
2. --hook: the DDP step of an MLP on --ranks gloo processes with cpd.torch.comm_hook
   against torch's default allreduce and its fp16_compress_hook on the same buckets.

Ratios > 1 mean cpd is faster. Run: .venv/bin/python bench/bench_python.py [--hook], with cpd
pip-installed into .venv (docs/python.md#getting-it)."""

import argparse
import csv
import os
import socket
import sys
import time

import numpy as np
import torch

import cpd


def float_quantize_torch(x, exp_bits, man_bits):
    """Round to nearest-even of a format with exp_bits and man_bits, in torch operations:
    the way CPD's artifact and QPyTorch's reference rounding are written without a kernel
    (sign, exponent by log2/floor, round the scaled significand, clamp to the largest
    finite value; subnormals by the clamped exponent). Values beyond the range saturate."""
    bias = 2 ** (exp_bits - 1) - 1
    emin = 1 - bias
    emax = bias
    max_val = (2 - 2.0 ** -man_bits) * 2.0 ** emax
    a = x.abs()
    e = torch.floor(torch.log2(a)).clamp(min=emin)
    ulp = torch.pow(2.0, e - man_bits)
    q = torch.round(a / ulp) * ulp
    q = torch.clamp(q, max=max_val)
    return torch.copysign(q, x)


def best(fn, repeats):
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


EM = {"e4m3fn": (4, 3), "e5m2": (5, 2), "bf16": (8, 7), "fp16": (5, 10)}


def bench_quantize(a, rows):
    n = a.size_mib * (1 << 20) // 4
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    y = np.empty_like(x)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for threads in a.threads:
        torch.set_num_threads(threads)
        copy = best(lambda: np.copyto(y, x), a.repeats)
        print(f"threads {threads}: memcpy {copy * 1e3:.2f} ms ({2 * x.nbytes / copy / 1e9:.1f} GB/s)", flush=True)
        rows.append(["memcpy", "", threads, copy, "", ""])
        for fmt in a.formats:
            native = cpd._cpd.time_quantize(x, y, fmt, "nearest_even", threads, a.repeats)
            py = best(lambda: cpd.quantize(xt, fmt, out=yt, threads=threads), a.repeats)
            e, m = EM[fmt]
            ops = best(lambda: float_quantize_torch(xt, e, m), max(2, a.repeats // 3))
            line = (f"  {fmt:7s} C++ {native * 1e3:7.2f} ms  cpd.quantize {py * 1e3:7.2f} ms "
                    f"({native / py:.2f}x C++, {copy / py:.2f}x memcpy)  torch ops {ops * 1e3:8.1f} ms "
                    f"({ops / py:.0f}x)")
            cast = None
            if fmt in ("bf16", "fp16"):
                dt = torch.bfloat16 if fmt == "bf16" else torch.float16
                cast = best(lambda: xt.to(dt).to(torch.float32), a.repeats)
                line += f"  torch cast {cast * 1e3:7.1f} ms ({cast / py:.0f}x)"
            print(line, flush=True)
            rows.append(["quantize", fmt, threads, py, native, ops])
            if cast is not None:
                rows.append(["torch_cast", fmt, threads, cast, "", ""])


# --- the hook --------------------------------------------------------------------------

def hook_rank(rank, world, port, width, steps, hooks, q):
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    import cpd.torch as ct
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    res = {}
    for name in hooks:
        torch.manual_seed(0)
        net = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)])
        ddp = torch.nn.parallel.DistributedDataParallel(net)
        if name == "fp16_compress_hook":
            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif name != "fp32 allreduce":
            fmt, algo = name.split(":")
            ddp.register_comm_hook(None, ct.comm_hook(fmt, scaler="aps", algorithm=algo))
        x = torch.randn(8, width)
        times = []
        for s in range(steps + 1):
            dist.barrier()
            t0 = time.perf_counter()
            ddp(x).square().mean().backward()
            times.append(time.perf_counter() - t0)
        res[name] = min(times[1:])
    # the backward alone (no exchange), for the exchange's share
    net = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)])
    x = torch.randn(8, width)
    res["no exchange"] = min(best(lambda: net(x).square().mean().backward(), 1) for _ in range(steps))
    dist.destroy_process_group()
    q.put((rank, res))


def bench_hook(a, rows):
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hooks = ["fp32 allreduce", "fp16_compress_hook"] + [f"{f}:ring" for f in a.hook_formats]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=hook_rank, args=(r, a.ranks, port, a.width, a.steps, hooks, q)) for r in range(a.ranks)]
    for p in ps:
        p.start()
    res = dict(q.get(timeout=1800) for _ in ps)
    for p in ps:
        p.join(timeout=60)
    values = 4 * (a.width * a.width + a.width)
    base = res[0]["no exchange"]
    print(f"hook: {a.ranks} gloo ranks, MLP 4 x {a.width}^2 ({values / 1e6:.1f} M gradient values), step = "
          f"forward + backward + exchange; backward without exchange {base * 1e3:.1f} ms", flush=True)
    fp32 = res[0]["fp32 allreduce"]
    for name in hooks:
        t = max(r[name] for r in res.values())
        ex = t - base
        print(f"  {name:20s} {t * 1e3:8.1f} ms/step  exchange ~{ex * 1e3:7.1f} ms "
              f"({ex * 1e9 / values:.2f} ns/value)  step {fp32 / t:.2f}x fp32", flush=True)
        rows.append(["hook", name, a.ranks, t, ex, values])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mib", type=int, default=64, help="array size in MiB (default 64)")
    p.add_argument("--formats", default="e4m3fn,e5m2,bf16,fp16", help="formats of the quantize part")
    p.add_argument("--threads", default=f"1,{os.cpu_count()}", help="thread counts (default 1,<cores>)")
    p.add_argument("--repeats", type=int, default=10, help="timed calls per measurement, best taken (default 10)")
    p.add_argument("--hook", action="store_true", help="also time the DDP hook")
    p.add_argument("--no-quantize", action="store_true", help="skip the quantize part")
    p.add_argument("--ranks", type=int, default=2, help="gloo processes of the hook part (default 2)")
    p.add_argument("--width", type=int, default=1024, help="the hook part's MLP width (default 1024)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per hook (default 5)")
    p.add_argument("--hook-formats", default="e4m3fn,bf16", help="cpd hook formats (default e4m3fn,bf16)")
    p.add_argument("--csv", help="write the measurements to this CSV file")
    a = p.parse_args()
    a.formats = [f for f in a.formats.split(",") if f]
    for f in a.formats:
        if f not in EM:
            p.error(f"--formats: {f} has no torch-ops baseline here (one of {', '.join(EM)})")
    a.threads = sorted({int(t) for t in a.threads.split(",")})
    a.hook_formats = [f for f in a.hook_formats.split(",") if f]
    print(f"cpd {cpd.__version__}, torch {torch.__version__}, numpy {np.__version__}, {os.cpu_count()} cores",
          flush=True)
    rows = []
    if not a.no_quantize:
        bench_quantize(a, rows)
    if a.hook:
        bench_hook(a, rows)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["what", "format", "threads_or_ranks", "seconds", "cxx_or_exchange_seconds",
                        "torch_ops_seconds_or_values"])
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
