# SPDX-License-Identifier: MIT
"""cpd's calls on GPU arrays (docs/python.md, "CUDA"): torch CUDA tensors, CuPy and JAX arrays
through the CUDA module cpd._cpd_cuda, compared bit for bit with the host path for every
listed format, rounding mode, overflow mode and dtype (float16, bfloat16, float32, float64).
Without a GPU (or without the module) the device tests skip; the module's presence and the
package's import without a GPU are checked everywhere."""

import os

import numpy as np
import pytest
import torch

import cpd
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
    with pytest.raises(TypeError, match="CPU"):
        cpd.simulate_allreduce([x, x], "e5m2")


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
