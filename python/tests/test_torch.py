# SPDX-License-Identifier: MIT
"""cpd.torch: the DDP communication hook and all_reduce over 2, 3 and 4 gloo processes
give, on every rank, exactly the bits of cpd.simulate_allreduce of all ranks' local
gradients (computed here, in one process); the emulation of W workers; bad input."""

import os
import pickle
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import cpd
import cpd.torch as ct

sys.path.insert(0, os.path.dirname(__file__))
import dist_worker  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(tmp_path, world, mode, fmt, algorithm="ring", rounding="nearest_even", scaler="aps", kahan=False,
              backend="gloo", device="cpu", rotation=0, codec=None):
    port = free_port()
    procs, outs = [], []
    for r in range(world):
        out = tmp_path / f"rank{r}.pkl"
        outs.append(out)
        cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "dist_worker.py"), "--world", str(world),
               "--rank", str(r), "--port", str(port), "--mode", mode, "--format", fmt, "--algorithm", algorithm,
               "--rounding", rounding, "--scaler", scaler, "--backend", backend, "--device", device,
               "--rotation", str(rotation), "--out", str(out)] + (["--kahan"] if kahan else []) + (
                   ["--codec", codec] if codec else [])
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=120)[0].decode(errors="replace"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]
    res = []
    for out in outs:
        with open(out, "rb") as f:
            res.append(pickle.load(f))
    return res


def same(a, b):
    a, b = np.asarray(a, np.float32).ravel(), np.asarray(b, np.float32).ravel()
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32))


def rotated(x, block, inverse=False):
    """x rotated as cpd.torch rotates with rotation=block and seed 5 (a NumPy array)."""
    return cpd.hadamard(np.asarray(x, np.float32), block, 5, inverse, stream=ct.ROTATION_STREAM)


CASES = [
    (2, "e4m3fn", "ring", "nearest_even", False),
    (3, "e5m2", "ring", "stochastic", False),
    (4, "e2m1", "all_gather", "nearest_even", False),
    (3, "bf16", "pipelined_ring", "nearest_even", True),
    (4, "e3m0", "ring", "stochastic", False),
    (2, "e3m2finite", "all_gather", "stochastic", False),
    # the rank schedule runs every algorithm of cpd::mpi's: two_step, Kahan with all_gather
    (3, "e4m3fn", "two_step", "nearest_even", False),
    (4, "e5m2", "two_step", "stochastic", False),
    (3, "e4m3fn", "all_gather", "nearest_even", True),
]
# with a Hadamard rotation of every gradient tensor (rotation=B): the rotated simulation, rotated back
ROTATED_CASES = [(3, "e2m1fn", "ring", "nearest_even", False, 16), (2, "e4m3fn", "all_gather", "stochastic", False, 8)]


# with block scales (scaler="mx32", "nvfp4"): cpd.simulate_block_scaled_allreduce's bits
BLOCK_HOOK_CASES = [(3, "e2m1fn", "ring", "nearest_even", False, 0, "nvfp4"),
                    (2, "e4m3fn", "all_gather", "nearest_even", True, 0, "mx32"),
                    (3, "e2m1fn", "pipelined_ring", "nearest_even", False, 16, "mx32")]
# through gradient codecs (codec=SPEC): cpd.simulate_codec_allreduce's bits
CODEC_HOOK_CASES = [(3, "fp32", "ring", "nearest_even", False, 0, "none", "int:4:32"),
                    (2, "fp32", "ring", "nearest_even", False, 16, "none", "posit:8:2:sr")]


def simulate_tensor(xs, fmt, scaler, codec=None, **kw):
    """cpd's in-process exchange of one tensor of W workers under `scaler` (a block rule by
    cpd.simulate_block_scaled_allreduce) or through `codec` (cpd.simulate_codec_allreduce)."""
    if codec is not None:
        return cpd.simulate_codec_allreduce(xs, codec, mean=kw["mean"], seed=kw["seed"], stream=kw["stream"])
    if scaler in cpd.block_rules:
        kw.pop("rounding")
        return cpd.simulate_block_scaled_allreduce(xs, fmt, rule=scaler, **kw)
    return cpd.simulate_allreduce(xs, fmt, scaler=scaler, **kw)


@pytest.mark.parametrize("world,fmt,algorithm,rounding,kahan,rotation,scaler,codec",
                         [c + (0, "aps", None) for c in CASES] + [c + ("aps", None) for c in ROTATED_CASES]
                         + [c + (None,) for c in BLOCK_HOOK_CASES] + CODEC_HOOK_CASES)
def test_ddp_hook_equals_simulation(tmp_path, world, fmt, algorithm, rounding, kahan, rotation, scaler, codec):
    res = run_ranks(tmp_path, world, "ddp", fmt, algorithm, rounding, kahan=kahan, rotation=rotation, scaler=scaler,
                    codec=codec)
    net = dist_worker.make_model()
    params = list(net.parameters())
    assert res[0]["steps"] == dist_worker.STEPS
    expected = {}
    for step in range(dist_worker.STEPS):
        local = []
        for r in range(world):
            net.zero_grad()
            x, y = dist_worker.batch(r, step)
            torch.nn.functional.cross_entropy(net(x), y).backward()
            local.append([p.grad.clone() for p in params])
        # which bucket position each parameter had at this step (DDP fills buckets in reverse
        # order): the records give each tensor's size and stream in bucket order
        recs = [rc for rc in res[0]["records"] if rc["step"] == step]
        by_size = {}
        for rc in recs:
            for n, s in zip(rc["sizes"], rc["streams"]):
                by_size.setdefault(n, []).append(s)
        assert sum(len(v) for v in by_size.values()) == len(params)
        for i in reversed(range(len(params))):
            stream = by_size[params[i].numel()].pop(0)
            xs = [local[r][i].contiguous() for r in range(world)]
            if rotation:
                xs = [rotated(x, rotation) for x in xs]
            sim, info = simulate_tensor(xs, fmt, scaler, codec, algorithm=algorithm, rounding=rounding, kahan=kahan,
                                        mean=True, seed=5, stream=stream, diagnostics=True)
            if rotation:
                sim = rotated(sim, rotation, inverse=True)
            if scaler in cpd.block_rules:  # the hook's record of this tensor's block scales
                rec = [sc for rc in recs for n, sc in zip(rc["sizes"], rc["scales"]) if n == params[i].numel()]
                assert any(sc.tensor_scale == info["tensor_scale"] and sc.codes.size == info["blocks"]
                           for sc in rec), (step, i)
            for r in range(world):
                assert same(sim, res[r][f"step{step}"][i]), (step, i, r)
            for k, v in info.get("scaled", {}).items():
                expected[k] = expected.get(k, 0) + v
    # the hook's diagnostics (this rank's values, nearest-even) summed over the ranks: the
    # simulation's counts of every worker's scaled values
    got = {k: sum(r["stats"].get(k, 0) for r in res) for k in expected}
    if codec is not None:  # (a codec has no diagnostics: its bits per value are its payload's)
        assert not res[0]["stats"] and res[0]["nonfinite_steps"] == 0
        payload = sum(cpd.simulate_codec_allreduce([p.detach().reshape(-1)], codec)[1]["payload_bytes"] for p in params)
        assert res[0]["bits_per_value"] > 8 * payload / sum(p.numel() for p in params)
        return
    assert got["count"] == expected["count"]
    if rounding == "nearest_even":
        assert got == expected
    if len(recs) > 1:
        assert len({rc["bucket"] for rc in recs}) == len(recs)


@pytest.mark.skipif(not (torch.cuda.is_available() and torch.distributed.is_nccl_available()),
                    reason="needs a CUDA device and NCCL (one rank: NCCL refuses two ranks on one GPU)")
@pytest.mark.parametrize("fmt,algorithm,rounding,kahan,scaler", [("e4m3fn", "ring", "nearest_even", False, "aps"),
                                                                 ("e5m2", "all_gather", "stochastic", False, "aps"),
                                                                 ("bf16", "pipelined_ring", "nearest_even", True, "aps"),
                                                                 ("e2m1fn", "ring", "nearest_even", False, "nvfp4")])
def test_hook_and_all_reduce_on_a_gpu_with_nccl(tmp_path, fmt, algorithm, rounding, kahan, scaler):
    # DDP on the GPU: every bucket's result equals the simulation of its buffer (one worker),
    # tensor by tensor, with the streams the hook recorded (block rules: through host copies).
    res = run_ranks(tmp_path, 1, "ddp", fmt, algorithm, rounding, kahan=kahan, backend="nccl", device="cuda",
                    scaler=scaler)[0]
    assert res["steps"] == dist_worker.STEPS and len(res["buckets"]) == len(res["records"]) > 1
    for rc, (before, after) in zip(res["records"], res["buckets"]):
        at = 0
        for n, stream in zip(rc["sizes"], rc["streams"]):
            sim = simulate_tensor([torch.from_numpy(before[at:at + n])], fmt, scaler, algorithm=algorithm,
                                  rounding=rounding, kahan=kahan, mean=True, seed=5, stream=stream)[0]
            assert same(sim, after[at:at + n]), (rc["step"], rc["bucket"], at)
            at += n
    # all_reduce on GPU tensors with NaN, 1e30 and tensors of 1 and 2 values
    res = run_ranks(tmp_path, 1, "allreduce", fmt, algorithm, rounding, backend="nccl", device="cuda",
                    scaler=scaler)[0]
    for i, t in enumerate(dist_worker.tensors(0, 1)):
        sim, info = simulate_tensor([t], fmt, scaler, algorithm=algorithm, rounding=rounding, mean=True, seed=5,
                                    stream=8 * i)
        assert same(sim, res["tensors"][i]), i
        if scaler in cpd.block_rules:
            assert res["scales"][i][:2] == (info["nonfinite"], info["tensor_scale"])
        else:
            assert res["scales"][i] == (info["scale"].exponent, info["scale"].nonfinite)
    assert np.isnan(res["tensors"][4][100]) and res["scales"][4][0 if scaler in cpd.block_rules else 1]


@pytest.mark.parametrize("world,fmt,algorithm,rounding", [(2, "e4m3fn", "ring", "nearest_even"),
                                                          (3, "e5m2", "all_gather", "stochastic"),
                                                          (4, "e4m3", "ring", "stochastic"),
                                                          # formats without NaN (FP6, FP4): the NaN must survive
                                                          (2, "e2m1fn", "ring", "nearest_even"),
                                                          (3, "e3m2fn", "all_gather", "stochastic"),
                                                          (2, "e2m3fn", "pipelined_ring", "nearest_even"),
                                                          (3, "e2m1fn", "two_step", "nearest_even"),
                                                          (1, "e2m1fn", "ring", "nearest_even")])
def test_all_reduce_with_nan_and_tiny_tensors(tmp_path, world, fmt, algorithm, rounding):
    res = run_ranks(tmp_path, world, "allreduce", fmt, algorithm, rounding)
    local = [dist_worker.tensors(r, world) for r in range(world)]
    nonfinite = 0
    for i in range(len(local[0])):
        sim, info = cpd.simulate_allreduce([local[r][i] for r in range(world)], fmt, algorithm=algorithm,
                                           rounding=rounding, mean=True, seed=5, stream=8 * world * world * i)
        nonfinite += info["nonfinite_out"]
        for r in range(world):
            assert same(sim, res[r]["tensors"][i]), (i, r)
            assert res[r]["scales"][i] == (info["scale"].exponent, info["scale"].nonfinite)
    # the NaN of the last rank: its tensor's scale is marked, the result holds NaN, and it is
    # counted as the simulation counts it
    assert res[0]["scales"][4][1] and nonfinite >= 1
    assert np.isnan(res[0]["tensors"][4][100])
    assert all(r["out_nonfinite"] == nonfinite for r in res)


@pytest.mark.parametrize("world,fmt,algorithm,rounding,block", [(3, "e2m1fn", "ring", "nearest_even", 16),
                                                                (2, "e4m3fn", "two_step", "stochastic", 64)])
def test_all_reduce_with_a_rotation(tmp_path, world, fmt, algorithm, rounding, block):
    """rotation=B: the simulation of every rank's rotated tensors, rotated back; the last rank's
    NaN fills its block of the result, counted; without the rotation the bits differ."""
    res = run_ranks(tmp_path, world, "allreduce", fmt, algorithm, rounding, rotation=block)
    plain = run_ranks(tmp_path, world, "allreduce", fmt, algorithm, rounding)
    local = [dist_worker.tensors(r, world) for r in range(world)]
    nonfinite = 0
    for i in range(len(local[0])):
        sim, info = cpd.simulate_allreduce([rotated(local[r][i], block) for r in range(world)], fmt,
                                           algorithm=algorithm, rounding=rounding, mean=True, seed=5,
                                           stream=8 * world * world * i)
        sim = rotated(sim, block, inverse=True)
        nonfinite += int((~np.isfinite(sim)).sum())
        for r in range(world):
            assert same(sim, res[r]["tensors"][i]), (i, r)
            assert res[r]["scales"][i] == (info["scale"].exponent, info["scale"].nonfinite)
    assert all(r["out_nonfinite"] == nonfinite for r in res)
    nan_block = np.isnan(res[0]["tensors"][4])
    assert nan_block.sum() == block and nan_block[100 // block * block:(100 // block + 1) * block].all()
    assert not same(res[0]["tensors"][3], plain[0]["tensors"][3])


@pytest.mark.parametrize("world,fmt,scaler,algorithm,kahan,rotation", [(2, "e4m3fn", "mx32", "ring", False, 0),
                                                                     (3, "e2m1fn", "nvfp4", "all_gather", False, 0),
                                                                     (4, "e2m1fn", "mx32", "ring", True, 0),
                                                                     (3, "e3m2fn", "mx32", "two_step", False, 0),
                                                                     (2, "e3m2fn", "nvfp4", "pipelined_ring", False, 0),
                                                                     (1, "e2m1fn", "mx32", "ring", False, 0),
                                                                     (3, "e2m1fn", "nvfp4", "ring", False, 32)])
def test_all_reduce_with_block_scales(tmp_path, world, fmt, scaler, algorithm, kahan, rotation):
    """scaler="mx32"/"nvfp4" over gloo: on every rank the bits, block codes, tensor scale and
    nonfinite flags of cpd.simulate_block_scaled_allreduce of all ranks' tensors (the rotated
    ones with rotation=B, the sum rotated back), the NaN of the last rank marked and kept; the
    codes (one byte a block) and NVFP4's amax (4 bytes a tensor) counted in statistics_bytes."""
    res = run_ranks(tmp_path, world, "allreduce", fmt, algorithm, scaler=scaler, kahan=kahan, rotation=rotation)
    local = [dist_worker.tensors(r, world) for r in range(world)]
    nonfinite, blocks = 0, 0
    for i in range(len(local[0])):
        xs = [rotated(local[r][i], rotation) if rotation else local[r][i] for r in range(world)]
        sim, info = cpd.simulate_block_scaled_allreduce(xs, fmt, rule=scaler, algorithm=algorithm, kahan=kahan,
                                                        mean=True, seed=5, stream=8 * world * world * i)
        sim = rotated(sim, rotation, inverse=True) if rotation else np.asarray(sim)
        nonfinite += int((~np.isfinite(sim)).sum())
        blocks += info["blocks"]
        for r in range(world):
            assert same(sim, res[r]["tensors"][i]), (i, r)
            bad, tensor_scale, codes = res[r]["scales"][i]
            assert bad == info["nonfinite"] and tensor_scale == info["tensor_scale"], (i, r)
            assert codes.dtype == np.uint8 and codes.size == info["blocks"], (i, r)
    assert res[0]["scales"][4][0] and np.isnan(res[0]["tensors"][4][100])
    assert not any(s[0] for s in res[0]["scales"][:4])
    assert all(r["out_nonfinite"] == nonfinite for r in res)
    if world > 1:  # the agreement check's 14 fields (two int64 each), then the amax and the codes
        expected = 14 * 16 + blocks + (4 * len(local[0]) if scaler == "nvfp4" else 0)
        assert all(r["statistics_bytes"] == expected for r in res), [r["statistics_bytes"] for r in res]


@pytest.mark.parametrize("world,codec,rotation", [(2, "int:8:32", 0), (3, "int:4:32", 0), (4, "qsgd:4bit:512", 0),
                                                 (3, "posit:8:2:sr", 0), (1, "fp:e4m3fn", 0), (2, "int:4:32", 16)])
def test_all_reduce_through_a_codec(tmp_path, world, codec, rotation):
    """codec=SPEC over gloo: on every rank the bits of cpd.simulate_codec_allreduce of all ranks'
    tensors (stochastic codecs: the same streams), the NaN of the last rank kept as NaN over its
    block; payload_bytes is this rank's payload, the codec's for each tensor."""
    res = run_ranks(tmp_path, world, "allreduce", "fp32", scaler="none", codec=codec, rotation=rotation)
    local = [dist_worker.tensors(r, world) for r in range(world)]
    nonfinite, payload = 0, 0
    for i in range(len(local[0])):
        xs = [rotated(local[r][i], rotation) if rotation else local[r][i] for r in range(world)]
        sim, info = cpd.simulate_codec_allreduce(xs, codec, mean=True, seed=5, stream=8 * world * world * i)
        sim = rotated(sim, rotation, inverse=True) if rotation else np.asarray(sim)
        nonfinite += int((~np.isfinite(sim)).sum())
        payload += info["payload_bytes"]
        for r in range(world):
            assert same(sim, res[r]["tensors"][i]), (i, r)
    assert np.isnan(res[0]["tensors"][4][100]) and all(r["scales"] == [] for r in res)
    assert all(r["out_nonfinite"] == nonfinite for r in res) and nonfinite > 0
    assert all(r["payload_bytes"] == payload for r in res)
    if world > 1:
        assert all(r["statistics_bytes"] == 14 * 16 for r in res)


def test_rotation_options_are_checked():
    for bad in (3, 1, -16, 131072):
        with pytest.raises(ValueError, match="rotation"):
            ct.emulate_allreduce([[torch.ones(4)]], "e4m3fn", rotation=bad)
    with pytest.raises(TypeError):
        ct.comm_hook("e4m3fn", rotation="16")
    # the emulation rotates too: a NaN of one worker fills its block of the sum
    x = [[torch.arange(40, dtype=torch.float32) * (r + 1) / 40] for r in range(3)]
    x[1][0][21] = float("nan")
    res, infos = ct.emulate_allreduce(x, "e4m3fn", rotation=8)
    assert np.isnan(res[0][16:24].numpy()).all() and infos[0]["nonfinite_out"] == 8
    assert np.isfinite(res[0][:16].numpy()).all() and np.isfinite(res[0][24:].numpy()).all()


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_that_disagree_raise_the_same_error_everywhere(tmp_path, world):
    """One case per field of the call (dist_worker.AGREE_CASES, HOOK_CASES), all in one process
    group: every rank raises MismatchError naming exactly the fields that differ, before its
    tensors change, and the group goes on working (an agreeing call then gives the simulation's
    bits); then a rank that never comes: the others raise AgreementError after their timeout."""
    res = run_ranks(tmp_path, world, "agree", "e4m3fn")
    for name, _, fields in dist_worker.AGREE_CASES + [("hook " + n, o, f) for n, o, f in dist_worker.HOOK_CASES]:
        if name.startswith("hook"):  # (DDP hands a hook's exception on as a RuntimeError that quotes it)
            assert {r[name][0] for r in res} == {"RuntimeError"}, (name, [r[name][:2] for r in res])
            msgs = [re.search(r"MismatchError: (cpd.torch.comm_hook: the ranks disagree on .*)", r[name][1]).group(1)
                    for r in res]
        else:
            assert {r[name][0] for r in res} == {"MismatchError"}, (name, [r[name][:2] for r in res])
            msgs = [r[name][1] for r in res]
        named = {f for f in ("the format", "the scaler", "the algorithm", "the rounding", "kahan", "mean", "the seed",
                             "the generator", "the tensor count", "total elements", "the sizes", "the streams",
                             "the rotation block", "the codec")
                 if f + " (" in msgs[0]}
        assert named == fields, (name, msgs[0])
        without_this_rank = {re.sub(r"\(this rank: [^)]*\)", "", m) for m in msgs}
        assert len(without_this_rank) == 1, (name, without_this_rank)
        if not name.startswith("hook"):
            assert all(r[name][2] for r in res), name  # nothing written into the tensors
    assert "total elements (from 100 to %d)" % (100 + world - 1) in res[0]["total"][1]
    assert "the format (from e4m3fn to e5m2)" in res[0]["format"][1]
    assert "the algorithm (from ring to all_gather)" in res[0]["algorithm"][1]
    local = [dist_worker.agree_tensors(r, [60, 40]) for r in range(world)]
    for i in range(2):
        sim, _ = cpd.simulate_allreduce([local[r][i] for r in range(world)], "e4m3fn", rounding="stochastic",
                                        mean=True, seed=3, stream=8 * world * world * i)
        assert all(same(sim, r["agreed"][i]) for r in res), i
    for r in res[:-1]:
        kind, msg, seconds = r["absent"]
        assert kind == "AgreementError" and "within 2 s" in msg and 1.9 < seconds < 5, r["absent"]


def test_emulated_workers_equal_the_simulation():
    net = dist_worker.make_model()
    workers = ct.EmulatedWorkers(net, 4, "e4m3fn", scaler="aps", rounding="stochastic", seed=3)
    x = torch.cat([dist_worker.batch(r, 0)[0] for r in range(4)])
    y = torch.cat([dist_worker.batch(r, 0)[1] for r in range(4)])
    loss = workers.backward(torch.nn.functional.cross_entropy, x, y)
    assert loss > 0 and workers.steps == 1 and workers.stats["count"] == 4 * sum(p.numel() for p in net.parameters())
    got = [p.grad.clone() for p in net.parameters()]
    ref = dist_worker.make_model()
    local = []
    for r in range(4):
        ref.zero_grad()
        xr, yr = dist_worker.batch(r, 0)
        torch.nn.functional.cross_entropy(ref(xr), yr).backward()
        local.append([p.grad.clone() for p in ref.parameters()])
    for i, g in enumerate(got):
        sim, _ = cpd.simulate_allreduce([local[r][i] for r in range(4)], "e4m3fn", rounding="stochastic", mean=True,
                                        seed=3, stream=ct.tensor_stream(0, 0, i, 4))
        assert same(sim.view_as(g), g), i
    # the same through emulate_allreduce
    res, infos = ct.emulate_allreduce(local, "e4m3fn", rounding="stochastic", seed=3)
    for g, rr in zip(got, res):
        assert same(rr.view_as(g), g)


def test_simulation_against_numpy_float16_ring():
    """A ring of fp16 written here with numpy's float16 additions (float32 sums of two fp16
    values rounded once more to fp16: innocuous double rounding, 24 >= 2 * 11 + 2)."""
    g = np.random.default_rng(4)
    for w in (2, 3, 5):
        xs = [(g.standard_normal(101) * 100).astype(np.float32) for _ in range(w)]
        ours, _ = cpd.simulate_allreduce(xs, "fp16", scaler="none", algorithm="ring")
        ref = np.empty(101, np.float32)
        for c in range(w):
            lo = c * (101 // w) + min(c, 101 % w)
            hi = lo + 101 // w + (1 if c < 101 % w else 0)
            s = xs[c][lo:hi].astype(np.float16)
            for j in range(1, w):
                s = (s.astype(np.float32) + xs[(c + j) % w][lo:hi].astype(np.float16).astype(np.float32)).astype(
                    np.float16)
            ref[lo:hi] = s.astype(np.float32)
        assert same(ours, ref), w


def test_bad_input():
    with pytest.raises(ValueError, match="not compiled"):
        ct.comm_hook("e6m9")
    with pytest.raises(ValueError, match="unknown format"):
        ct.comm_hook("q4m3")
    with pytest.raises(ValueError, match="algorithm"):
        ct.comm_hook("e4m3fn", algorithm="tree")
    with pytest.raises(ValueError, match="rounding"):
        ct.comm_hook("e4m3fn", rounding="odd")
    with pytest.raises(ValueError, match="scaler"):
        ct.comm_hook("e4m3fn", scaler="amax")
    with pytest.raises(ValueError, match="the block rule nvfp4 rounds nearest_even"):
        ct.comm_hook("e2m1fn", scaler="nvfp4", rounding="stochastic")
    with pytest.raises(ValueError, match="a codec .int:4:32. scales and rounds by itself"):
        ct.comm_hook("e4m3fn", codec="int:4:32")
    with pytest.raises(ValueError, match="a codec .int:4:32. scales and rounds by itself"):
        ct.comm_hook(None, codec="int:4:32")  # (the default scaler, aps)
    with pytest.raises(ValueError, match="int:9"):
        ct.comm_hook(None, scaler=None, codec="int:9")
    with pytest.raises(TypeError, match="codec must be a string"):
        ct.comm_hook(None, scaler=None, codec=4)
    assert ct.comm_hook(None, scaler=None, codec="int:4:32").__name__ == "cpd_comm_hook_int:4:32_ring"
    with pytest.raises(RuntimeError, match="not initialized"):
        ct.all_reduce([torch.zeros(3)], "e4m3fn")
    with pytest.raises(ValueError, match="workers"):
        ct.EmulatedWorkers(torch.nn.Linear(2, 2), 0)
    with pytest.raises(TypeError, match="workers must be an int"):
        ct.EmulatedWorkers(torch.nn.Linear(2, 2), 2.5)
    assert ct.EmulatedWorkers(torch.nn.Linear(2, 2), np.int64(2)).workers == 2
    with pytest.raises(TypeError, match="seed must be an int"):
        ct.comm_hook("e4m3fn", seed=1.5)
    with pytest.raises(ValueError, match="timeout"):
        ct.comm_hook("e4m3fn", timeout=0)
    with pytest.raises(ValueError, match="shape"):
        cpd.simulate_allreduce([np.zeros(3, np.float32), np.zeros(4, np.float32)], "e4m3fn")
    with pytest.raises(ValueError, match="algorithm"):
        cpd.simulate_allreduce([np.zeros(3, np.float32)], "e4m3fn", algorithm="tree")


def test_the_agreement_wait_is_bounded_on_a_device_too():
    """A device transport (NCCL, whose wait returns before the work is done) polls the work:
    one that never completes ends in AgreementError after the timeout. (The gloo path runs in
    test_ranks_that_disagree_raise_the_same_error_everywhere.)"""
    class Never:
        def is_completed(self):
            return False

        def wait(self, timeout=None):
            raise AssertionError("wait() is reached only once the work completed")

    t = ct._Transport.__new__(ct._Transport)
    t.device, t.world = torch.device("cuda"), 2  # (naming a device needs no GPU)
    start = time.monotonic()
    with pytest.raises(ct.AgreementError, match="did not complete within 0.3 s"):
        t._bounded_wait("cpd.torch.all_reduce", Never(), ct._timeout("test", 0.3))
    assert 0.29 < time.monotonic() - start < 5


def test_all_reduce_refuses_tensors_whose_elements_share_memory(tmp_path):
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        t = torch.ones(1).expand(4)
        with pytest.raises(ValueError, match="tensor 1 has elements that share memory"):
            ct.all_reduce([torch.ones(3), t], "e4m3fn")
        x = torch.tensor([1.0, float("nan"), 3.0])
        info = ct.all_reduce([x], "e2m1fn")  # one rank: the NaN survives a format without NaN
        assert torch.isnan(x[1]) and info["out_nonfinite"] == 1 and info["statistics_bytes"] == 0
    finally:
        torch.distributed.destroy_process_group()
