# SPDX-License-Identifier: MIT
"""One rank of the tests' process groups (test_torch.py starts W of them on 127.0.0.1;
gloo on the CPU, or NCCL on a GPU with --backend nccl --device cuda): DDP with
cpd.torch.comm_hook, cpd.torch.all_reduce on tensors that hold NaN, inf, huge and tiny
values, or (--mode agree) ranks that disagree on a call, one case after another in one
process group, then a rank that never comes. Writes what it got to --out (a pickle)."""

import argparse
import os
import pickle
import time

import numpy as np
import torch
import torch.distributed as dist

import cpd.torch as ct

STEPS = 2


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(37, 50), torch.nn.ReLU(), torch.nn.Linear(50, 3000), torch.nn.ReLU(),
                               torch.nn.Linear(3000, 10))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 37, generator=g) * 0.1, torch.randint(0, 10, (16,), generator=g)


def tensors(rank, world):
    g = np.random.default_rng(rank + 17 * world)
    out = []
    for n in (1, 2, 5, 1000, 4097):
        out.append(torch.from_numpy((g.standard_normal(n) * 10.0 ** g.uniform(-6, 3)).astype(np.float32)))
    out[3][7] = 1e30 if rank == 0 else 1.0   # APS puts the other values near zero
    if rank == world - 1:
        out[4][100] = float("nan")          # a NaN: the result holds NaN there, the scale is marked
    return out


def last(r, w):
    return r == w - 1


# What rank r of w passes to cpd.torch.all_reduce (sizes: its tensors'), and the fields the
# MismatchError must name: one case per field, the last rank the odd one out.
AGREE_CASES = [
    ("format", lambda r, w: {"format": "e5m2" if last(r, w) else "e4m3fn"}, {"the format"}),
    ("width", lambda r, w: {"format": "bf16" if last(r, w) else "e4m3fn"}, {"the format"}),
    ("fp4", lambda r, w: {"format": "e2m1fn" if last(r, w) else "e3m2fn"}, {"the format"}),
    ("scaler", lambda r, w: {"scaler": "none" if last(r, w) else "aps"}, {"the scaler"}),
    ("block rule", lambda r, w: {"scaler": "nvfp4" if last(r, w) else "mx32"}, {"the scaler"}),
    ("codec", lambda r, w: {"format": None, "scaler": None, "codec": "int:8" if last(r, w) else "int:4:32"},
     {"the codec"}),
    ("codec or not", lambda r, w: {"format": "fp32", "scaler": None, "codec": None if last(r, w) else "int:8"},
     {"the codec"}),
    ("split", lambda r, w: {"sizes": [40, 60] if last(r, w) else [60, 40]}, {"the sizes"}),
    ("total", lambda r, w: {"sizes": [100 + r]}, {"total elements", "the sizes"}),
    ("count", lambda r, w: {"sizes": [50, 50] if last(r, w) else [100]},
     {"the tensor count", "the sizes", "the streams"}),
    ("mean", lambda r, w: {"mean": not last(r, w)}, {"mean"}),
    ("rounding", lambda r, w: {"rounding": "stochastic" if last(r, w) else "nearest_even"}, {"the rounding"}),
    ("seed", lambda r, w: {"seed": 2 if last(r, w) else 1}, {"the seed"}),
    ("generator", lambda r, w: {"generator": "v1" if last(r, w) else "v2"}, {"the generator"}),
    ("algorithm", lambda r, w: {"algorithm": "all_gather" if last(r, w) else "ring"}, {"the algorithm"}),
    ("kahan", lambda r, w: {"kahan": last(r, w)}, {"kahan"}),
    ("streams", lambda r, w: {"streams": [int(last(r, w)), 8]}, {"the streams"}),
    ("rotation", lambda r, w: {"rotation": 32 if last(r, w) else 16}, {"the rotation block"}),
    ("several", lambda r, w: {"format": "e5m2", "mean": False, "sizes": [60, 41]} if last(r, w) else {},
     {"the format", "mean", "total elements", "the sizes"}),
]
# The same for the DDP hook (what rank r passes to comm_hook; the model is the same everywhere).
HOOK_CASES = [
    ("format", lambda r, w: {"format": "e2m1fn" if last(r, w) else "e4m3fn"}, {"the format"}),
    ("scaler", lambda r, w: {"scaler": "none" if last(r, w) else "aps"}, {"the scaler"}),
    ("rounding", lambda r, w: {"rounding": "stochastic" if last(r, w) else "nearest_even"}, {"the rounding"}),
    ("seed", lambda r, w: {"seed": 7 if last(r, w) else 5}, {"the seed"}),
    ("generator", lambda r, w: {"generator": "v1" if last(r, w) else "v2"}, {"the generator"}),
    ("algorithm", lambda r, w: {"algorithm": "all_gather" if last(r, w) else "ring"}, {"the algorithm"}),
    ("kahan", lambda r, w: {"kahan": last(r, w)}, {"kahan"}),
    ("rotation", lambda r, w: {"rotation": 0 if last(r, w) else 16}, {"the rotation block"}),
]


def agree_tensors(rank, sizes):
    g = np.random.default_rng(1000 + rank)
    return [torch.from_numpy(g.standard_normal(n).astype(np.float32)) for n in sizes]


def run_agree(a):
    """Every case of AGREE_CASES and HOOK_CASES, then an agreeing call, in one process group;
    then the last rank stays away from a call the others make with a 2 s timeout."""
    got = {}
    for name, opts, _ in AGREE_CASES:
        o = {"format": "e4m3fn", "sizes": [60, 40], **opts(a.rank, a.world)}
        ts = agree_tensors(a.rank, o.pop("sizes"))
        before = [t.clone() for t in ts]
        try:
            ct.all_reduce(ts, timeout=60, **o)
            got[name] = ("returned", "")
        except Exception as e:  # noqa: BLE001 (what was raised is the result)
            got[name] = (type(e).__name__, str(e))
        got[name] += (all(torch.equal(t, b) for t, b in zip(ts, before)),)
    for name, opts, _ in HOOK_CASES:
        torch.manual_seed(0)
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(7, 5))
        ddp.register_comm_hook(None, ct.comm_hook(**{"format": "e4m3fn", "timeout": 60, **opts(a.rank, a.world)}))
        try:
            ddp(torch.randn(4, 7)).sum().backward()
            got["hook " + name] = ("returned", "")
        except Exception as e:  # noqa: BLE001
            got["hook " + name] = (type(e).__name__, str(e))
    ts = agree_tensors(a.rank, [60, 40])
    ct.all_reduce(ts, "e4m3fn", rounding="stochastic", seed=3)
    got["agreed"] = [t.numpy().copy() for t in ts]
    start = time.monotonic()
    if last(a.rank, a.world):
        time.sleep(6)  # (alive, elsewhere: the others' timeout must end their wait)
        got["absent"] = ("absent", "", 0.0)
    else:
        try:
            ct.all_reduce(agree_tensors(a.rank, [10]), "e4m3fn", timeout=2)
            got["absent"] = ("returned", "", time.monotonic() - start)
        except Exception as e:  # noqa: BLE001
            got["absent"] = (type(e).__name__, str(e), time.monotonic() - start)
    return got


def main():
    p = argparse.ArgumentParser()
    for a in ("world", "rank", "port"):
        p.add_argument("--" + a, type=int, required=True)
    p.add_argument("--mode", choices=["ddp", "allreduce", "agree"], required=True)
    p.add_argument("--format", required=True)
    p.add_argument("--algorithm", default="ring")
    p.add_argument("--rounding", default="nearest_even")
    p.add_argument("--scaler", default="aps")
    p.add_argument("--kahan", action="store_true")
    p.add_argument("--rotation", type=int, default=0)
    p.add_argument("--codec", default=None)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(a.port)
    torch.set_num_threads(1)
    dev = torch.device(a.device)
    dist.init_process_group(a.backend, rank=a.rank, world_size=a.world, timeout=__import__("datetime").timedelta(seconds=60))
    result = {}
    if a.mode == "agree":
        result = run_agree(a)
        with open(a.out, "wb") as f:
            pickle.dump(result, f)
        os._exit(0)  # (the group is broken by the absent rank: no destroy_process_group)
    if a.mode == "ddp":
        net = make_model().to(dev)
        ddp = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.05,
                                                        device_ids=None if dev.type == "cpu" else [dev])
        hook = ct.comm_hook(a.format, scaler=a.scaler, algorithm=a.algorithm, rounding=a.rounding, kahan=a.kahan,
                            seed=5, record=True, diagnostics=True, rotation=a.rotation, codec=a.codec)
        buckets = []

        def recording_hook(state, bucket):  # each bucket's buffer before and after the hook
            before = bucket.buffer().detach().cpu().numpy().copy()
            fut = hook(state, bucket)
            buckets.append((before, fut.value().detach().cpu().numpy().copy()))
            return fut

        ddp.register_comm_hook(None, recording_hook)
        for step in range(STEPS):
            net.zero_grad()
            x, y = batch(a.rank, step)
            torch.nn.functional.cross_entropy(ddp(x.to(dev)), y.to(dev)).backward()
            result[f"step{step}"] = [q.grad.cpu().numpy().copy() for q in net.parameters()]
        result["buckets"] = buckets
        result["records"] = hook.records
        result["bits_per_value"] = hook.bits_per_value
        result["nonfinite_steps"] = hook.nonfinite_steps
        result["steps"] = hook.steps
        result["stats"] = hook.stats
    else:
        ts = [t.to(dev) for t in tensors(a.rank, a.world)]
        info = ct.all_reduce(ts, a.format, scaler=a.scaler, algorithm=a.algorithm, rounding=a.rounding,
                             kahan=a.kahan, seed=5, rotation=a.rotation, codec=a.codec)
        result["tensors"] = [t.cpu().numpy().copy() for t in ts]
        if a.scaler in ct._BLOCK_RULES:  # (cpd.torch.BlockScale: nonfinite, tensor_scale, codes)
            result["scales"] = [(s.nonfinite, s.tensor_scale, s.codes.copy()) for s in info["scales"]]
        else:
            result["scales"] = [(s.exponent, s.nonfinite) for s in info["scales"]]
        result["statistics_bytes"] = info["statistics_bytes"]
        result["out_nonfinite"] = info["out_nonfinite"]
        result["payload_bytes"] = info["payload_bytes"]
    dist.destroy_process_group()
    with open(a.out, "wb") as f:
        pickle.dump(result, f)


if __name__ == "__main__":
    main()
