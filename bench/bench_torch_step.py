#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What cpd costs inside one training step (docs/performance.md#python-on-a-gpu), in one run:
a ResNet-18 (torchvision's, 10 classes) on random 3x32x32 images, SGD, one step timed as

- plain: forward, backward, optimizer step, nothing of cpd;
- fakequant: the same model with a cpd.torch.Quantizer after every ReLU (activations E4M3
  forward, their gradients E5M2 backward): the fake-quantization layers' overhead;
- ddp: DistributedDataParallel at world size 1 (NCCL on a GPU, gloo on the CPU), torch's own
  allreduce of the gradient buckets;
- ddp+fp16_compress_hook: torch's hook that casts the buckets to float16 and back;
- ddp+cpd e4m3fn/e5m2: cpd.torch.comm_hook with APS and the ring (on a GPU the exchange stays
  on the device: statistics, scaling, encoding, the codes through the process group).

World size 1 times the work a rank does around the transport (what a multi-GPU node adds is
the transport itself, the same bytes for cpd as the codes it sends). Each figure is the median
of --steps timed steps after --warmup ones (CUDA events on a GPU); the ratio is to plain.
Run: python3 bench/bench_torch_step.py [--batch 256] [--steps 20] [--csv out.csv]."""

import argparse
import csv
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

import cpd
import cpd.torch as ct


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resnet18():
    try:
        import torchvision
        return torchvision.models.resnet18(num_classes=10)
    except ImportError:  # (no torchvision: a small stand-in, said in the output)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
                                   torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
                                   torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))


def with_quantizers(model):
    """model with every ReLU followed by a Quantizer (E4M3 forward, E5M2 backward)."""
    for name, child in model.named_children():
        if isinstance(child, torch.nn.ReLU):
            setattr(model, name, torch.nn.Sequential(child, ct.Quantizer("e4m3fn", "e5m2")))
        else:
            with_quantizers(child)
    return model


class Timer:
    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def __call__(self, fn):
        if self.cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            return a.elapsed_time(b)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


def step_ms(model, x, y, args, timer):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    times = sorted(timer(step) for _ in range(args.steps))
    return times[len(times) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=256, help="images per step (default 256)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per variant, median taken (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    p.add_argument("--device", default="auto", help="cuda, cpu or auto (cuda where torch has it)")
    p.add_argument("--csv", help="write the measurements to this CSV file")
    a = p.parse_args()
    if a.batch < 1 or a.steps < 1 or a.warmup < 0:
        p.error("--batch and --steps must be positive, --warmup not negative")
    dev = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available() else
                       ("cpu" if a.device == "auto" else a.device))
    if dev.type == "cuda" and not cpd._cuda.available():
        print(f"bench_torch_step: {cpd._cuda.why_missing()}", file=sys.stderr)
        return 77
    backend = "nccl" if dev.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        g = torch.Generator(device=dev).manual_seed(1)
        x = torch.randn(a.batch, 3, 32, 32, device=dev, generator=g)
        y = torch.randint(0, 10, (a.batch,), device=dev, generator=g)
        timer = Timer(dev)
        name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
        print(f"cpd {cpd.__version__}, torch {torch.__version__}, {name}, {backend}; batch {a.batch}, "
              f"median of {a.steps} steps")

        def fresh():
            torch.manual_seed(0)
            return resnet18().to(dev)

        def ddp(hook):
            m = torch.nn.parallel.DistributedDataParallel(fresh(), device_ids=[dev.index or 0]
                                                          if dev.type == "cuda" else None)
            if hook is not None:
                m.register_comm_hook(None, hook)
            return m

        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        variants = [("plain", fresh), ("fakequant", lambda: with_quantizers(fresh())),
                    ("ddp", lambda: ddp(None)),
                    ("ddp+fp16_compress_hook", lambda: ddp(default_hooks.fp16_compress_hook)),
                    ("ddp+cpd e4m3fn aps ring", lambda: ddp(ct.comm_hook("e4m3fn", scaler="aps", algorithm="ring"))),
                    ("ddp+cpd e5m2 aps ring", lambda: ddp(ct.comm_hook("e5m2", scaler="aps", algorithm="ring")))]
        rows, plain = [], None
        for label, make in variants:
            ms = step_ms(make(), x, y, a, timer)
            plain = ms if plain is None else plain
            rows.append([label, a.batch, ms, ms / plain])
            print(f"  {label:26s} {ms:8.2f} ms/step  {ms / plain:5.2f}x plain")
        if a.csv:
            with open(a.csv, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["variant", "batch", "ms_per_step", "over_plain"])
                w.writerows(rows)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    sys.exit(main())
