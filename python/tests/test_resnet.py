# SPDX-License-Identifier: MIT
"""examples/torch/resnet_fmnist.py, the ResNet-18 experiment of docs/results.md, on the CPU:
a narrow ResNet-18 (width 4) on a few hundred synthetic images written as IDX files.

- One worker in fp32 gives plain training's gradient and running statistics, bit for bit,
  computed either way (batched: one pass for all workers; sequential: EmulatedWorkers runs
  the model per shard); in any format both ways give the same bits.
- Eight workers: each worker's gradient of the batched pass is its own shard's (BatchNorm
  over the shard), the exchanged fp32 mean is the mean of the eight, not the gradient of the
  whole batch, both ways; the running statistics are worker 0's.
- The command line end to end: every one of the 21 runs in the CSV and the tables; a budget
  stops it cleanly (exit status 4) with what ran; --from-csv redraws the tables.
"""

import copy
import csv
import gzip
import lzma
import os
import pathlib
import struct
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

ROOT = pathlib.Path(os.environ.get("CPD_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
SCRIPT = ROOT / "examples" / "torch" / "resnet_fmnist.py"
sys.path.insert(0, str(SCRIPT.parent))
import resnet_fmnist as rf  # noqa: E402
import resnet_workers as rw  # noqa: E402

torch.set_num_threads(1)


def batch(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def net(seed=0):
    torch.manual_seed(seed)
    return rw.ResNet18(width=4)


def plain(model, x, y):
    """Plain training's gradient of the mean loss of (x, y), and the loss."""
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return [p.grad.clone() for p in model.parameters()], loss.item()


def running(model):
    return [t.clone() for m in rw.batch_norms(model) for t in (m.running_mean, m.running_var)]


def close(a, b, tol=2e-4):
    """Equal up to float32 rounding in a different order of the sums."""
    return float((a - b).abs().max()) <= tol * max(float(b.abs().max()), 1e-3)


@pytest.mark.parametrize("mode", ["batched", "sequential"])
def test_one_worker_in_fp32_is_plain_training_bit_for_bit(mode):
    model, ref = net(), net()
    x, y = batch(16)
    want, loss = plain(ref, x, y)
    trainer = rw.TRAINERS[mode](model, 1, "fp32", "aps")
    assert trainer.step(x, y) == loss
    trainer.before_eval()
    for p, w in zip(model.parameters(), want):
        assert torch.equal(p.grad, w)
    for a, b in zip(running(model), running(ref)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("fmt", ["e4m3", "e3m0"])
def test_one_worker_gives_the_same_bits_either_way_in_any_format(fmt):
    a, b = net(1), net(1)
    x, y = batch(16, 1)
    rw.BatchedWorkers(a, 1, fmt, "aps").step(x, y)
    rw.SequentialWorkers(b, 1, fmt, "aps").step(x, y)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p.grad, q.grad)


def test_each_of_eight_workers_gets_its_own_shards_gradient():
    model = net(2)
    x, y = batch(32, 2)
    losses, grads = rw.ReplicatedResNet(copy.deepcopy(model), 8).worker_gradients(x, y)
    for w in range(8):
        want, loss = plain(copy.deepcopy(model), x[4 * w:4 * w + 4], y[4 * w:4 * w + 4])
        assert abs(float(losses[w]) - loss) <= 1e-5 * abs(loss)
        assert all(close(g, v) for g, v in zip(grads[w], want)), f"worker {w}"


def test_eight_workers_in_fp32_exchange_the_mean_of_their_shards_gradients():
    model = net(3)
    x, y = batch(32, 3)
    shards = [plain(copy.deepcopy(model), x[4 * w:4 * w + 4], y[4 * w:4 * w + 4])[0] for w in range(8)]
    mean = [sum(gs) / 8 for gs in zip(*shards)]
    whole, _ = plain(copy.deepcopy(model), x, y)
    for mode in ("batched", "sequential"):
        m = copy.deepcopy(model)
        rw.TRAINERS[mode](m, 8, "fp32", "none").step(x, y)
        assert all(close(p.grad, v) for p, v in zip(m.parameters(), mean)), mode
    # BatchNorm over 4 images, not 32: the whole batch's gradient is another one.
    flat = torch.cat([v.flatten() for v in mean])
    assert float((flat - torch.cat([v.flatten() for v in whole])).norm()) > 0.05 * float(flat.norm())


def test_the_running_statistics_are_worker_0s():
    model = net(4)
    x, y = batch(32, 4)
    ref = copy.deepcopy(model)
    ref(x[:4])  # one training-mode forward of shard 0
    for mode in ("batched", "sequential"):
        m = copy.deepcopy(model)
        trainer = rw.TRAINERS[mode](m, 8, "e4m3", "aps")
        trainer.step(x, y)
        trainer.before_eval()
        assert all(close(a, b, 1e-5) for a, b in zip(running(m), running(ref))), mode


# --- the command line ------------------------------------------------------------------------

def write_idx(path, array, opener):
    dims = array.dim()
    with opener(path, "wb") as f:
        f.write(struct.pack(">I", 2051 if dims == 3 else 2049) + struct.pack(">" + "I" * dims, *array.shape))
        f.write(array.numpy().tobytes())


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """256 training images (gzip, as Debian ships them), 64 test images (not compressed) and
    their labels (xz)."""
    d = tmp_path_factory.mktemp("fmnist")
    g = torch.Generator().manual_seed(7)
    for part, n, opener, suffix in (("train", 256, gzip.open, ".gz"), ("t10k", 64, open, "")):
        labels = torch.randint(0, 10, (n,), generator=g, dtype=torch.uint8)
        images = (torch.rand(n, 28, 28, generator=g) * 64 + labels.view(-1, 1, 1) * 19).to(torch.uint8)
        write_idx(d / f"{part}-images-idx3-ubyte{suffix}", images, opener)
        write_idx(d / f"{part}-labels-idx1-ubyte.xz", labels, lzma.open)
    return d


def cli(data, out, *args):
    cmd = [sys.executable, str(SCRIPT), "--data", str(data), "--device", "cpu", "--width", "4", "--batch", "32",
           "--limit-test", "64", "--quiet", "--out-csv", str(out / "r.csv"), "--out-md", str(out / "r.md"), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def rows(out):
    with open(out / "r.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_every_run_in_the_csv_and_the_tables(data, tmp_path):
    status, log = cli(data, tmp_path, "--epochs", "1", "--backward", "batched")
    assert status == 0, log
    finals = [r for r in rows(tmp_path) if r["epoch"] == "final"]
    got = [(r["seed"], r["grad_format"], r["aps"]) for r in finals]
    configs = [("fp32", "off")] + [(f, a) for f in ("e5m2", "e4m3", "e3m0") for a in ("off", "on")]
    assert got == [(str(s), f, a) for s in (1, 2, 3) for f, a in configs]
    epochs = [r for r in rows(tmp_path) if r["epoch"] == "1"]
    assert len(epochs) == 21 and all(r["steps"] == "8" and r["backward"] == "batched" for r in epochs)
    assert all(r["stopped"] == "0" and len(r["weights_hash"]) == 16 for r in finals)
    md = (tmp_path / "r.md").read_text()
    assert md.count("| e4m3 | on |") == 4  # three runs and the seeds' row
    status, log = cli(data, tmp_path, "--from-csv", str(tmp_path / "r.csv"), "--out-md", str(tmp_path / "again.md"))
    assert status == 0, log
    assert (tmp_path / "again.md").read_text().count("| e4m3 | on |") == 4


def test_one_worker_trains_to_the_same_weights_either_way(data, tmp_path):
    hashes = []
    for mode in ("batched", "sequential"):
        status, log = cli(data, tmp_path, "--epochs", "2", "--workers", "1", "--seeds", "5", "--formats", "e4m3",
                          "--aps", "on", "--backward", mode)
        assert status == 0, log
        hashes.append([r["weights_hash"] for r in rows(tmp_path) if r["epoch"] == "final"])
    assert hashes[0] == hashes[1]


def test_a_budget_stops_cleanly_with_what_ran(data, tmp_path):
    status, log = cli(data, tmp_path, "--epochs", "3", "--budget-seconds", "0.001", "--seeds", "1",
                      "--formats", "fp32,e4m3")
    assert status == 4, log
    assert "budget spent during run 1 of 3" in log
    (final,) = rows(tmp_path)
    assert final["epoch"] == "final" and final["stopped"] == "1" and final["test_accuracy"] == ""


class CountingBudget(rf.Budget):
    """A clock that a step moves by 100 s (each check of exceeded() after a step), and
    nothing else: a run of 16 steps takes 1600 s, and the real seconds of a run (a few, the
    estimate of the next run's) are next to nothing."""

    def __init__(self, limit):
        super().__init__(limit)
        self.t = 0

    def elapsed(self):
        return self.t

    def exceeded(self):
        self.t += 100
        return self.t > self.limit


# 2100 s: run 1 (16 steps), then run 2 stops during its first epoch; 1600 s and a hair: run 1,
# then no time for run 2 (at least a hair, by the real seconds of run 1).
@pytest.mark.parametrize("limit, kept", [(2100, [2, 0]), (1600.000001, [2])])
def test_a_budget_ends_a_run_or_skips_the_next(data, limit, kept):
    args = rf.parse_args(["--data", str(data), "--device", "cpu", "--width", "4", "--batch", "32", "--epochs", "2",
                          "--limit-test", "64", "--seeds", "1", "--formats", "fp32,e4m3", "--aps", "on"])
    runs = [(1, c) for c in rf.run_configs(args)]
    plan = {"backward": "batched", "epochs": 2}
    results, stopped = rf.train_all(args, rf.load_data(args), runs, plan, CountingBudget(limit), lambda r: None,
                                    lambda s: None)
    assert stopped and [len(r["epochs"]) for r in results] == kept
    assert [r["stopped"] for r in results] == [False] + [True] * (len(kept) - 1)


def test_bad_input_is_refused(data, tmp_path):
    status, log = cli(data, tmp_path, "--epochs", "1", "--formats", "e4m3,nope")
    assert status == 2 and "--formats" in log
    status, log = cli(tmp_path / "none", tmp_path, "--epochs", "1")
    assert status == 2 and "dataset-fashion-mnist" in log
    status, log = cli(data, tmp_path, "--batch", "30")
    assert status == 2 and "--batch" in log
