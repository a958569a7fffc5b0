# SPDX-License-Identifier: MIT
"""cpd's calls on GPU arrays (docs/python.md, "CUDA"): torch CUDA tensors, CuPy and JAX arrays
through the CUDA module cpd._cpd_cuda, compared bit for bit with the host path for every
listed format, rounding mode, overflow mode and dtype (float16, bfloat16, float32, float64);
and the exchange on a GPU (cpd::cuda::rank_exchange): cpd.simulate_allreduce and
cpd.torch.EmulatedWorkers on CUDA tensors, the DDP hook and all_reduce on CUDA tensors over
2 and 3 gloo processes sharing the GPU (NCCL with one rank: test_torch.py), bit for bit
against the CPU path. Without a GPU (or without the module) the device tests skip; the
module's presence and the package's import without a GPU are checked everywhere."""

import os
import sys

import numpy as np
import pytest
import torch

import cpd
import cpd.torch as ct
from cpd import _cuda

GPU = _cuda.available() and torch.cuda.is_available() and _cuda.device_count() > 0
needs_gpu = pytest.mark.skipif(not GPU, reason="no CUDA GPU (torch.cuda.is_available() is False) or no cpd._cpd_cuda")
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
FORMATS = ["e4m3fn", "e5m2", "e4m3", "e4m3fnuz", "e5m2fnuz", "e3m4", "e3m2fn", "e2m3fn", "e2m1fn", "e8m0fnu",
           "fp16", "bf16", "tf32", "e3m0", "e6m9", "fp32"]


def same_bits(a, b):
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint64), b[~nan].view(np.uint64)))


def test_module_is_built_where_nvcc_is_and_cpd_imports_without_a_gpu():
    if os.environ.get("CPD_EXPECT_CUDA_MODULE") == "1":
        assert _cuda.available(), _cuda.why_missing()
    assert cpd.quantize(np.float32([1.3]), "e4m3fn")[0] == 1.25  # the host path, GPU or not
    if not GPU:
        assert "cuda" not in str(torch.empty(1).device)


def host_values(dtype, n=20000, seed=0):
    g = np.random.default_rng(seed)
    x = (g.standard_normal(n) * 10.0 ** g.uniform(-6, 5, n)).astype(np.float64)
    x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-42]
    return torch.from_numpy(x).to(dtype)


def allowed(name, dtype):
    try:
        cpd.quantize(torch.zeros(1, dtype=dtype), name)
        return True
    except ValueError:
        return False


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", cpd.roundings)
def test_quantize_and_encode_equal_the_host(dtype, mode):
    x = host_values(dtype)
    xd = x.cuda()
    for name in FORMATS:
        if not allowed(name, dtype):
            with pytest.raises(ValueError, match="not all"):
                cpd.quantize(xd, name)
            continue
        for over in ("infinity", "saturate"):
            for k in (0, 5, -3):
                kw = dict(rounding=mode, overflow=over, seed=17, stream=4, offset=1000, scale_exponent=k)
                try:
                    ref = cpd.quantize(x, name, **kw)
                except ValueError:
                    continue  # (a scale that takes the format out of the dtype: refused on both)
                got = cpd.quantize(xd, name, **kw)
                assert got.device == xd.device and got.dtype == dtype
                assert same_bits(got.cpu().double(), ref.double()), (name, over, k)
                assert torch.equal(cpd.encode(xd, name, **kw).cpu(), cpd.encode(x, name, **kw)), (name, over, k)


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_decode_and_statistics_equal_the_host(dtype):
    for name in FORMATS:
        bits = cpd.finfo(name).bits
        codes = torch.arange(0, 1 << min(bits, 16), dtype=torch.int32)
        codes = codes.to(torch.uint8) if bits <= 8 else (codes.to(torch.int16) if bits <= 16 else codes)
        if not allowed(name, dtype):
            continue
        got = cpd.decode(codes.cuda(), name, dtype=dtype)
        assert same_bits(got.cpu().double(), cpd.decode(codes, name, dtype=dtype).double()), name
    with pytest.raises(ValueError, match="bits above"):
        cpd.decode(torch.full((4,), 255, dtype=torch.uint8).cuda(), "e2m1fn")
    x = host_values(dtype)
    for s in (cpd.aps("e4m3fn", 4), cpd.current_scaling("e5m2"), cpd.fixed_scaling(0), cpd.dynamic_loss_scaling()):
        a, b = s.statistic(x.cuda()), s.statistic(x)
        assert a == b or (a != a and b != b), s
        a, b = s.statistic(x[6:].cuda()), s.statistic(x[6:])
        assert a == b, s


@needs_gpu
def test_stream_out_and_errors():
    x = torch.randn(4096, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = cpd.quantize(x, "e4m3fn", rounding="stochastic", seed=1)
    s.synchronize()
    assert torch.equal(y.cpu(), cpd.quantize(x.cpu(), "e4m3fn", rounding="stochastic", seed=1))
    o = torch.empty(4096, device="cuda", dtype=torch.float64)
    assert cpd.quantize(x, "e5m2", out=o) is o and same_bits(o.cpu(), cpd.quantize(x.cpu(), "e5m2").double())
    xt = torch.randn(64, 32, device="cuda").t()
    assert torch.equal(cpd.quantize(xt, "e5m2").cpu(), cpd.quantize(xt.cpu(), "e5m2"))
    with pytest.raises(ValueError, match="non-contiguous"):
        cpd.quantize(x[:64], "e5m2", out=torch.empty(64, 2, device="cuda")[:, 0])
    with pytest.raises(TypeError, match="out is not"):
        cpd.quantize(x, "e5m2", out=torch.empty(4096))
    with pytest.raises(ValueError, match="stats"):
        cpd.quantize(x, "e5m2", stats=True)
    with pytest.raises(TypeError, match="int64"):
        cpd.quantize(torch.zeros(4, dtype=torch.int64, device="cuda"), "e5m2")
    with pytest.raises(TypeError, match="one device"):
        cpd.simulate_allreduce([x, x.cpu()], "e5m2")
    with pytest.raises(ValueError, match="diagnostics are counted on the CPU"):
        cpd.simulate_allreduce([x, x], "e5m2", diagnostics=True)


@needs_gpu
def test_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    x = np.random.default_rng(3).standard_normal(5000).astype(np.float32)
    for dt in (np.float16, np.float32, np.float64):
        xd = cupy.asarray(x.astype(dt))
        for mode in cpd.roundings:
            got = cpd.quantize(xd, "e4m3fn", rounding=mode, seed=2)
            assert isinstance(got, cupy.ndarray) and got.dtype == dt
            assert same_bits(cupy.asnumpy(got), cpd.quantize(x.astype(dt), "e4m3fn", rounding=mode, seed=2))
        codes = cpd.encode(xd, "e5m2")
        assert np.array_equal(cupy.asnumpy(codes), cpd.encode(x.astype(dt), "e5m2"))
        assert same_bits(cupy.asnumpy(cpd.decode(codes, "e5m2", dtype=dt)),
                         cpd.decode(cpd.encode(x.astype(dt), "e5m2"), "e5m2", dtype=dt))
    with pytest.raises(ValueError, match="C-contiguous"):
        cpd.quantize(cupy.asarray(x)[::2], "e4m3fn")


@needs_gpu
def test_jax_arrays():
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    x = np.random.default_rng(4).standard_normal(5000).astype(np.float32)
    for dt in (jnp.bfloat16, jnp.float16, jnp.float32):
        xd = jnp.asarray(x).astype(dt)
        got = cpd.quantize(xd, "e4m3fn", rounding="stochastic", seed=8)
        ref = cpd.quantize(torch.from_numpy(x).to(getattr(torch, np.dtype(dt).name)), "e4m3fn",
                           rounding="stochastic", seed=8)
        assert same_bits(torch.from_numpy(np.asarray(got.astype(jnp.float32))), ref.float())


# --- the exchange on a GPU ------------------------------------------------------------------

EXCHANGE_FORMATS = cpd.exchange_formats()


def workers_values(w, n, seed, specials=True):
    g = np.random.default_rng(seed)
    xs = [(g.standard_normal(n) * 10.0 ** g.uniform(-4, 2, n)).astype(np.float32) for _ in range(w)]
    if specials and n > 8:
        xs[0][3] = np.nan
        xs[-1][n - 1] = np.inf
        xs[w // 2][n // 2] = 0.0
    return [torch.from_numpy(x) for x in xs]


@needs_gpu
@pytest.mark.parametrize("rounding", ["nearest_even", "stochastic"])
@pytest.mark.parametrize("fmt", EXCHANGE_FORMATS)
def test_simulate_allreduce_on_a_gpu_equals_the_cpu(fmt, rounding):
    for w in (1, 2, 3, 5):
        for algorithm in cpd.algorithms:
            for kahan in (False, True):
                if kahan and algorithm == "two_step":
                    continue
                for n, specials in ((1, False), (37, True), (70001, True)):
                    xs = workers_values(w, n, seed=w * 1000 + n, specials=specials)
                    kw = dict(algorithm=algorithm, rounding=rounding, kahan=kahan, mean=w != 3, seed=7, stream=5)
                    ref, ri = cpd.simulate_allreduce(xs, fmt, **kw)
                    got, gi = cpd.simulate_allreduce([x.cuda() for x in xs], fmt, **kw)
                    case = (fmt, rounding, w, algorithm, kahan, n)
                    assert got.device.type == "cuda" and got.dtype == torch.float32, case
                    assert same_bits(got.cpu(), ref), case
                    assert gi["scale"].exponent == ri["scale"].exponent, case
                    assert gi["scale"].nonfinite == ri["scale"].nonfinite, case
                    assert gi["nonfinite_out"] == ri["nonfinite_out"], case


@needs_gpu
def test_simulate_allreduce_on_a_gpu_in_every_dtype_and_out():
    xs = workers_values(3, 5000, seed=9, specials=False)
    for dt in DTYPES:
        ws = [(x * 1e-3).to(dt) for x in xs]
        for fmt in ("e4m3fn", "e5m2", "e2m1fn"):
            try:
                ref, _ = cpd.simulate_allreduce(ws, fmt, rounding="stochastic", seed=3, stream=11)
            except ValueError as e:  # (a sum that is no value of the dtype: refused on both)
                with pytest.raises(ValueError, match=str(e).split(":")[1][:20]):
                    cpd.simulate_allreduce([w.cuda() for w in ws], fmt, rounding="stochastic", seed=3, stream=11)
                continue
            got, _ = cpd.simulate_allreduce([w.cuda() for w in ws], fmt, rounding="stochastic", seed=3, stream=11)
            assert got.dtype == dt and same_bits(got.cpu().double(), ref.double()), (dt, fmt)
    out = torch.empty(5000, device="cuda")
    got, _ = cpd.simulate_allreduce([x.cuda() for x in xs], "e4m3fn", out=out)
    assert got is out and same_bits(out.cpu(), cpd.simulate_allreduce(xs, "e4m3fn")[0])
    x0 = xs[0].cuda()  # out is a worker's tensor: the sum in place
    got, _ = cpd.simulate_allreduce([x0] + [x.cuda() for x in xs[1:]], "e5m2", out=x0)
    assert same_bits(x0.cpu(), cpd.simulate_allreduce(xs, "e5m2")[0])


def _capturing(workers):
    """Makes EmulatedWorkers keep each step's W shard gradients in workers.captured."""
    real = workers._worker_gradients

    def capture(*args):
        grads, total = real(*args)
        workers.captured = [[g.detach().cpu().clone() for g in ws] for ws in grads]
        return grads, total

    workers._worker_gradients = capture


@needs_gpu
@pytest.mark.parametrize("fmt,algorithm,rounding,kahan", [("e4m3fn", "ring", "stochastic", False),
                                                          ("e5m2", "two_step", "nearest_even", False),
                                                          ("e2m1fn", "all_gather", "stochastic", True),
                                                          ("bf16", "pipelined_ring", "nearest_even", True),
                                                          ("e3m2fn", "sequential", "nearest_even", False),
                                                          ("e4m3fn", "halving_doubling", "nearest_even", False),
                                                          ("fp32", "ring", "nearest_even", False)])
def test_emulated_workers_on_a_gpu_equal_the_simulation(fmt, algorithm, rounding, kahan):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(37, 50), torch.nn.ReLU(), torch.nn.Linear(50, 300),
                              torch.nn.ReLU(), torch.nn.Linear(300, 10)).cuda()
    workers = ct.EmulatedWorkers(net, 4, fmt, scaler="aps", algorithm=algorithm, rounding=rounding, kahan=kahan,
                                 seed=3)
    _capturing(workers)
    g = torch.Generator().manual_seed(1)
    for step in range(2):
        x, y = torch.randn(64, 37, generator=g).cuda(), torch.randint(0, 10, (64,), generator=g).cuda()
        workers.backward(torch.nn.functional.cross_entropy, x, y)
        for i, p in enumerate(net.parameters()):
            assert p.grad.device.type == "cuda"
            sim, _ = cpd.simulate_allreduce([workers.captured[r][i] for r in range(4)], fmt, algorithm=algorithm,
                                            rounding=rounding, kahan=kahan, mean=True, seed=3,
                                            stream=ct.tensor_stream(step, 0, i, 4))
            assert same_bits(p.grad.cpu(), sim.view_as(p)), (step, i)
    assert workers.steps == 2 and workers.values == 2 * sum(p.numel() for p in net.parameters())


def _sys_path_tests():
    here = os.path.dirname(__file__)
    if here not in sys.path:
        sys.path.insert(0, here)


@needs_gpu
@pytest.mark.parametrize("world,fmt,algorithm,rounding,kahan", [(2, "e4m3fn", "ring", "nearest_even", False),
                                                                (3, "e5m2", "all_gather", "stochastic", False),
                                                                (3, "e2m1fn", "two_step", "nearest_even", False),
                                                                (2, "bf16", "pipelined_ring", "stochastic", True)])
def test_hook_and_all_reduce_on_a_gpu_over_gloo(tmp_path, world, fmt, algorithm, rounding, kahan):
    """Several processes share the GPU over gloo (NCCL refuses two ranks on one GPU): the CUDA
    buckets are exchanged on the device, their codes moved through host copies; every rank's
    result equals cpd.simulate_allreduce (on the CPU) of the buckets every rank handed the hook."""
    _sys_path_tests()
    import dist_worker
    import test_torch as tt
    res = tt.run_ranks(tmp_path, world, "ddp", fmt, algorithm, rounding, kahan=kahan, backend="gloo", device="cuda")
    assert all(len(r["buckets"]) == len(res[0]["buckets"]) > 1 for r in res)
    for k, rc in enumerate(res[0]["records"]):
        at = 0
        for n, stream in zip(rc["sizes"], rc["streams"]):
            local = [torch.from_numpy(r["buckets"][k][0][at:at + n]) for r in res]
            sim, _ = cpd.simulate_allreduce(local, fmt, algorithm=algorithm, rounding=rounding, kahan=kahan,
                                            mean=True, seed=5, stream=stream)
            for r in res:
                assert same_bits(sim, r["buckets"][k][1][at:at + n]), (k, at)
            at += n
    res = tt.run_ranks(tmp_path, world, "allreduce", fmt, algorithm, rounding, backend="gloo", device="cuda")
    local = [dist_worker.tensors(r, world) for r in range(world)]
    for i in range(len(local[0])):
        sim, info = cpd.simulate_allreduce([local[r][i] for r in range(world)], fmt, algorithm=algorithm,
                                           rounding=rounding, mean=True, seed=5, stream=8 * world * world * i)
        for r in res:
            assert same_bits(sim, r["tensors"][i]), (i, r)
            assert r["scales"][i] == (info["scale"].exponent, info["scale"].nonfinite)
