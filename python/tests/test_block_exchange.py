# SPDX-License-Identifier: MIT
"""The exchanges with block scales and through codecs in the package
(cpd.simulate_block_scaled_allreduce, cpd.simulate_codec_allreduce) and in
cpd.torch.EmulatedWorkers (scaler="mx32"/"nvfp4", codec=, rotation=). The references are
the rules' definitions written here in NumPy float32 with ml_dtypes' casts as the roundings
(OCP MX v1.0's shared scale, torchao's NVFP4 formulas with the exchange's headroom W, the
fp: codec's power of two): no code shared with cpd. The sums follow the sequential
algorithm (docs/reduction.md): s = q_0, s = Q(s + q_r) for r = 1 .. W-1."""

import numpy as np
import pytest
import torch

import cpd
import cpd.torch as ct
from oracle import oracle

F32 = np.float32


def cast(x, dtype, top):
    """x (float32) rounded to nearest-even in ml_dtypes' dtype, saturating at +-top: float32."""
    return np.clip(x, F32(-top), F32(top)).astype(dtype).astype(F32)


def workers_data(w, n, seed, spread=True):
    """W workers' gradients: normal values with magnitudes over a few binades, per 32 values."""
    g = np.random.default_rng(seed)
    xs = []
    for _ in range(w):
        x = g.standard_normal(n).astype(F32)
        if spread:
            x *= (F32(2.0) ** g.integers(-20, 4, size=n)).astype(F32)
        xs.append(x)
    return xs


def sequential_sum(qs, dtype, top):
    s = qs[0]
    for q in qs[1:]:
        s = cast((s + q).astype(F32), dtype, top)
    return s


def mx_reference(xs, dtype, emax, top):
    """OCP MX with the exchange's headroom: per block of 32, B = W * max over the workers of
    max|x|, X = 2^(floor(log2 B) - emax); Q(x / X) summed sequentially, times X, / W."""
    w, n = len(xs), xs[0].size
    out = np.empty(n, F32)
    for lo in range(0, n, 32):
        hi = min(lo + 32, n)
        bound = w * max(float(np.max(np.abs(x[lo:hi]))) for x in xs)
        e = int(np.floor(np.log2(bound))) - emax
        qs = [cast((x[lo:hi] * F32(2.0 ** -e)).astype(F32), dtype, top) for x in xs]
        out[lo:hi] = (sequential_sum(qs, dtype, top) * F32(2.0 ** e)).astype(F32) / F32(w)
    return out


def nvfp4_reference(xs):
    """torchao's NVFP4 formulas with the exchange's headroom: s = W * A / (448 * 6), each block's
    E4M3 scale b from W * its amax (over the workers) / 6 / s; Q(x / (s * b)) in E2M1 summed
    sequentially, times s * b, / W."""
    mld = oracle("ml_dtypes")
    w, n = len(xs), xs[0].size
    amax = max(F32(np.max(np.abs(x))) for x in xs)
    s = F32(F32(w) * amax / F32(448.0 * 6.0))
    out = np.empty(n, F32)
    for lo in range(0, n, 16):
        hi = min(lo + 16, n)
        block = max(F32(np.max(np.abs(x[lo:hi]))) for x in xs)
        scaled = np.clip(F32(F32(w) * block / F32(6.0)) / s, F32(2.0 ** -6), F32(448.0)).astype(F32)
        b = F32(np.array(scaled).astype(mld.float8_e4m3fn).astype(F32))
        total = F32(s * b)
        qs = [cast((x[lo:hi] / total).astype(F32), mld.float4_e2m1fn, 6.0) for x in xs]
        out[lo:hi] = (sequential_sum(qs, mld.float4_e2m1fn, 6.0) * total).astype(F32) / F32(w)
    return out


def same(a, b):
    a, b = np.asarray(a, F32), np.asarray(b, F32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("fmt,dtype_name,emax,top", [
    ("e4m3fn", "float8_e4m3fn", 8, 448.0), ("e5m2", "float8_e5m2", 15, 57344.0),
    ("e2m1fn", "float4_e2m1fn", 2, 6.0), ("e3m2fn", "float6_e3m2fn", 4, 28.0)])
def test_mx32_exchange_is_the_ocp_rule_with_headroom(fmt, dtype_name, emax, top):
    mld = oracle("ml_dtypes")
    for w, n, seed in ((1, 64, 1), (3, 100, 2), (4, 517, 3)):
        xs = workers_data(w, n, seed)
        got, info = cpd.simulate_block_scaled_allreduce(xs, fmt, rule="mx32", algorithm="sequential", mean=True)
        assert same(got, mx_reference(xs, getattr(mld, dtype_name), emax, top)), (fmt, w, n)
        assert info["blocks"] == -(-n // 32) and not info["nonfinite"] and info["nonfinite_out"] == 0
        assert info["tensor_scale"] == 0.0


def test_nvfp4_exchange_is_torchaos_formulas_with_headroom():
    for w, n, seed in ((1, 48, 4), (2, 100, 5), (4, 333, 6)):
        xs = workers_data(w, n, seed, spread=False)
        got, info = cpd.simulate_block_scaled_allreduce(xs, "e2m1fn", rule="nvfp4", algorithm="sequential",
                                                        mean=True)
        assert same(got, nvfp4_reference(xs)), (w, n)
        assert info["blocks"] == -(-n // 16) and info["tensor_scale"] > 0
    # One worker: the exchange is cpd.nvfp4_quantize (the array call, another code path).
    x = workers_data(1, 1000, 7)[0]
    got, _ = cpd.simulate_block_scaled_allreduce([x], "e2m1fn", rule="nvfp4")
    assert same(got, cpd.nvfp4_quantize(x))


def test_block_exchange_marks_inf_and_nan_and_counts():
    """A block holding inf or NaN on some worker marks the step (nonfinite: skip it, as
    cpd-train does); its elements saturate, so an inf comes out as a large finite sum, a NaN
    as NaN. The other blocks are exchanged as usual."""
    xs = workers_data(3, 96, 8)
    clean, _ = cpd.simulate_block_scaled_allreduce(xs, "e4m3fn", rule="mx32")
    xs[1][40] = np.inf
    xs[2][70] = np.nan
    got, info = cpd.simulate_block_scaled_allreduce(xs, "e4m3fn", rule="mx32", diagnostics=True)
    assert info["nonfinite"] and np.isnan(got[70]) and info["nonfinite_out"] == int(np.sum(~np.isfinite(got)))
    assert same(got[:32], clean[:32])
    assert info["scaled"]["count"] == 3 * 96 and info["unscaled"]["count"] == 3 * 96
    assert info["scaled"]["inf_inputs"] == 1 and info["scaled"]["nan_inputs"] == 1
    for rule in cpd.block_rules:
        _, info = cpd.simulate_block_scaled_allreduce(xs, "e2m1fn", rule=rule)
        assert info["nonfinite"], rule
    # torch tensors in, a tensor out; the other algorithms run too
    ts = [torch.from_numpy(x) for x in workers_data(3, 70, 9)]
    for algorithm in cpd.algorithms:
        out, _ = cpd.simulate_block_scaled_allreduce(ts, "e5m2", rule="mx32", algorithm=algorithm)
        assert isinstance(out, torch.Tensor) and out.shape == (70,) and bool(torch.isfinite(out).all())


def test_block_exchange_rejects_bad_arguments():
    xs = workers_data(2, 10, 10)
    with pytest.raises(ValueError, match="rule 'mx16' is not one of mx32, nvfp4"):
        cpd.simulate_block_scaled_allreduce(xs, "e4m3fn", rule="mx16")
    with pytest.raises(ValueError, match="not compiled into the package"):
        cpd.simulate_block_scaled_allreduce(xs, "e5m6", rule="mx32")
    with pytest.raises(TypeError, match="worker 1's tensor is float64; this exchange takes float32"):
        cpd.simulate_block_scaled_allreduce([xs[0], xs[1].astype(np.float64)], "e4m3fn")
    with pytest.raises(ValueError, match="differ in shape"):
        cpd.simulate_block_scaled_allreduce([xs[0], xs[1][:5]], "e4m3fn")
    with pytest.raises(TypeError, match="non-empty list"):
        cpd.simulate_block_scaled_allreduce([], "e4m3fn")
    with pytest.raises(ValueError, match="algorithm"):
        cpd.simulate_block_scaled_allreduce(xs, "e4m3fn", algorithm="tree")


def test_fp_codec_exchange_is_a_power_of_two_and_a_cast():
    """fp:e4m3fn: k = emax - ceil(log2 amax) per worker's payload, codes of x * 2^k nearest-even
    (saturating), decoded and added in float in rank order, / W."""
    mld = oracle("ml_dtypes")
    for w, n, seed in ((1, 50, 11), (3, 300, 12)):
        xs = workers_data(w, n, seed)
        got, info = cpd.simulate_codec_allreduce(xs, "fp:e4m3fn", mean=True)
        ref = np.zeros(n, F32)
        for i, x in enumerate(xs):
            k = 8 - int(np.ceil(np.log2(float(np.max(np.abs(x))))))
            d = (cast((x * F32(2.0 ** k)).astype(F32), mld.float8_e4m3fn, 448.0) * F32(2.0 ** -k)).astype(F32)
            ref = d if i == 0 else (ref + d).astype(F32)
        assert same(got, ref / F32(w)), (w, n)
        assert info["payload_bytes"] == 4 + n and info["name"] == "fp:e4m3fn"
        assert info["bits_per_value"] == pytest.approx(8 + 32 / n)


def test_int_codec_exchange_is_int_quantize_per_block():
    """decode(encode(x)) of int:K:B is cpd.int_quantize(x, K bits, group B), nearest-even
    (docs/codecs.md): the exchange adds them in rank order."""
    xs = workers_data(3, 200, 13)
    for bits in (8, 4):
        got, info = cpd.simulate_codec_allreduce(xs, f"int:{bits}:32")
        ref = np.zeros(200, F32)
        for i, x in enumerate(xs):
            q = cpd.int_quantize(x, bits=bits, block_size=32)
            ref = q if i == 0 else (ref + q).astype(F32)
        assert same(got, ref), bits
        assert info["payload_bytes"] == 4 * 7 + bits * 200 // 8
    with pytest.raises(ValueError, match="make_codec"):
        cpd.simulate_codec_allreduce(xs, "int:3")


def small_model():
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(12, 40), torch.nn.ReLU(), torch.nn.Linear(40, 3))


def worker_grads(w, x, y):
    """grads[r][t]: the gradient of parameter t on shard r (as EmulatedWorkers splits the batch)."""
    net = small_model()
    out = []
    for xr, yr in zip(torch.tensor_split(x, w), torch.tensor_split(y, w)):
        net.zero_grad()
        torch.nn.functional.cross_entropy(net(xr), yr).backward()
        out.append([p.grad.clone() for p in net.parameters()])
    return out


@pytest.mark.parametrize("kind", ["mx32", "nvfp4", "codec"])
def test_emulated_workers_with_block_scales_and_codecs(kind):
    w = 4
    g = torch.Generator().manual_seed(6)
    x, y = torch.randn(64, 12, generator=g), torch.randint(0, 3, (64,), generator=g)
    net = small_model()
    if kind == "codec":
        workers = ct.EmulatedWorkers(net, w, None, scaler=None, codec="int:4:32", seed=2)
    else:
        workers = ct.EmulatedWorkers(net, w, "e2m1fn", scaler=kind, seed=2)
    workers.backward(torch.nn.functional.cross_entropy, x, y)
    grads = worker_grads(w, x, y)
    n = 0
    bits = 0
    for t, p in enumerate(net.parameters()):
        xs = [grads[r][t].reshape(-1) for r in range(w)]
        stream = ct.tensor_stream(0, 0, t, w)
        if kind == "codec":
            ref, info = cpd.simulate_codec_allreduce(xs, "int:4:32", mean=True, seed=2, stream=stream)
            bits += 8 * info["payload_bytes"]
        else:
            ref, info = cpd.simulate_block_scaled_allreduce(xs, "e2m1fn", rule=kind, mean=True, seed=2, stream=stream)
            bits += 4 * p.numel() + 8 * info["blocks"] + (32 if kind == "nvfp4" else 0)
        assert same(p.grad.reshape(-1), ref), (kind, t)
        n += p.numel()
    assert workers.values == n and workers.bits_per_value == pytest.approx(bits / n)
    assert workers.bits_per_value > (4.9 if kind == "codec" else 4.25)
    if kind != "codec":
        assert workers.stats["count"] == w * n


def test_emulated_workers_rotation_is_emulate_allreduces():
    w = 2
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(32, 12, generator=g), torch.randint(0, 3, (32,), generator=g)
    net = small_model()
    workers = ct.EmulatedWorkers(net, w, "e4m3fn", scaler="aps", seed=4, rotation=16)
    workers.backward(torch.nn.functional.cross_entropy, x, y)
    res, _ = ct.emulate_allreduce(worker_grads(w, x, y), "e4m3fn", seed=4, rotation=16)
    for p, r in zip(net.parameters(), res):
        assert same(p.grad, r)


def test_emulated_workers_reject_what_does_not_apply():
    net = small_model()
    with pytest.raises(ValueError, match="a codec .* scales and rounds by itself"):
        ct.EmulatedWorkers(net, 2, "e4m3fn", codec="int:8")
    with pytest.raises(ValueError, match="a codec .* scales and rounds by itself"):
        ct.EmulatedWorkers(net, 2, None, scaler="aps", codec="int:8")
    with pytest.raises(ValueError, match="make_codec"):
        ct.EmulatedWorkers(net, 2, None, scaler=None, codec="int:9")
    with pytest.raises(ValueError, match="rounds nearest_even"):
        ct.EmulatedWorkers(net, 2, "e2m1fn", scaler="nvfp4", rounding="stochastic")
    with pytest.raises(ValueError, match="scaler 'mx64' is not one of aps, none, mx32, nvfp4"):
        ct.EmulatedWorkers(net, 2, "e2m1fn", scaler="mx64")
    with pytest.raises(ValueError, match="the block rule mx32 rounds nearest_even"):
        ct.comm_hook("e2m1fn", scaler="mx32", rounding="stochastic")


@pytest.mark.parametrize("rule", ["mx32", "nvfp4"])
def test_emulate_allreduce_takes_the_block_rules(rule):
    """cpd.torch.emulate_allreduce(scaler=rule): each tensor by cpd.simulate_block_scaled_allreduce
    with the stream tensor_stream(step, 0, t, W), whose result the MX reference above gives."""
    xs = workers_data(3, 200, 7)
    res, infos = ct.emulate_allreduce([[torch.from_numpy(x)] for x in xs], "e2m1fn", scaler=rule, step=2,
                                      algorithm="sequential")
    sim, info = cpd.simulate_block_scaled_allreduce(xs, "e2m1fn", rule=rule, algorithm="sequential", mean=True,
                                                    stream=ct.tensor_stream(2, 0, 0, 3))
    assert same(res[0], sim) and infos[0] == info and info["blocks"] == (7 if rule == "mx32" else 13)
    if rule == "mx32":
        assert same(res[0], mx_reference(xs, oracle("ml_dtypes").float4_e2m1fn, 2, 6.0))
