# SPDX-License-Identifier: MIT
"""One rank of the tests' process groups (test_torch.py starts W of them on 127.0.0.1;
gloo on the CPU, or NCCL on a GPU with --backend nccl --device cuda): DDP with
cpd.torch.comm_hook, or cpd.torch.all_reduce on tensors that hold NaN, inf, huge and tiny
values. Writes what it got to --out (a pickle)."""

import argparse
import os
import pickle

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


def main():
    p = argparse.ArgumentParser()
    for a in ("world", "rank", "port"):
        p.add_argument("--" + a, type=int, required=True)
    p.add_argument("--mode", choices=["ddp", "allreduce"], required=True)
    p.add_argument("--format", required=True)
    p.add_argument("--algorithm", default="ring")
    p.add_argument("--rounding", default="nearest_even")
    p.add_argument("--scaler", default="aps")
    p.add_argument("--kahan", action="store_true")
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
    if a.mode == "ddp":
        net = make_model().to(dev)
        ddp = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.05,
                                                        device_ids=None if dev.type == "cpu" else [dev])
        hook = ct.comm_hook(a.format, scaler=a.scaler, algorithm=a.algorithm, rounding=a.rounding, kahan=a.kahan,
                            seed=5, record=True, diagnostics=True)
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
        result["steps"] = hook.steps
        result["stats"] = hook.stats
    else:
        ts = [t.to(dev) for t in tensors(a.rank, a.world)]
        info = ct.all_reduce(ts, a.format, scaler=a.scaler, algorithm=a.algorithm, rounding=a.rounding,
                             kahan=a.kahan, seed=5)
        result["tensors"] = [t.cpu().numpy().copy() for t in ts]
        result["scales"] = [(s.exponent, s.nonfinite) for s in info["scales"]]
        result["out_nonfinite"] = info["out_nonfinite"]
        result["payload_bytes"] = info["payload_bytes"]
    dist.destroy_process_group()
    with open(a.out, "wb") as f:
        pickle.dump(result, f)


if __name__ == "__main__":
    main()
