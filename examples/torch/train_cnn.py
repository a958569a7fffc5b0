#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Trains a LeNet-5-like CNN on Fashion-MNIST with data-parallel workers whose
gradients are exchanged in a low-precision format (cpd.torch), with and without APS.

Two modes, the same training:

- emulated (default): W workers inside one process (cpd.torch.EmulatedWorkers): every
  global batch is split into W shards along dim 0, each shard's gradient is one worker's,
  and the W gradients are summed by cpd's simulated ring, every partial sum rounded to the
  format (APS per tensor), the mean written into p.grad.
- ddp: W processes (torch.multiprocessing, gloo on 127.0.0.1), torch DDP with
  cpd.torch.comm_hook averaging every bucket in the format; rank r takes shard r of every
  global batch (the same shards as the emulated mode). fp32 is plain DDP allreduce.

Every run of a seed starts from the same weights (torch.manual_seed(seed)) and sees the
same global batches (torch.randperm with a torch.Generator seeded by the seed, one
permutation per epoch, the last partial batch dropped); only the exchange differs.
SGD with momentum, cross-entropy, pixels scaled to [0, 1], no augmentation.

Output: a progress line per epoch on standard error; at the end the table of runs
(markdown; the columns of cpd-train's table) and, with several seeds, the mean and the
seed-to-seed spread of every configuration, on standard output; --out-csv writes one row
per run and epoch plus a row `final` per run; --plot a PNG (accuracy per epoch, and the
final accuracy of every seed).

Exit status: 0 all runs trained and every output was written; 1 an output could not be
written or a DDP worker failed; 2 the command line or the data was rejected (a missing
dataset names `apt-get install dataset-fashion-mnist`); 3 everything was written but at
least one run diverged (its loss or weights became NaN or infinite).

Needs the Python package cpd on PYTHONPATH (<build>/python after
`cmake --preset ci -DCPD_BUILD_PYTHON=ON && cmake --build build/ci --target cpd_python_native`)
and Debian's python3-torch (run with /usr/bin/python3); scripts/train_cnn.sh does both.
"""

import argparse
import gzip
import hashlib
import json
import math
import os
import socket
import struct
import sys
import tempfile
import time

PROG = "train_cnn.py"
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
FILES = {
    "train_x": "train-images-idx3-ubyte.gz",
    "train_y": "train-labels-idx1-ubyte.gz",
    "test_x": "t10k-images-idx3-ubyte.gz",
    "test_y": "t10k-labels-idx1-ubyte.gz",
}
EXIT_OK, EXIT_IO, EXIT_USAGE, EXIT_DIVERGED = 0, 1, 2, 3


class UsageError(Exception):
    """A rejected command line or data directory (exit status 2)."""


def fail(status, message):
    print(f"{PROG}: {message}", file=sys.stderr)
    sys.exit(status)


# --- the command line ------------------------------------------------------------------

class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows the defaults, except where there is none (None, or a flag's False)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def make_parser():
    """The command line's flags, their defaults and their help."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description="A LeNet-5-like CNN on Fashion-MNIST with W data-parallel workers whose gradients are "
                    "exchanged in low precision by cpd (cpd.torch), with and without APS. Runs: every "
                    "--seeds x --formats x --aps; fp32 runs once per seed (see --fp32-aps-too).",
        epilog="Exit status: 0 ok; 1 an output could not be written or a DDP worker failed; 2 bad command "
               "line or missing data; 3 everything written, but a run diverged.",
        formatter_class=HelpFormatter)
    p.add_argument("--mode", choices=("emulated", "ddp"), default="emulated",
                   help="emulated: W workers in this process (cpd.torch.EmulatedWorkers); ddp: W gloo processes "
                        "on 127.0.0.1 with torch DDP and cpd.torch.comm_hook")
    p.add_argument("--workers", type=int, default=None,
                   help="data-parallel workers W (default 8 emulated, 4 ddp); each takes 1/W of every batch")
    p.add_argument("--formats", default="fp32,e5m2,e4m3,e3m0",
                   help="gradient formats, comma-separated: fp32 or any format of cpd.exchange_formats() "
                        "(e5m2, e4m3 = IEEE-like E4M3 as in cpd-train, e4m3fn, e3m0, bf16, fp16, ...)")
    p.add_argument("--aps", default="off,on",
                   help="APS (per-tensor power-of-two scaling, Han et al. PPoPP 2021): off, on or off,on")
    p.add_argument("--exchanges", default=None, metavar="LIST",
                   help="instead of --formats x --aps, these exchanges, comma-separated: FORMAT/SCALING with "
                        "SCALING off (no scale), on (APS), mx32 (OCP MX: a power of two per 32 values) or nvfp4 "
                        "(an E4M3 scale per 16 values and a tensor scale), optionally +hB (a random Hadamard "
                        "rotation in blocks of B), e.g. e2m1fn/nvfp4+h16; or codec=SPEC, a cpd gradient codec "
                        "(int:8:32, fp:binary8p3se, posit:8, ...); in ddp mode through cpd.torch.comm_hook too")
    p.add_argument("--fp32-aps-too", action="store_true",
                   help="also run fp32 with APS on; by default fp32 runs once (APS off), because scaling a "
                        "float32 sum by a power of two changes no bit")
    p.add_argument("--epochs", type=int, default=5,
                   help="epochs per run (the default run, 7 runs of 5 epochs, takes about 8 minutes on 2 cores)")
    p.add_argument("--batch", type=int, default=256, help="global batch size (split over the workers)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--seed", type=int, default=None, help="one seed (same as --seeds N)")
    p.add_argument("--seeds", default="1",
                   help="seeds, comma-separated: each seed fixes the initial weights and the data order")
    p.add_argument("--data", default=DEFAULT_DATA,
                   help="directory holding Fashion-MNIST's four *-ubyte.gz files (Debian: dataset-fashion-mnist)")
    p.add_argument("--out-csv", default=None, metavar="FILE",
                   help="CSV: one row per run and epoch, plus one row 'final' per run")
    p.add_argument("--plot", default=None, metavar="PNG",
                   help="PNG (matplotlib): test accuracy per epoch of every configuration and the final "
                        "accuracy of every seed")
    p.add_argument("--plot-from", default=None, metavar="CSV[,CSV...]",
                   help="train nothing: print the tables (and draw --plot) of the runs in CSVs that --out-csv "
                        "wrote (e.g. one per seed, run side by side)")
    p.add_argument("--limit-train", type=int, default=0, metavar="N",
                   help="use only the first N training images (0: all 60000); for quick tests")
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads (and cpd's threads) per process; in ddp mode every one of the "
                        "W processes gets this many")
    p.add_argument("--ddp-fp32", choices=("allreduce", "cpd"), default="allreduce",
                   help="ddp mode's fp32: DDP's own allreduce (gloo), or cpd's hook with fp32 (float32 sums "
                        "in ring order)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on standard error")
    return p


def parse_args(argv):
    """The flags of argv, checked; a UsageError names the flag and its value."""
    a = make_parser().parse_args(argv)
    if a.workers is None:
        a.workers = 8 if a.mode == "emulated" else 4
    if not 1 <= a.workers <= 256:
        raise UsageError(f"--workers {a.workers}: must be 1 to 256")
    for name in ("epochs", "batch"):
        if getattr(a, name) < 1:
            raise UsageError(f"--{name} {getattr(a, name)}: must be at least 1")
    if a.batch < a.workers:
        raise UsageError(f"--batch {a.batch}: smaller than --workers {a.workers} (every worker needs a sample)")
    if not (math.isfinite(a.lr) and a.lr > 0):
        raise UsageError(f"--lr {a.lr}: must be a finite number > 0")
    if not (math.isfinite(a.momentum) and 0 <= a.momentum < 1):
        raise UsageError(f"--momentum {a.momentum}: must be in [0, 1)")
    if a.limit_train < 0:
        raise UsageError(f"--limit-train {a.limit_train}: must be >= 0")
    if a.threads < 1:
        raise UsageError(f"--threads {a.threads}: must be at least 1")
    a.formats = split_list("--formats", a.formats)
    a.aps = split_list("--aps", a.aps)
    for v in a.aps:
        if v not in ("off", "on"):
            raise UsageError(f"--aps: '{v}' is not off or on")
    a.exchanges = parse_exchanges(a.exchanges) if a.exchanges is not None else None
    seeds = split_list("--seeds", a.seeds) if a.seed is None else [str(a.seed)]
    try:
        a.seeds = [int(s) for s in seeds]
    except ValueError:
        raise UsageError(f"--seeds {','.join(seeds)}: not a list of integers") from None
    if any(not 0 <= s < 2**63 for s in a.seeds):
        raise UsageError("--seeds: every seed must be in [0, 2**63)")
    if a.out_csv is not None and a.out_csv == a.plot:
        raise UsageError("--out-csv and --plot name the same file")
    return a


def split_list(flag, text):
    items = [s.strip() for s in text.split(",")]
    if not items or any(not s for s in items):
        raise UsageError(f"{flag} '{text}': empty item")
    if len(set(items)) != len(items):
        raise UsageError(f"{flag} '{text}': an item appears twice")
    return items


def parse_exchanges(text):
    """--exchanges: the (format, scaling) pairs; a codec is (SPEC, "codec")."""
    configs = []
    for item in split_list("--exchanges", text):
        if item.startswith("codec="):
            spec = item[len("codec="):]
            if not spec:
                raise UsageError(f"--exchanges: '{item}' names no codec")
            configs.append((spec, "codec"))
            continue
        fmt, slash, scaling = item.partition("/")
        rule, plus, block = scaling.partition("+h")
        if not slash or not fmt or rule not in ("off", "on", "mx32", "nvfp4") or (plus and not block.isdigit()):
            raise UsageError(f"--exchanges: '{item}' is not FORMAT/SCALING (SCALING off, on, mx32 or nvfp4, "
                             "optionally +hB) or codec=SPEC")
        configs.append((fmt, scaling))
    return configs


def exchange_options(fmt, scaling):
    """The cpd.torch options of one configuration (format, scaling): format, scaler, codec, rotation."""
    if scaling == "codec":
        return {"format": None, "scaler": None, "codec": fmt}
    rule, _, block = scaling.partition("+h")
    return {"format": fmt, "scaler": {"off": "none", "on": "aps"}.get(rule, rule),
            "rotation": int(block) if block else 0}


def make_workers(model, workers, fmt, scaling, threads):
    """The EmulatedWorkers of one configuration (format, scaling)."""
    import cpd.torch as ct
    o = exchange_options(fmt, scaling)
    return ct.EmulatedWorkers(model, workers, o.pop("format"), threads=threads, **o)


def check_configs(configs, workers):
    """Rejects a format, codec or rotation the way cpd does (its own message)."""
    import torch
    for f, scaling in configs:
        if f == "fp32" and scaling in ("off", "on"):
            continue
        try:
            make_workers(torch.nn.Linear(1, 1), workers, f, scaling, 1)
        except (ValueError, TypeError) as e:
            raise UsageError(f"--{'exchanges' if scaling not in ('off', 'on') else 'formats'}: {e}") from None


def run_configs(args):
    if args.exchanges is not None:
        return args.exchanges
    configs = []
    for f in args.formats:
        for aps in args.aps:
            if f == "fp32" and aps == "on" and "off" in args.aps and not args.fp32_aps_too:
                continue
            configs.append((f, aps))
    return configs


# --- the data ---------------------------------------------------------------------------

def read_idx(path, kind):
    """An idx file (gzip) as a torch uint8 tensor: images (n, 28, 28) or labels (n,)."""
    import torch
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise UsageError(f"--data: {path}: {e}") from None
    magic = 2051 if kind == "images" else 2049
    dims = 3 if kind == "images" else 1
    if len(raw) < 4 + 4 * dims or struct.unpack(">I", raw[:4])[0] != magic:
        raise UsageError(f"--data: {path}: not an idx {kind} file (magic number)")
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    n = 1
    for s in shape:
        n *= s
    body = raw[4 + 4 * dims:]
    if len(body) != n:
        raise UsageError(f"--data: {path}: {len(body)} bytes of data for the shape {shape}")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(shape)


def load_data(directory, limit):
    if not os.path.isdir(directory):
        raise UsageError(f"--data {directory}: no such directory; Fashion-MNIST comes with Debian's "
                         "`apt-get install dataset-fashion-mnist` (into /usr/share/datasets/fashion-mnist)")
    missing = [f for f in FILES.values() if not os.path.isfile(os.path.join(directory, f))]
    if missing:
        raise UsageError(f"--data {directory}: missing {', '.join(missing)}; Fashion-MNIST comes with Debian's "
                         "`apt-get install dataset-fashion-mnist` (into /usr/share/datasets/fashion-mnist)")
    d = {k: read_idx(os.path.join(directory, f), "images" if k.endswith("_x") else "labels")
         for k, f in FILES.items()}
    for part in ("train", "test"):
        if len(d[part + "_x"]) != len(d[part + "_y"]) or tuple(d[part + "_x"].shape[1:]) != (28, 28):
            raise UsageError(f"--data {directory}: the {part} images and labels do not match (28x28, one label each)")
        if int(d[part + "_y"].max()) > 9:
            raise UsageError(f"--data {directory}: a {part} label above 9")
    if limit:
        if limit > len(d["train_x"]):
            raise UsageError(f"--limit-train {limit}: there are only {len(d['train_x'])} training images")
        d["train_x"], d["train_y"] = d["train_x"][:limit], d["train_y"][:limit]
    return d


def as_input(images):
    """uint8 (n, 28, 28) -> float32 (n, 1, 28, 28) in [0, 1], as cpd-train scales its pixels."""
    return images.unsqueeze(1).float().div_(255.0)


# --- the model ---------------------------------------------------------------------------

def lenet5():
    """LeNet-5-like: conv 5x5 6 (pad 2), max-pool 2, conv 5x5 16, max-pool 2, fc 120, fc 84,
    fc 10, ReLU; 61 706 parameters in 10 tensors. PyTorch's default initialization."""
    import torch.nn as nn
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 10))


def weights_hash(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def weights_finite(model):
    import torch
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def correct(model, x_u8, y, chunk=2000):
    import torch
    n = 0
    with torch.no_grad():
        for i in range(0, len(x_u8), chunk):
            n += int((model(as_input(x_u8[i:i + chunk])).argmax(1) == y[i:i + chunk]).sum())
    return n


def stat_keys():
    """The counters of cpd::value_stats (cpd.value_stats_fields), the keys of cpd's counts."""
    import cpd
    return cpd.value_stats_fields


def fractions(stats, out_nonfinite):
    """cpd-train's columns: flushed-to-0 = underflow / count; overflowed = (overflow +
    non-finite values of the sums) / count; non-finite = inf/NaN gradient inputs / count."""
    c = stats.get("count", 0)
    if not c:
        return 0.0, 0.0, 0.0
    return (stats.get("underflow", 0) / c, (stats.get("overflow", 0) + out_nonfinite) / c,
            (stats.get("nan_inputs", 0) + stats.get("inf_inputs", 0)) / c)


def label(fmt, aps, seed, nseeds):
    s = f"{fmt}, APS {aps}" if aps in ("off", "on") else f"{fmt}, {aps}"
    return f"[seed {seed}] {s}" if nseeds > 1 else s


# --- one run, emulated ------------------------------------------------------------------

def run_emulated(args, data, fmt, aps, seed, progress):
    import torch
    torch.manual_seed(seed)
    model = lenet5()
    workers = make_workers(model, args.workers, fmt, aps, args.threads)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator()
    gen.manual_seed(seed)
    x_all, y_all = data["train_x"], data["train_y"].long()
    n, B = len(x_all), args.batch
    steps = n // B
    if steps < 1:
        raise UsageError(f"--batch {B}: larger than the {n} training images")
    res = {"format": fmt, "aps": aps, "seed": seed, "epochs": [], "diverged": False}
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        e0 = time.perf_counter()
        perm = torch.randperm(n, generator=gen)
        loss_sum = 0.0
        for step in range(steps):
            idx = perm[step * B:(step + 1) * B]
            loss_sum += workers.backward(loss_fn, as_input(x_all[idx]), y_all[idx]) * B
            opt.step()
        loss = loss_sum / (steps * B)
        acc = correct(model, data["test_x"], data["test_y"].long()) / len(data["test_x"])
        secs = time.perf_counter() - e0
        fl, ov, nf = fractions(workers.stats, workers.out_nonfinite)
        res["epochs"].append({"epoch": epoch + 1, "train_loss": loss, "test_accuracy": acc, "seconds": secs,
                              "flushed": fl, "overflowed": ov, "nonfinite": nf})
        progress(f"{label(fmt, aps, seed, len(args.seeds))} epoch {epoch + 1}/{args.epochs}: train loss {loss:.4f}, "
                 f"test accuracy {acc:.4f} ({secs:.1f} s)")
        if not math.isfinite(loss):
            res["diverged"] = True
            break
    res["diverged"] |= not weights_finite(model)
    res["seconds"] = time.perf_counter() - t0
    res["steps"] = workers.steps
    res["stats"] = dict(workers.stats)
    res["out_nonfinite"] = workers.out_nonfinite
    res["nonfinite_steps"] = workers.nonfinite_steps
    res["hash"] = weights_hash(model)
    res["bits_per_value"] = workers.bits_per_value
    return res


# --- ddp ----------------------------------------------------------------------------------

class TimedHook:
    """Wraps the bucket exchange of DDP: the cpd hook (synchronous) or DDP's own allreduce
    (waited for here, so that both are timed the same way, without overlap with backward).
    Counts, after the cpd hook, what rounding this rank's gradients to the format with the
    hook's scales did (the counts of EmulatedWorkers.stats, for this rank's values); for the
    block rules and rotations, the hook's own diagnostics (plain=False)."""

    def __init__(self, inner, fmt, plain=True):
        self.inner, self.fmt, self.plain = inner, fmt, plain
        # DDP logs the hook's __name__ (register_comm_hook fails without one).
        self.__name__ = self.__qualname__ = "timed_" + (inner.__name__ if inner is not None else "allreduce_hook")
        self.seconds = 0.0
        self.stats = {k: 0 for k in stat_keys()}

    def __call__(self, state, bucket):
        import cpd
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        grads = bucket.gradients()
        if self.inner is None:
            self.stats["count"] += bucket.buffer().numel()  # float32 itself: nothing rounds
            t0 = time.perf_counter()
            fut = default_hooks.allreduce_hook(state, bucket)
            fut.wait()
            self.seconds += time.perf_counter() - t0
            return fut
        t0 = time.perf_counter()
        fut = self.inner(state, bucket)
        self.seconds += time.perf_counter() - t0
        rec = self.inner.records.pop()
        if not self.plain:  # (the hook's own diagnostics: the rotated or block-scaled values; a codec has none)
            self.stats = {k: self.inner.stats.get(k, 0) for k in stat_keys()}
            return fut
        for g, e in zip(grads, rec["scales"]):
            _, c = cpd.quantize(g.detach().reshape(-1).contiguous(), self.fmt, scale_exponent=e, stats=True,
                                threads=1)
            for k in stat_keys():
                self.stats[k] += c.get(k, 0)
        return fut


def ddp_worker(rank, args, configs, port, result_path):
    import torch
    import torch.distributed as dist
    import warnings
    # cpd.torch wraps the exchange's read-only message buffers in tensors that gloo only reads.
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    W = args.workers
    dist.init_process_group("gloo", rank=rank, world_size=W)
    try:
        data = load_data(args.data, args.limit_train)
        # Rank r evaluates its slice of the test set; the correct counts are summed.
        tlo, thi = rank * len(data["test_x"]) // W, (rank + 1) * len(data["test_x"]) // W
        shard = {"x": data["train_x"], "y": data["train_y"].long(), "test_x": data["test_x"][tlo:thi],
                 "test_y": data["test_y"][tlo:thi].long(), "tests": len(data["test_x"])}
        results = [ddp_run(rank, args, shard, seed, fmt, aps) for seed in args.seeds for fmt, aps in configs]
        if rank == 0:
            with open(result_path, "w") as f:
                json.dump(results, f)
    finally:
        dist.destroy_process_group()


def ddp_run(rank, args, shard, seed, fmt, aps):
    """One run of rank `rank` under DDP: its share of every batch, the exchange through the cpd
    hook (or gloo's allreduce for fp32), the losses and test counts summed over the ranks."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import cpd.torch as ct
    W, B = args.workers, args.batch
    steps = len(shard["x"]) // B
    torch.manual_seed(seed)
    net = lenet5()
    model = DDP(net)
    plain = aps in ("off", "on")  # (the other exchanges: block rules, rotations and codecs)
    if fmt == "fp32" and plain and args.ddp_fp32 == "allreduce":
        inner = None
    else:  # the random key of EmulatedWorkers (seed 0): the rotation's signs, the same bits
        o = exchange_options(fmt, aps)
        inner = ct.comm_hook(o.pop("format"), seed=0, record=True, diagnostics=not plain, **o)
    hook = TimedHook(inner, fmt, plain)
    model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator()
    gen.manual_seed(seed)
    res = {"format": fmt, "aps": aps, "seed": seed, "epochs": [], "diverged": False}
    dist.barrier()
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        e0 = time.perf_counter()
        perm = torch.randperm(len(shard["x"]), generator=gen)
        loss_sum = 0.0
        for step in range(steps):
            idx = perm[step * B:(step + 1) * B]
            x = torch.tensor_split(as_input(shard["x"][idx]), W)[rank]
            y = torch.tensor_split(shard["y"][idx], W)[rank]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            loss_sum += float(loss.detach()) * len(x)
        sums = torch.tensor([loss_sum, correct(net, shard["test_x"], shard["test_y"])], dtype=torch.float64)
        dist.all_reduce(sums)
        loss, acc = sums[0].item() / (steps * B), sums[1].item() / shard["tests"]
        secs = time.perf_counter() - e0
        fl, ov, nf = fractions(reduce_stats(hook.stats), inner.out_nonfinite if inner is not None else 0)
        res["epochs"].append({"epoch": epoch + 1, "train_loss": loss, "test_accuracy": acc,
                              "seconds": secs, "flushed": fl, "overflowed": ov, "nonfinite": nf})
        if rank == 0 and not args.no_progress:
            print(f"{label(fmt, aps, seed, len(args.seeds))} epoch {epoch + 1}/{args.epochs}: train loss "
                  f"{loss:.4f}, test accuracy {acc:.4f} ({secs:.1f} s; exchange "
                  f"{hook.seconds / ((epoch + 1) * steps) * 1e3:.2f} ms per step)",
                  file=sys.stderr, flush=True)
        if not math.isfinite(loss):
            res["diverged"] = True
            break
    res["seconds"] = time.perf_counter() - t0
    res["diverged"] |= not weights_finite(net)
    res["steps"] = steps * len(res["epochs"])
    res["stats"] = reduce_stats(hook.stats)
    res["out_nonfinite"] = inner.out_nonfinite if inner is not None else 0
    res["nonfinite_steps"] = inner.nonfinite_steps if inner is not None else 0
    res["hash"] = weights_hash(net)
    # Rank 0's clock; the slowest rank sets every rank's pace through the exchange.
    res["exchange_seconds"] = hook.seconds
    # What this rank sent per gradient value (payload and APS statistics); unknown for
    # gloo's own allreduce, whose algorithm gloo chooses.
    res["bits_per_value"] = inner.bits_per_value if inner is not None else None
    return res


def reduce_stats(stats):
    import torch
    import torch.distributed as dist
    t = torch.tensor([stats[k] for k in stat_keys()], dtype=torch.int64)
    dist.all_reduce(t)
    return dict(zip(stat_keys(), (int(v) for v in t.tolist())))


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(args, configs):
    import torch.multiprocessing as mp
    fd, path = tempfile.mkstemp(prefix="train_cnn-", suffix=".json")
    os.close(fd)
    try:
        try:
            mp.spawn(ddp_worker, args=(args, configs, free_port(), path), nprocs=args.workers, join=True)
        except Exception as e:  # ProcessRaisedException / ProcessExitedException
            fail(EXIT_IO, f"a DDP worker failed: {str(e).strip().splitlines()[-1] if str(e).strip() else e}")
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


# --- output -------------------------------------------------------------------------------

def fmt_frac(x):
    return "0" if x == 0 else f"{x:.2e}"


def scaling_header(runs):
    """"APS" where every run's scaling is off or on (--formats x --aps), else "scaling"."""
    return "APS" if all(r["aps"] in ("off", "on") for r in runs) else "scaling"


def run_table(runs, nseeds, ddp):
    cols = (["seed"] if nseeds > 1 else []) + ["format", scaling_header(runs), "final loss", "final acc",
                                                 "best acc", "flushed-to-0", "overflowed", "non-finite", "seconds"]
    if ddp:
        cols += ["exchange ms/step", "bits sent/value"]
    else:
        cols += ["bits/value"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in runs:
        last = r["epochs"][-1]
        fl, ov, nf = fractions(r["stats"], r["out_nonfinite"])
        row = ([str(r["seed"])] if nseeds > 1 else []) + [
            r["format"], r["aps"], f"{last['train_loss']:.4f}", f"{last['test_accuracy']:.4f}",
            f"{max(e['test_accuracy'] for e in r['epochs']):.4f}", fmt_frac(fl), fmt_frac(ov), fmt_frac(nf),
            f"{r['seconds']:.1f}" + (" diverged" if r["diverged"] else "")]
        if ddp:
            bits = r["bits_per_value"]
            row += [f"{r['exchange_seconds'] / max(r['steps'], 1) * 1e3:.2f}",
                    "— (gloo)" if bits is None else f"{bits:.3f}"]
        else:
            row += [f"{r['bits_per_value']:.3f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def seed_table(runs, configs, seeds):
    """Mean over seeds, the spread (min-max) of the final accuracy, and each seed's
    difference to fp32 of the same seed in accuracy points."""
    by = {(r["format"], r["aps"], r["seed"]): r for r in runs}
    fp32 = {s: by.get(("fp32", "off", s)) or by.get(("fp32", "on", s)) for s in seeds}
    seeds_s = " / ".join(str(s) for s in seeds)
    lines = [f"| format | {scaling_header(runs)} | bits/value | final acc, seeds {seeds_s} | mean | min–max | "
             f"vs fp32 (points), seeds {seeds_s} "
             "| flushed-to-0, min–max | seconds, mean |", "|---|---|---|---|---|---|---|---|---|"]
    for fmt, aps in configs:
        rs = [by[(fmt, aps, s)] for s in seeds if (fmt, aps, s) in by]
        accs = [r["epochs"][-1]["test_accuracy"] for r in rs]
        fl = [r["flushed"] if "flushed" in r else fractions(r["stats"], r["out_nonfinite"])[0] for r in rs]
        vs = []
        for r in rs:
            base = fp32.get(r["seed"])
            if fmt == "fp32" or base is None:
                vs.append("—")
            else:
                vs.append(f"{100 * (r['epochs'][-1]['test_accuracy'] - base['epochs'][-1]['test_accuracy']):+.2f}")
        bits = [r["bits_per_value"] for r in rs if r.get("bits_per_value") is not None]
        bits_s = f"{sum(bits) / len(bits):.3f}" if bits else "—"
        lines.append(f"| {fmt} | {aps} | {bits_s} | {' / '.join(f'{a:.4f}' for a in accs)} | "
                     f"{sum(accs) / len(accs):.4f} | "
                     f"{min(accs):.4f}–{max(accs):.4f} | {' / '.join(vs)} | {fmt_frac(min(fl))}–{fmt_frac(max(fl))} | "
                     f"{sum(r['seconds'] for r in rs) / len(rs):.1f} |")
    return "\n".join(lines)


CSV_HEADER = ("mode,workers,seed,run,grad_format,aps,epoch,train_loss,test_accuracy,best_accuracy,flushed_to_0,"
              "overflowed,non_finite,seconds,diverged,weights_hash,bits_per_value\n")


def write_csv(f, args, runs):
    f.write(CSV_HEADER)
    for i, r in enumerate(runs, 1):
        best = 0.0
        head = f"{args.mode},{args.workers},{r['seed']},{i},{r['format']},{r['aps']}"
        for e in r["epochs"]:
            best = max(best, e["test_accuracy"])
            f.write(f"{head},{e['epoch']},{e['train_loss']:.6f},{e['test_accuracy']:.4f},{best:.4f},"
                    f"{e['flushed']:.6e},{e['overflowed']:.6e},{e['nonfinite']:.6e},{e['seconds']:.2f},,,\n")
        last = r["epochs"][-1]
        fl, ov, nf = fractions(r["stats"], r["out_nonfinite"])
        bits = "" if r.get("bits_per_value") is None else f"{r['bits_per_value']:.4f}"
        f.write(f"{head},final,{last['train_loss']:.6f},{last['test_accuracy']:.4f},{best:.4f},{fl:.6e},{ov:.6e},"
                f"{nf:.6e},{r['seconds']:.2f},{int(r['diverged'])},{r['hash']},{bits}\n")


def write_plot(path, runs, configs, mode, workers, one_fp32):
    """Three panels: test accuracy per epoch of every configuration (mean over the seeds,
    band min-max); the same, zoomed on the configurations within 3 points of the best;
    the final accuracy of every seed (dots) and their mean (bar), on the zoomed axis."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # A color per format (APS on and off share it, solid and dashed), and per other scaling.
    colors = {"fp32": "black", "e5m2": "tab:blue", "e4m3": "tab:orange", "e3m0": "tab:red"}
    palette = iter(["tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"] +
                   [matplotlib.colors.to_hex(c) for c in plt.get_cmap("tab20b").colors])

    def key(f, a):
        return f if a in ("off", "on") else (f, a)
    for f, a in configs:
        if key(f, a) not in colors:
            colors[key(f, a)] = next(palette, "tab:gray")
    seeds = sorted({r["seed"] for r in runs})
    curves = []
    for fmt, aps in configs:
        rs = [r for r in runs if r["format"] == fmt and r["aps"] == aps]
        ep = max(len(r["epochs"]) for r in rs)
        per = [[r["epochs"][e]["test_accuracy"] for r in rs if len(r["epochs"]) > e] for e in range(ep)]
        finals = [r["epochs"][-1]["test_accuracy"] for r in rs]
        name = fmt + ("" if fmt == "fp32" and one_fp32 else ", APS" if aps == "on" else ", no APS" if aps == "off"
                      else ", " + aps)
        solid = aps != "off" or fmt == "fp32"
        curves.append({"name": name, "color": colors[key(fmt, aps)], "style": "-" if solid else "--",
                       "marker": "o" if solid else "x", "xs": list(range(1, ep + 1)),
                       "mean": [sum(v) / len(v) for v in per], "lo": [min(v) for v in per],
                       "hi": [max(v) for v in per], "finals": finals, "final_mean": sum(finals) / len(finals)})
    best = max(c["final_mean"] for c in curves)
    near = [c for c in curves if c["final_mean"] >= best - 0.03]
    skip = 1 if max(len(c["xs"]) for c in near) > 1 else 0  # the first epoch is far below the rest
    zlo = min(min(c["lo"][skip:] or c["lo"]) for c in near) - 0.003
    zhi = max(max(c["hi"]) for c in near) + 0.003
    fig, (ax, zx, fx) = plt.subplots(1, 3, figsize=(15, 4.8), gridspec_kw={"width_ratios": [3, 3, 2]})
    for c in curves:
        for a in (ax, zx) if c in near else (ax,):
            a.plot(c["xs"], c["mean"], c["style"], marker=c["marker"], color=c["color"], label=c["name"])
            if len(seeds) > 1:
                a.fill_between(c["xs"], c["lo"], c["hi"], color=c["color"], alpha=0.12)
    where = f"{workers} {mode} workers"
    what = f"mean of seeds {', '.join(map(str, seeds))}; band: min–max" if len(seeds) > 1 else f"seed {seeds[0]}"
    ax.set_title(f"LeNet-5, Fashion-MNIST, {where} ({what})", fontsize=9)
    zx.set_title("zoom: the runs within 3 points of the best", fontsize=9)
    for a in (ax, zx):
        a.set_xlabel("epoch")
        a.set_ylabel("test accuracy")
        a.grid(alpha=0.3)
    zx.set_ylim(zlo, zhi)
    ax.legend(fontsize=8)
    zx.legend(fontsize=8)
    for k, c in enumerate(curves):
        if c in near:
            fx.scatter(c["finals"], [k] * len(c["finals"]), color=c["color"], marker=c["marker"])
            fx.plot([c["final_mean"]] * 2, [k - 0.3, k + 0.3], color=c["color"])
        else:
            fx.text(zlo, k, f"  mean {c['final_mean']:.4f} (off the axis)", va="center", fontsize=8,
                    color=c["color"])
    fx.set_xlim(zlo, zhi)
    fx.set_ylim(len(curves) - 0.5, -0.5)
    fx.set_yticks(range(len(curves)))
    fx.set_yticklabels([c["name"] for c in curves], fontsize=8)
    fx.set_xlabel("final test accuracy; dots: seeds, bar: mean", fontsize=9)
    fx.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def read_csv_runs(paths):
    """The runs of CSVs that --out-csv wrote (for --plot-from; runs are told apart by CSV, seed
    and run number): (runs, configs, mode, workers)."""
    import csv
    runs, configs, mode, workers = {}, [], None, None
    for k, path in enumerate(paths):
        try:
            with open(path, newline="") as f:
                for row in csv.DictReader(f):
                    if mode is not None and (row["mode"], int(row["workers"])) != (mode, workers):
                        raise UsageError(f"--plot-from {path}: {row['mode']} with {row['workers']} workers; the "
                                         f"CSVs before it ran {mode} with {workers}")
                    mode, workers = row["mode"], int(row["workers"])
                    key = (k, int(row["seed"]), int(row["run"]))
                    r = runs.setdefault(key, {"format": row["grad_format"], "aps": row["aps"], "seed": key[1],
                                              "epochs": []})
                    if (r["format"], r["aps"]) not in configs:
                        configs.append((r["format"], r["aps"]))
                    if row["epoch"] != "final":
                        r["epochs"].append({"epoch": int(row["epoch"]), "train_loss": float(row["train_loss"]),
                                            "test_accuracy": float(row["test_accuracy"])})
                    else:
                        r.update(flushed=float(row["flushed_to_0"]), seconds=float(row["seconds"]),
                                 diverged=row["diverged"] == "1", hash=row["weights_hash"],
                                 bits_per_value=float(row["bits_per_value"]) if row.get("bits_per_value") else None)
        except OSError as e:
            raise UsageError(f"--plot-from {path}: {e.strerror}") from None
        except (KeyError, ValueError, TypeError):
            raise UsageError(f"--plot-from {path}: not a CSV that --out-csv wrote") from None
    if not runs or any("seconds" not in r or not r["epochs"] for r in runs.values()):
        raise UsageError(f"--plot-from {','.join(paths)}: no runs in it, or a run without its epochs or final row")
    return list(runs.values()), configs, mode, workers


def open_output(flag, path):
    try:
        return open(path, "w")
    except OSError as e:
        fail(EXIT_IO, f"{flag} {path}: cannot open for writing ({e.strerror})")


def main(argv=None):
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        if args.plot_from:
            runs, configs, mode, workers = read_csv_runs(split_list("--plot-from", args.plot_from))
            seeds = sorted({r["seed"] for r in runs})
            if len(seeds) > 1:
                print(seed_table(runs, configs, seeds))
            one_fp32 = any(f == "fp32" for f, _ in configs) and not (("fp32", "on") in configs and
                                                                   ("fp32", "off") in configs)
            try:
                if args.plot:
                    write_plot(args.plot, runs, configs, mode, workers, one_fp32)
            except OSError as e:
                fail(EXIT_IO, f"--plot {args.plot}: write failed ({e.strerror})")
            return EXIT_OK
        try:
            import torch
            import cpd.torch  # noqa: F401
        except ImportError as e:
            fail(EXIT_USAGE, f"cannot import {e.name or e} (run with /usr/bin/python3, which has Debian's torch, and "
                             "PYTHONPATH=<build>/python after `cmake --preset ci -DCPD_BUILD_PYTHON=ON && "
                             "cmake --build build/ci --target cpd_python_native`; scripts/train_cnn.sh does this)")
        configs = run_configs(args)
        check_configs(configs, args.workers)
        data = load_data(args.data, args.limit_train)
        if len(data["train_x"]) < args.batch:
            raise UsageError(f"--batch {args.batch}: larger than the {len(data['train_x'])} training images")
    except UsageError as e:
        fail(EXIT_USAGE, str(e))
    # The outputs are opened before any training, so that a path that cannot be written fails at once.
    csv_file = open_output("--out-csv", args.out_csv) if args.out_csv else None
    if args.plot:
        open_output("--plot", args.plot).close()

    torch.set_num_threads(args.threads)
    progress = (lambda s: None) if args.no_progress else (lambda s: print(s, file=sys.stderr, flush=True))
    t0 = time.perf_counter()
    if args.mode == "emulated":
        runs = [run_emulated(args, data, fmt, aps, seed, progress) for seed in args.seeds for fmt, aps in configs]
    else:
        del data  # every DDP process reads its own copy
        runs = run_ddp(args, configs)
    total = time.perf_counter() - t0

    print(f"\n{len(runs)} runs: LeNet-5 on Fashion-MNIST ({args.mode}, {args.workers} workers, batch {args.batch}, "
          f"{args.epochs} epochs, lr {args.lr}, momentum {args.momentum}, threads {args.threads}); {total:.1f} s\n")
    print(run_table(runs, len(args.seeds), args.mode == "ddp"))
    if len(args.seeds) > 1:
        print()
        print(seed_table(runs, configs, args.seeds))
    print()
    for r in runs:
        print(f"weights-hash: {r['hash']}  ({r['format']}, aps {r['aps']}, seed {r['seed']})")
    sys.stdout.flush()
    try:
        if csv_file:
            with csv_file:
                write_csv(csv_file, args, runs)
    except OSError as e:
        fail(EXIT_IO, f"--out-csv {args.out_csv}: write failed ({e.strerror})")
    if args.plot:
        try:
            write_plot(args.plot, runs, configs, args.mode, args.workers,
                       "fp32" in args.formats and len(args.aps) > 1 and not args.fp32_aps_too)
        except OSError as e:
            fail(EXIT_IO, f"--plot {args.plot}: write failed ({e.strerror})")
    diverged = [f"{r['format']} (aps {r['aps']}, seed {r['seed']})" for r in runs if r["diverged"]]
    if diverged:
        print(f"{PROG}: {len(diverged)} of {len(runs)} runs diverged (a loss or weight became NaN or infinite): "
              + ", ".join(diverged), file=sys.stderr)
        return EXIT_DIVERGED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
