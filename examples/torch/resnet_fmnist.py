#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ResNet-18 on Fashion-MNIST with W = 8 emulated data-parallel workers whose gradients
are exchanged in a low-precision format by cpd.torch.EmulatedWorkers, with and without APS
(docs/results.md, "ResNet-18 on one GPU"; scripts/resnet_experiment.sh runs it; the model
and the workers' gradients are examples/torch/resnet_workers.py).

The model is torchvision's ResNet-18 written out (BasicBlock, [2, 2, 2, 2], widths 64 to
512, torchvision's initialization) with the usual small-image stem: conv1 is 3x3, stride 1,
padding 1, on the one grey channel, and there is no max-pool, so the four stages see 28x28,
14x14, 7x7 and 4x4. The data are the IDX files of Fashion-MNIST (Debian's
dataset-fashion-mnist; gzip, xz or not), held whole on the device as uint8, pixels scaled to
[0, 1], no augmentation.

Every step, each global batch is split into W shards (torch.tensor_split: worker w takes
images w*b .. w*b+b-1), worker w's gradient is that of its shard's mean loss, BatchNorm
normalizing over its own shard; cpd.torch.EmulatedWorkers sums the W gradients tensor by
tensor in the ring's order, every partial sum rounded to the format (APS per tensor, or no
scale), and puts the mean into p.grad; torch.optim.SGD applies it (momentum 0.9, weight
decay 5e-4, the learning rate rising linearly to 0.2 over the first 15 % of the steps, then
falling to 0 on a cosine; batch 512 = 8 shards of 64).
The BatchNorm running statistics are worker 0's, as torch DDP keeps them by default
(broadcast_buffers: every rank starts each forward with rank 0's buffers).

The W workers' gradients come from one of two computations, the same in exact arithmetic:
- batched (default where it is faster): one forward and backward pass for all W workers.
  Every parameter is replicated W times; the convolutions run with groups=W on the W shards
  laid side by side along the channels, BatchNorm over W*C channels (each worker's own
  statistics), the classifier as a batched matrix product, the loss summed over the workers
  (each replica's gradient is then its worker's). EmulatedWorkers is handed a stand-in for
  the model whose shard w returns worker w's loss and, in backward, worker w's gradient.
- sequential: EmulatedWorkers runs the model on each shard in turn (W passes).
--backward auto times both on the first batch and takes the faster.

Runs: every --seeds x --formats x --aps; fp32 once per seed (a power-of-two scale changes
no bit of a float32 sum). Every run of a seed starts from the same weights and sees the same
batches. --epochs auto measures a few steps of every configuration first and chooses the
most epochs with which every run ends within --budget-seconds; past the budget the script
stops cleanly (the run in progress keeps its finished epochs) and writes what it has.

Outputs: progress on standard error; the tables (markdown) on standard output and in
--out-md; --out-csv one row per run and epoch plus a row `final` per run (rewritten after
every run, so that it survives a kill); --plot a PNG. --from-csv redraws the plot and the
tables from such a CSV, without training.

Exit status: 0 every run trained and every output was written; 1 an output could not be
written; 2 the command line, the data or the cpd package was rejected; 3 everything was
written but a run diverged; 4 the budget stopped the experiment (what ran was written).
"""

import argparse
import csv
import gzip
import hashlib
import lzma
import math
import os
import struct
import sys
import time

try:
    import torch
    import torch.nn as nn
except ImportError as _e:  # pragma: no cover
    sys.exit(f"resnet_fmnist.py: cannot import torch ({_e}); run with a Python that has PyTorch")

from resnet_workers import TRAINERS, ResNet18  # noqa: E402 (examples/torch, beside this file)

PROG = "resnet_fmnist.py"
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
FILES = {"train_x": "train-images-idx3-ubyte", "train_y": "train-labels-idx1-ubyte",
         "test_x": "t10k-images-idx3-ubyte", "test_y": "t10k-labels-idx1-ubyte"}
EXIT_OK, EXIT_IO, EXIT_USAGE, EXIT_DIVERGED, EXIT_BUDGET = 0, 1, 2, 3, 4


class UsageError(Exception):
    """A rejected command line, data directory or cpd package (exit status 2)."""


# --- the command line ------------------------------------------------------------------

def make_parser():
    p = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="ResNet-18 on Fashion-MNIST with W emulated data-parallel workers whose gradients "
                    "cpd.torch.EmulatedWorkers exchanges in low precision, with and without APS.",
        epilog="Exit status: 0 ok; 1 an output could not be written; 2 bad command line, data or package; "
               "3 everything written, but a run diverged; 4 the budget stopped it (what ran was written).")
    p.add_argument("--data", default=DEFAULT_DATA, help="directory of the four Fashion-MNIST IDX files (.gz or not)")
    p.add_argument("--device", default="auto", help="cuda, cpu, or auto (cuda where torch has it)")
    p.add_argument("--workers", type=int, default=8, help="emulated data-parallel workers W")
    p.add_argument("--formats", default="fp32,e5m2,e4m3,e3m0", help="gradient formats (cpd names), comma-separated")
    p.add_argument("--aps", default="off,on", help="APS off, on, or off,on")
    p.add_argument("--seeds", default="1,2,3", help="seeds: each fixes the initial weights and the data order")
    p.add_argument("--epochs", default="auto",
                   help="epochs per run, or auto: the most that let every run end within --budget-seconds")
    p.add_argument("--max-epochs", type=int, default=30, help="the most epochs --epochs auto chooses")
    p.add_argument("--budget-seconds", type=float, default=0,
                   help="stop cleanly once this many seconds have passed since the start (0: no limit)")
    p.add_argument("--batch", type=int, default=512, help="global batch (W shards of batch/W)")
    p.add_argument("--lr", type=float, default=0.2, help="peak learning rate of SGD")
    p.add_argument("--warmup", type=float, default=0.15,
                   help="fraction of the steps over which the learning rate rises linearly to --lr; "
                        "then it falls to 0 on a cosine")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--weight-decay", type=float, default=5e-4, help="SGD weight decay (applied after the exchange)")
    p.add_argument("--width", type=int, default=64, help="channels of the first stage (torchvision: 64); "
                                                         "smaller only for quick tests")
    p.add_argument("--backward", choices=("auto", "batched", "sequential"), default="auto",
                   help="how the W workers' gradients are computed (same mathematics)")
    p.add_argument("--limit", type=int, default=0, help="use only the first N training images (0: all)")
    p.add_argument("--limit-test", type=int, default=0, help="use only the first N test images (0: all)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of torch and of cpd's exchange")
    p.add_argument("--no-tf32", action="store_true", help="on CUDA, full float32 convolutions and products")
    p.add_argument("--no-channels-last", action="store_true", help="on CUDA, NCHW activations")
    p.add_argument("--out-csv", metavar="FILE", help="CSV: one row per run and epoch, and a row final per run")
    p.add_argument("--out-md", metavar="FILE", help="the tables (markdown)")
    p.add_argument("--plot", metavar="PNG", help="PNG (matplotlib): accuracy and loss per epoch, finals per seed")
    p.add_argument("--from-csv", metavar="FILE", help="train nothing: --plot and --out-md from a CSV of --out-csv")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def split_list(flag, text):
    items = [s.strip() for s in text.split(",")]
    if not items or any(not s for s in items) or len(set(items)) != len(items):
        raise UsageError(f"{flag} '{text}': an empty item or an item twice")
    return items


def parse_args(argv):
    a = make_parser().parse_args(argv)
    a.formats = split_list("--formats", a.formats)
    a.aps = split_list("--aps", a.aps)
    if any(v not in ("off", "on") for v in a.aps):
        raise UsageError(f"--aps {','.join(a.aps)}: each must be off or on")
    try:
        a.seeds = [int(s) for s in split_list("--seeds", a.seeds)]
    except ValueError:
        raise UsageError(f"--seeds {a.seeds}: not a list of integers") from None
    if a.epochs != "auto":
        if not a.epochs.isdigit() or int(a.epochs) < 1:
            raise UsageError(f"--epochs {a.epochs}: a positive integer or auto")
        a.epochs = int(a.epochs)
    checks = [("--workers", a.workers >= 1), ("--batch", a.batch >= a.workers and a.batch % a.workers == 0),
              ("--lr", math.isfinite(a.lr) and a.lr > 0), ("--momentum", 0 <= a.momentum < 1),
              ("--weight-decay", a.weight_decay >= 0), ("--warmup", 0 <= a.warmup < 1),
              ("--width", a.width >= 1), ("--limit", a.limit >= 0), ("--limit-test", a.limit_test >= 0),
              ("--threads", a.threads >= 1), ("--max-epochs", a.max_epochs >= 1),
              ("--budget-seconds", a.budget_seconds >= 0)]
    for flag, ok in checks:
        if not ok:
            raise UsageError(f"{flag} {getattr(a, flag[2:].replace('-', '_'))}: out of range "
                             "(--batch must be a multiple of --workers)")
    if a.epochs == "auto" and not a.budget_seconds and not a.from_csv:
        raise UsageError("--epochs auto needs --budget-seconds (the time the runs must fit in)")
    if a.device == "auto":
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    return a


def run_configs(args):
    """(format, aps) of every run of a seed; fp32 once (with the first --aps value)."""
    out = []
    for f in args.formats:
        for aps in args.aps:
            if f == "fp32" and out and out[-1][0] == "fp32":
                continue
            out.append((f, aps))
    return out


# --- the data ----------------------------------------------------------------------------

def read_idx(directory, name, kind):
    """IDX file `name` of `directory`, as it is or compressed (`name`.gz as Debian ships it,
    or `name`.xz, 4 MB smaller), as a uint8 tensor: (n, 28, 28) or (n,)."""
    path, opener = os.path.join(directory, name), open
    for suffix, how in (("", open), (".xz", lzma.open), (".gz", gzip.open)):
        if os.path.isfile(os.path.join(directory, name + suffix)):
            path, opener = os.path.join(directory, name + suffix), how
            break
    else:
        path, opener = path + ".gz", gzip.open  # (named in the message)
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, lzma.LZMAError, EOFError) as e:
        raise UsageError(f"--data {directory}: {os.path.basename(path)}: {e.strerror or e}; Fashion-MNIST comes "
                         "with Debian's `apt-get install dataset-fashion-mnist` (/usr/share/datasets/fashion-mnist)"
                         ) from None
    dims = 3 if kind == "images" else 1
    if len(raw) < 4 + 4 * dims or struct.unpack(">I", raw[:4])[0] != (2051 if dims == 3 else 2049):
        raise UsageError(f"--data: {path}: not an IDX {kind} file (magic number)")
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    if len(raw) - 4 - 4 * dims != math.prod(shape) or (dims == 3 and shape[1:] != (28, 28)):
        raise UsageError(f"--data: {path}: {len(raw) - 4 - 4 * dims} bytes for the shape {shape} (28x28 images)")
    return torch.frombuffer(bytearray(raw[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def load_data(args):
    """The four arrays on args.device (images uint8, labels int64), limited as asked."""
    d = {k: read_idx(args.data, f, "images" if k.endswith("_x") else "labels") for k, f in FILES.items()}
    for part, limit, flag in (("train", args.limit, "--limit"), ("test", args.limit_test, "--limit-test")):
        x, y = d[part + "_x"], d[part + "_y"]
        if len(x) != len(y) or int(y.max()) > 9:
            raise UsageError(f"--data {args.data}: the {part} images and labels do not match (labels 0..9)")
        if limit > len(x):
            raise UsageError(f"{flag} {limit}: there are only {len(x)} {part} images")
        if limit:
            d[part + "_x"], d[part + "_y"] = x[:limit], y[:limit]
    if len(d["train_x"]) < args.batch:
        raise UsageError(f"--batch {args.batch}: more than the {len(d['train_x'])} training images")
    return {k: (v.long() if k.endswith("_y") else v).to(args.device) for k, v in d.items()}


def as_input(images, channels_last):
    """uint8 (n, 28, 28) -> float32 (n, 1, 28, 28) in [0, 1]."""
    x = images.unsqueeze(1).float().div_(255.0)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def make_trainer(mode, net, fmt, aps, args, seed):
    """The W workers of one run, with their EmulatedWorkers (`.workers`) in format fmt."""
    extra = {"channels_last": channels_last(args)} if mode == "batched" else {}
    return TRAINERS[mode](net, args.workers, fmt, "aps" if aps == "on" else "none", seed=seed, threads=args.threads,
                          **extra)


def channels_last(args):
    return args.device.startswith("cuda") and not args.no_channels_last


def new_net(args, seed):
    """The initial weights of a seed: drawn on the CPU, the same on every device."""
    torch.manual_seed(seed)
    return ResNet18(args.width).to(args.device)


def new_optimizer(args, net):
    return torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)


def lr_at(step, total, args):
    """Linear warm-up to args.lr over the first args.warmup of the steps, then a cosine to 0."""
    warm = max(1, round(args.warmup * total))
    if step < warm:
        return args.lr * (step + 1) / warm
    return 0.5 * args.lr * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


def sync(args):
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()


def accuracy(args, net, x_u8, y, chunk=2500):
    net.eval()
    hits = torch.zeros((), dtype=torch.int64, device=y.device)
    with torch.no_grad():
        for i in range(0, len(x_u8), chunk):
            hits += (net(as_input(x_u8[i:i + chunk], channels_last(args))).argmax(1) == y[i:i + chunk]).sum()
    net.train()
    return int(hits) / len(x_u8)


def weights_hash(net):
    h = hashlib.sha256()
    for p in net.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def fractions(stats, out_nonfinite):
    """(flushed-to-0, overflowed) of cpd's counts, as cpd-train defines them; None where the
    exchange kept no counts."""
    c = stats.get("count", 0)
    if not c:
        return None, None
    return stats.get("underflow", 0) / c, (stats.get("overflow", 0) + out_nonfinite) / c


class Budget:
    """Seconds since the start, against a limit (0: none)."""

    def __init__(self, seconds, start=None):
        self.start, self.limit = time.perf_counter() if start is None else start, seconds

    def elapsed(self):
        return time.perf_counter() - self.start

    def left(self):
        return self.limit - self.elapsed() if self.limit else math.inf

    def exceeded(self):
        return bool(self.limit) and self.elapsed() > self.limit


# --- a run -----------------------------------------------------------------------------------

def counters(workers):
    return {"exchange_seconds": workers.exchange_seconds, "nonfinite_steps": workers.nonfinite_steps,
            "out_nonfinite": workers.out_nonfinite, "stats": dict(workers.stats)}


def since(workers, before):
    now = counters(workers)
    stats = {k: v - before["stats"].get(k, 0) for k, v in now["stats"].items()}
    fl, ov = fractions(stats, now["out_nonfinite"] - before["out_nonfinite"])
    return {"exchange_seconds": now["exchange_seconds"] - before["exchange_seconds"],
            "nonfinite_steps": now["nonfinite_steps"] - before["nonfinite_steps"], "flushed": fl, "overflowed": ov}


def train_epoch(args, data, run, epoch, budget):
    """One epoch of `run` (its trainer, optimizer, data order and schedule); the epoch's
    record, or None when the budget ran out during it."""
    trainer, opt, steps, B = run["trainer"], run["opt"], run["steps"], args.batch
    before = counters(trainer.workers)
    e0 = time.perf_counter()
    perm = torch.randperm(len(data["train_x"]), generator=run["gen"]).to(args.device)
    loss_sum, lr = 0.0, 0.0
    for s in range(steps):
        idx = perm[s * B:(s + 1) * B]
        lr = lr_at(epoch * steps + s, run["total_steps"], args)
        for g in opt.param_groups:
            g["lr"] = lr
        loss_sum += trainer.step(as_input(data["train_x"][idx], channels_last(args)), data["train_y"][idx])
        opt.step()
        if budget.exceeded():
            return None
    trainer.before_eval()
    acc = accuracy(args, run["net"], data["test_x"], data["test_y"])
    sync(args)
    rec = {"epoch": epoch + 1, "steps": steps, "train_loss": loss_sum / steps, "test_accuracy": acc, "lr": lr}
    rec.update(since(trainer.workers, before))
    rec["seconds"] = time.perf_counter() - e0
    return rec


def run_one(args, data, cfg, seed, plan, budget, note):
    """One run: a fresh model of the seed, `plan["epochs"]` epochs (fewer when the budget
    stops it or the loss is no longer finite). note(result, epoch record) reports progress."""
    fmt, aps = cfg
    net = new_net(args, seed)
    gen = torch.Generator()
    gen.manual_seed(seed)
    steps = len(data["train_x"]) // args.batch
    run = {"net": net, "trainer": make_trainer(plan["backward"], net, fmt, aps, args, seed),
           "opt": new_optimizer(args, net), "gen": gen, "steps": steps, "total_steps": steps * plan["epochs"]}
    res = {"format": fmt, "aps": aps, "seed": seed, "epochs": [], "diverged": False, "stopped": False}
    t0 = time.perf_counter()
    for epoch in range(plan["epochs"]):
        rec = train_epoch(args, data, run, epoch, budget)
        if rec is None:
            res["stopped"] = True
            break
        res["epochs"].append(rec)
        note(res, rec)
        if not math.isfinite(rec["train_loss"]):
            res["diverged"] = True
            break
    res["diverged"] |= not all(bool(torch.isfinite(p).all()) for p in net.parameters())
    w = run["trainer"].workers
    res.update({"seconds": time.perf_counter() - t0, "hash": weights_hash(net), "steps": w.steps,
                "exchange_seconds": w.exchange_seconds, "nonfinite_steps": w.nonfinite_steps})
    res["flushed"], res["overflowed"] = fractions(w.stats, w.out_nonfinite)
    return res


# --- before the runs: which backward, how many epochs ---------------------------------------

def time_steps(args, data, cfg, mode, warm, steps):
    """Seconds per training step of the configuration cfg with the `mode` backward, as
    train_epoch takes them (a batch gathered from the data, the step, the optimizer), on a
    throwaway model, after `warm` steps that are not timed."""
    net = new_net(args, 0)
    trainer = make_trainer(mode, net, cfg[0], cfg[1], args, 0)
    opt = new_optimizer(args, net)
    gen = torch.Generator()
    gen.manual_seed(0)
    t0 = time.perf_counter()
    for i in range(warm + steps):
        if i == warm:
            sync(args)
            t0 = time.perf_counter()
        idx = torch.randint(0, len(data["train_x"]), (args.batch,), generator=gen).to(args.device)
        trainer.step(as_input(data["train_x"][idx], channels_last(args)), data["train_y"][idx])
        opt.step()
    sync(args)
    return (time.perf_counter() - t0) / max(steps, 1)


def choose_backward(args, data, probe, log):
    """args.backward, or for auto the faster of the two on the configuration `probe`. One
    step runs either way, so that a refusal of cpd's surfaces before the first run."""
    if args.backward != "auto":
        time_steps(args, data, probe, args.backward, 1, 0)
        return args.backward
    times = {}
    try:
        times["batched"] = time_steps(args, data, probe, "batched", 2, 3)
    except Exception as e:  # noqa: BLE001 (a run on a lent GPU goes on the reference way rather than stop)
        warn(f"{PROG}: the batched backward failed ({type(e).__name__}: {e}); using the sequential one")
    times["sequential"] = time_steps(args, data, probe, "sequential", 2, 3)
    best = min(times, key=times.get)
    log(f"{PROG}: backward " + ", ".join(f"{m} {t * 1e3:.1f} ms/step" for m, t in times.items())
        + f" ({probe[0]}, APS {probe[1]}): {best}")
    return best


def make_plan(args, data, configs, runs, budget, log):
    """{"backward", "epochs", "step_seconds" per configuration, "eval_seconds"}: --epochs
    auto takes the most epochs (at most --max-epochs) with which the runs fit in what is
    left of the budget, from a few timed steps of every configuration, with 15 % to spare."""
    probe = next((c for c in configs if c[0] != "fp32"), configs[0])
    plan = {"backward": choose_backward(args, data, probe, log), "epochs": args.epochs, "step_seconds": {},
            "eval_seconds": None}
    if args.epochs != "auto":
        return plan
    for cfg in configs:
        plan["step_seconds"][cfg] = time_steps(args, data, cfg, plan["backward"], 1, 4)
    net = new_net(args, 0)
    accuracy(args, net, data["test_x"], data["test_y"])
    t0 = time.perf_counter()
    accuracy(args, net, data["test_x"], data["test_y"])
    plan["eval_seconds"] = time.perf_counter() - t0
    steps = len(data["train_x"]) // args.batch
    epoch_of_all = sum(steps * plan["step_seconds"][cfg] + plan["eval_seconds"] for _, cfg in runs)
    reserve = 10 + 0.5 * len(runs)  # each run's model, the hashes, the outputs
    fit = int((budget.left() - reserve) / (1.15 * epoch_of_all))
    plan["epochs"] = max(1, min(args.max_epochs, fit))
    log(f"{PROG}: --epochs auto: " + ", ".join(f"{f}/{a} {t * 1e3:.1f}" for (f, a), t in plan["step_seconds"].items())
        + f" ms/step, test pass {plan['eval_seconds']:.2f} s; one epoch of all {len(runs)} runs {epoch_of_all:.1f} s, "
        f"{budget.left():.0f} s left: {plan['epochs']} epochs" + ("" if fit >= 1 else " (even 1 does not fit)"))
    return plan


# --- all runs ---------------------------------------------------------------------------------

class Progress:
    """The progress line of every epoch: run i of n, elapsed, an estimate of what is left."""

    def __init__(self, runs, epochs, budget, log):
        self.runs, self.epochs, self.budget, self.log = runs, epochs, budget, log
        self.done, self.seconds = 0, 0.0

    def note(self, i):
        def report(res, rec):
            self.done += 1
            self.seconds += rec["seconds"]
            left = (self.runs * self.epochs - self.done) * self.seconds / self.done
            nf = rec["nonfinite_steps"]
            self.log(f"[run {i + 1}/{self.runs}] seed {res['seed']}, {res['format']}, APS {res['aps']}: epoch "
                     f"{rec['epoch']}/{self.epochs}: train loss {rec['train_loss']:.4f}, test accuracy "
                     f"{rec['test_accuracy']:.4f} ({rec['seconds']:.1f} s, exchange {rec['exchange_seconds']:.1f} s"
                     f"{f', {nf} non-finite steps' if nf else ''}); elapsed {self.budget.elapsed():.0f} s, "
                     f"about {left:.0f} s to go")
        return report


def train_all(args, data, runs, plan, budget, save, log):
    """Every run in order (seed by seed), save(results) after each; (results, stopped):
    stopped when the budget cut a run or left no time for the next (from the runs so far)."""
    results = []
    progress = Progress(len(runs), plan["epochs"], budget, log)
    for i, (seed, cfg) in enumerate(runs):
        if results and budget.limit:
            need = sum(r["seconds"] for r in results) / len(results)
            if budget.elapsed() + need > budget.limit:
                warn(f"{PROG}: {budget.limit:g} s budget: no time for run {i + 1} of {len(runs)} (about {need:.0f} s "
                     f"with {budget.left():.0f} s left); stopping after {i} runs")
                return results, True
        res = run_one(args, data, cfg, seed, plan, budget, progress.note(i))
        results.append(res)
        save(results)
        if res["stopped"]:
            warn(f"{PROG}: {budget.limit:g} s budget spent during run {i + 1} of {len(runs)} (seed {seed}, {cfg[0]}, "
                 f"APS {cfg[1]}; {len(res['epochs'])} of {plan['epochs']} epochs kept); stopping")
            return results, True
    return results, False


# --- outputs -----------------------------------------------------------------------------------

CSV_FIELDS = ["model", "device", "workers", "batch", "backward", "epochs", "seed", "run", "grad_format", "aps",
              "epoch", "steps", "lr", "train_loss", "test_accuracy", "best_accuracy", "nonfinite_steps",
              "exchange_seconds", "flushed_to_0", "overflowed", "seconds", "diverged", "stopped", "weights_hash"]


def num(x, spec):
    return "" if x is None else format(x, spec)


def csv_rows(meta, results):
    """Per run: a row per finished epoch (its own non-finite steps, exchange seconds and
    fractions), then a row `final` (the run's totals, its last epoch's loss and accuracy)."""
    for i, r in enumerate(results, 1):
        head = dict(meta, seed=r["seed"], run=i, grad_format=r["format"], aps=r["aps"])
        best = None
        for e in r["epochs"]:
            best = max(best or 0.0, e["test_accuracy"])
            yield dict(head, epoch=e["epoch"], steps=e["steps"], lr=num(e["lr"], ".6g"),
                       train_loss=num(e["train_loss"], ".6f"), test_accuracy=num(e["test_accuracy"], ".4f"),
                       best_accuracy=num(best, ".4f"),
                       nonfinite_steps=e["nonfinite_steps"], exchange_seconds=num(e["exchange_seconds"], ".3f"),
                       flushed_to_0=num(e["flushed"], ".6e"), overflowed=num(e["overflowed"], ".6e"),
                       seconds=num(e["seconds"], ".2f"))
        last = r["epochs"][-1] if r["epochs"] else {}
        yield dict(head, epoch="final", steps=r["steps"], train_loss=num(last.get("train_loss"), ".6f"),
                   test_accuracy=num(last.get("test_accuracy"), ".4f"), best_accuracy=num(best, ".4f"),
                   nonfinite_steps=r["nonfinite_steps"], exchange_seconds=num(r["exchange_seconds"], ".3f"),
                   flushed_to_0=num(r["flushed"], ".6e"), overflowed=num(r["overflowed"], ".6e"),
                   seconds=num(r["seconds"], ".2f"), diverged=int(r["diverged"]), stopped=int(r["stopped"]),
                   weights_hash=r["hash"])


def write_csv(path, meta, results):
    """Written whole after every run (to a temporary file, then renamed)."""
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, CSV_FIELDS)
        w.writeheader()
        w.writerows(csv_rows(meta, results))
    os.replace(tmp, path)


def opt_float(s):
    return float(s) if s not in ("", None) else None


def read_csv(path):
    """(meta, results) of a CSV that write_csv wrote."""
    runs, meta = {}, {}
    try:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                meta = {k: row[k] for k in CSV_FIELDS[:6]}
                r = runs.setdefault(int(row["run"]), {"format": row["grad_format"], "aps": row["aps"],
                                                      "seed": int(row["seed"]), "epochs": []})
                if row["epoch"] != "final":
                    r["epochs"].append({"epoch": int(row["epoch"]), "train_loss": float(row["train_loss"]),
                                        "test_accuracy": float(row["test_accuracy"])})
                    continue
                r.update({"steps": int(row["steps"]), "nonfinite_steps": int(row["nonfinite_steps"]),
                          "diverged": row["diverged"] == "1",
                          "exchange_seconds": float(row["exchange_seconds"]), "seconds": float(row["seconds"]),
                          "flushed": opt_float(row["flushed_to_0"]), "overflowed": opt_float(row["overflowed"]),
                          "stopped": row["stopped"] == "1", "hash": row["weights_hash"]})
    except OSError as e:
        raise UsageError(f"--from-csv {path}: {e.strerror or e}") from None
    except (KeyError, ValueError, TypeError):
        raise UsageError(f"--from-csv {path}: not a CSV of {PROG} --out-csv") from None
    if not runs or any("hash" not in r for r in runs.values()):
        raise UsageError(f"--from-csv {path}: no runs, or a run without its final row")
    return meta, [runs[k] for k in sorted(runs)]


def frac(x):
    return "n/a" if x is None else "0" if x == 0 else f"{x:.2e}"


def span(values):
    """min–max of fractions, or the one value."""
    lo, hi = frac(min(values)), frac(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def points(a, b):
    """a − b in accuracy points, signed, with a minus sign."""
    return f"{100 * (a - b):+.2f}".replace("-", "−")


def run_table(results):
    lines = ["| seed | format | APS | epochs | final loss | final acc | best acc | flushed-to-0 | overflowed | "
             "non-finite steps | exchange ms/step | seconds | weights-hash |", "|" + "---|" * 13]
    for r in results:
        e = r["epochs"]
        epochs = f"{len(e)}" + (" (stopped)" if r["stopped"] else "") + (" diverged" if r["diverged"] else "")
        loss, acc = (f"{e[-1]['train_loss']:.4f}", f"{e[-1]['test_accuracy']:.4f}") if e else ("—", "—")
        best = f"{max(x['test_accuracy'] for x in e):.4f}" if e else "—"
        per_step = r["exchange_seconds"] / r["steps"] * 1e3 if r.get("steps") else None
        lines.append(f"| {r['seed']} | {r['format']} | {r['aps']} | {epochs} | {loss} | {acc} | {best} | "
                     f"{frac(r['flushed'])} | {frac(r['overflowed'])} | {r['nonfinite_steps']} | "
                     f"{num(per_step, '.2f') or 'n/a'} | {r['seconds']:.1f} | {r['hash']} |")
    return "\n".join(lines)


def seed_table(results, seeds):
    """Per configuration, over the runs that finished: each seed's final accuracy, the mean,
    the difference to fp32 of the same seed (points) and the final training loss."""
    done = {(r["format"], r["aps"], r["seed"]): r for r in results if not r["stopped"] and r["epochs"]}
    configs = list(dict.fromkeys((r["format"], r["aps"]) for r in results))
    fp32 = {s: next((r for (f, _, t), r in done.items() if f == "fp32" and t == s), None) for s in seeds}
    ss = " / ".join(map(str, seeds))
    lines = [f"| format | APS | final acc, seeds {ss} | mean | vs fp32 (points), seeds {ss} | final train loss, seeds "
             f"{ss} | flushed-to-0, min–max | non-finite steps | seconds, mean |", "|" + "---|" * 9]
    for fmt, aps in configs:
        rs = [done.get((fmt, aps, s)) for s in seeds]
        got = [r for r in rs if r]
        if not got:
            continue
        acc = [r["epochs"][-1]["test_accuracy"] if r else None for r in rs]
        vs = ["—" if fmt == "fp32" or r is None or fp32[s] is None else
              points(r["epochs"][-1]["test_accuracy"], fp32[s]["epochs"][-1]["test_accuracy"])
              for r, s in zip(rs, seeds)]
        loss = " / ".join("—" if r is None else f"{r['epochs'][-1]['train_loss']:.4f}" for r in rs)
        fl = [r["flushed"] for r in got if r["flushed"] is not None]
        mean = sum(a for a in acc if a is not None) / len(got)
        lines.append(f"| {fmt} | {aps} | {' / '.join('—' if a is None else f'{a:.4f}' for a in acc)} | {mean:.4f} | "
                     f"{' / '.join(vs)} | {loss} | {span(fl) if fl else 'n/a'} | "
                     f"{sum(r['nonfinite_steps'] for r in got)} | {sum(r['seconds'] for r in got) / len(got):.1f} |")
    return "\n".join(lines)


def tables(meta, results, seeds):
    head = (f"ResNet-18 ({meta['model']}) on Fashion-MNIST, {meta['workers']} emulated workers, batch "
            f"{meta['batch']}, {meta['epochs']} epochs, {meta['backward']} backward, on {meta['device']}: "
            f"{len(results)} runs")
    return f"{head}\n\n{run_table(results)}\n\n{seed_table(results, seeds)}\n"


COLORS = {"fp32": "black", "e5m2": "tab:blue", "e4m3": "tab:orange", "e3m0": "tab:red"}


def curves(results):
    """Per configuration (in the order of the runs): the mean and min-max over the seeds of
    the test accuracy and the training loss per epoch, and each seed's final accuracy."""
    out = []
    for fmt, aps in dict.fromkeys((r["format"], r["aps"]) for r in results):
        rs = [r for r in results if (r["format"], r["aps"]) == (fmt, aps) and r["epochs"] and not r["stopped"]]
        if not rs:
            continue
        n = max(len(r["epochs"]) for r in rs)
        acc = [[r["epochs"][e]["test_accuracy"] for r in rs if len(r["epochs"]) > e] for e in range(n)]
        loss = [[r["epochs"][e]["train_loss"] for r in rs if len(r["epochs"]) > e] for e in range(n)]
        finals = [r["epochs"][-1]["test_accuracy"] for r in rs]
        out.append({"name": fmt if fmt == "fp32" else f"{fmt}, {'APS' if aps == 'on' else 'no APS'}",
                    "color": COLORS.get(fmt, "tab:green"), "style": "--" if aps == "off" and fmt != "fp32" else "-",
                    "xs": list(range(1, n + 1)), "acc": acc, "loss": loss, "finals": finals,
                    "final_mean": sum(finals) / len(finals)})
    return out


def write_plot(path, meta, results):
    """Three panels: test accuracy per epoch (mean over the seeds, band min-max); training
    loss per epoch (log scale); each seed's final accuracy (dots) and the mean (bar), on an
    axis zoomed to the configurations within 5 points of the best."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401 (matplotlib.ticker below)
    cs = curves(results)
    fig, (ax, lx, fx) = plt.subplots(1, 3, figsize=(16, 4.8), gridspec_kw={"width_ratios": [3, 3, 2]})
    for c in cs:
        for a, key in ((ax, "acc"), (lx, "loss")):
            a.plot(c["xs"], [sum(v) / len(v) for v in c[key]], c["style"], marker="o", ms=3, color=c["color"],
                   label=c["name"])
            a.fill_between(c["xs"], [min(v) for v in c[key]], [max(v) for v in c[key]], color=c["color"], alpha=0.12)
    seeds = sorted({r["seed"] for r in results})
    ax.set_title(f"ResNet-18, Fashion-MNIST, {meta['workers']} emulated workers (seeds "
                 f"{', '.join(map(str, seeds))}; band: min–max)", fontsize=9)
    ax.set_ylabel("test accuracy")
    lx.set_yscale("log")
    lx.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.2g"))
    lx.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%.2g"))
    lx.set_ylabel("training loss (mean of the epoch)")
    for a in (ax, lx):
        a.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        a.set_xlabel("epoch")
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    best = max((c["final_mean"] for c in cs), default=1.0)
    near = [c for c in cs if c["final_mean"] >= best - 0.05]
    lo = min((min(c["finals"]) for c in near), default=0.0) - 0.003
    hi = max((max(c["finals"]) for c in near), default=1.0) + 0.003
    for k, c in enumerate(cs):
        if c in near:
            fx.scatter(c["finals"], [k] * len(c["finals"]), color=c["color"], s=18)
            fx.plot([c["final_mean"]] * 2, [k - 0.3, k + 0.3], color=c["color"])
        else:
            fx.text(lo, k, f"  mean {c['final_mean']:.4f} (off the axis)", va="center", fontsize=8, color=c["color"])
    fx.set_xlim(lo, hi)
    fx.set_ylim(len(cs) - 0.5, -0.5)
    fx.set_yticks(range(len(cs)))
    fx.set_yticklabels([c["name"] for c in cs], fontsize=8)
    fx.set_xlabel("final test accuracy; dots: seeds, bar: mean", fontsize=9)
    fx.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_outputs(args, meta, results):
    """The tables on standard output and in --out-md, the plot; exit status 1 on a failure."""
    text = tables(meta, results, sorted({r["seed"] for r in results}) or args.seeds)
    print(text, flush=True)
    for flag, path, write in (("--out-md", args.out_md, lambda p: open(p, "w").write(text)),
                              ("--plot", args.plot, lambda p: write_plot(p, meta, results))):
        if path:
            try:
                write(path)
            except OSError as e:
                fail(EXIT_IO, f"{flag} {path}: {e.strerror or e}")


# --- main ----------------------------------------------------------------------------------------

def warn(message):
    """What the user must see, --quiet or not."""
    print(message, file=sys.stderr, flush=True)


def fail(status, message):
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    sys.exit(status)


def check_environment(args):
    """The outputs can be written, matplotlib is there for --plot, cpd.torch imports and
    takes every format; then the device settings: threads, TF32, cuDNN's autotuner."""
    for flag in ("out_csv", "out_md", "plot"):
        path = getattr(args, flag)
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise UsageError(f"--{flag.replace('_', '-')} {path}: no such directory")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plot needs matplotlib (Debian: python3-matplotlib)") from None
    if args.from_csv:
        return
    try:
        import cpd.torch  # noqa: F401
    except ImportError as e:
        raise UsageError(f"cannot import the package cpd ({e}): put the directory that holds cpd/ on PYTHONPATH "
                         "(<build>/python of a -DCPD_BUILD_PYTHON=ON build, or pip install .); "
                         "scripts/resnet_experiment.sh finds or builds it") from None
    for f in args.formats:
        try:
            cpd.torch.EmulatedWorkers(nn.Linear(1, 1), args.workers, f, scaler="aps")
        except (ValueError, TypeError) as e:
            raise UsageError(f"--formats: {e}") from None
    torch.set_num_threads(args.threads)
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(f"--device {args.device}: this torch has no CUDA device")
        torch.backends.cudnn.benchmark = True
        set_tf32(not args.no_tf32)


def set_tf32(on):
    """TF32 in cuDNN's convolutions and cuBLAS's products, or not: torch 2.9's settings
    where torch has them (the older ones warn there), the older ones before."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if hasattr(conv, "fp32_precision") and hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        conv.fp32_precision = torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = on


def device_name(args):
    return torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") else "cpu"


def main(argv=None):
    t0 = time.perf_counter()
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        check_environment(args)
        if args.from_csv:
            meta, results = read_csv(args.from_csv)
            write_outputs(args, meta, results)
            return EXIT_OK
        data = load_data(args)
    except UsageError as e:
        fail(EXIT_USAGE, str(e))
    log = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    budget = Budget(args.budget_seconds, t0)
    configs = run_configs(args)
    runs = [(seed, cfg) for seed in args.seeds for cfg in configs]
    try:
        plan = make_plan(args, data, configs, runs, budget, log)
    except (TypeError, ValueError) as e:
        fail(EXIT_USAGE, f"cpd.torch.EmulatedWorkers cannot train on {args.device} ({type(e).__name__}: {e})")
    meta = {"model": "resnet18" if args.width == 64 else f"resnet18-width{args.width}", "device": device_name(args),
            "workers": args.workers, "batch": args.batch, "backward": plan["backward"], "epochs": plan["epochs"]}
    log(f"{PROG}: {len(runs)} runs of {plan['epochs']} epochs ({len(data['train_x']) // args.batch} steps each) on "
        f"{meta['device']}, {plan['backward']} backward; {budget.elapsed():.0f} s so far")

    def save(results):
        if args.out_csv:
            try:
                write_csv(args.out_csv, meta, results)
            except OSError as e:
                fail(EXIT_IO, f"--out-csv {args.out_csv}: {e.strerror or e}")

    results, stopped = train_all(args, data, runs, plan, budget, save, log)
    save(results)
    write_outputs(args, meta, results)
    log(f"{PROG}: {len(results)} of {len(runs)} runs in {budget.elapsed():.0f} s")
    diverged = [f"{r['format']} (APS {r['aps']}, seed {r['seed']})" for r in results if r["diverged"]]
    if diverged:
        warn(f"{PROG}: {len(diverged)} runs diverged (a loss or weight became NaN or infinite): {', '.join(diverged)}")
    return EXIT_BUDGET if stopped else EXIT_DIVERGED if diverged else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
