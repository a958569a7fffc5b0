# SPDX-License-Identifier: MIT
"""Every float dtype in, the same dtype out (docs/python.md, "Dtypes"): float16, bfloat16,
float32 and float64 arrays and tensors in quantize, encode, decode, the scalers' statistic and
simulate_allreduce, against references that share no code with cpd: NumPy's float16 casts
(from float32 and directly from float64), torch's bfloat16/float16 casts, ml_dtypes' float8
and bfloat16 casts (skipped where ml_dtypes is missing), torch's float8 casts (torch >= 2.1),
and a rounder written here (test_bulk.ref_round) for float64 values that float32 cannot hold;
and the rule that refuses a result that would be rounded twice, on every (dtype, format) pair
the package lists."""

import math
import os
import sys

import numpy as np
import pytest
import torch

import cpd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_bulk  # noqa: E402  (its reference decoder and rounder, written from the formats' definitions)

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

RNG = np.random.default_rng(2024)
MODES = cpd.roundings
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
# dtype: (mantissa bits, max, smallest subnormal), from torch.finfo (not from cpd)
FACTS = {n: (int(round(-math.log2(torch.finfo(t).eps))), float(torch.finfo(t).max),
             float(torch.finfo(t).tiny) * float(torch.finfo(t).eps)) for n, t in DTYPES.items()}


def same_bits(a, b):
    """Equal values bit for bit (as float64 bits), any NaN equal to any NaN."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint64), b[~nan].view(np.uint64)))


def every_code(dtype):
    """Every float16 or bfloat16 value as a tensor of that dtype (all 65536 codes)."""
    return torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(dtype)


def all_listed_formats():
    return sorted(set(cpd.formats()) | set(cpd.exchange_formats()))


def values_fit(name, dtype):
    """Whether every value of the format is a value of dtype: by every code for formats of at most
    16 bits (decoded to float64 and cast by torch), else from the dtype's facts."""
    f = cpd.finfo(name)
    if f.bits <= 16:
        v = cpd.decode(np.arange(1 << f.bits, dtype=np.uint16), name, dtype="float64")
        v = torch.from_numpy(v[np.isfinite(v)])
        return bool(torch.equal(v.to(DTYPES[dtype]).double(), v))
    nmant, top, low = FACTS[dtype]
    return f.nmant <= nmant and f.max <= top and f.smallest_subnormal >= low


# --- the rule: a float16 / bfloat16 result only where every value of the format is one --------

@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_every_listed_format_follows_the_exactness_rule(dtype):
    x = torch.from_numpy(RNG.standard_normal(257).astype(np.float32)).to(DTYPES[dtype])
    codes = None
    for name in all_listed_formats():
        fits = values_fit(name, dtype)
        if fits:
            q = cpd.quantize(x, name)
            assert q.dtype == DTYPES[dtype], name
            assert same_bits(q.float(), cpd.quantize(x.float(), name)), name
            codes = cpd.encode(x, name)
            assert same_bits(cpd.decode(codes, name, dtype=DTYPES[dtype]).float(), q.float()), name
        else:
            with pytest.raises(ValueError, match=f"{cpd.finfo(name).name}.*not all {dtype} values.*float32"):
                cpd.quantize(x, name)
            codes = cpd.encode(x, name)  # codes are exact whatever the dtype
            with pytest.raises(ValueError, match=f"not all {dtype} values"):
                cpd.decode(codes, name, dtype=DTYPES[dtype])
            wide = cpd.quantize(x, name, out=torch.empty(x.shape, dtype=torch.float32))  # out of a wider dtype
            assert same_bits(wide, cpd.quantize(x.float(), name)), name
    assert codes is not None


def test_the_formats_a_dtype_holds():
    assert all(values_fit(n, "float16") for n in ("e4m3fn", "e5m2", "fp16", "e4m3", "e3m2fn", "e2m1fn"))
    assert all(values_fit(n, "bfloat16") for n in ("e4m3fn", "e5m2", "e4m3", "bf16", "e8m0fnu"))
    assert not values_fit("fp16", "bfloat16") and not values_fit("bf16", "float16")
    assert not values_fit("e8m0fnu", "float16")


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_scale_exponent_beyond_the_dtype_is_refused(dtype):
    x = torch.ones(8, dtype=DTYPES[dtype])
    k = -20 if dtype == "float16" else -200  # e4m3fn's 448 * 2^20 > 65504; 2^-9 * 2^-200 < bfloat16's subnormals
    k = k if dtype == "float16" else 200
    with pytest.raises(ValueError, match=rf"e4m3fn scaled by 2\^{-k} are not all {dtype} values"):
        cpd.quantize(x, "e4m3fn", scale_exponent=k)
    q = cpd.quantize(x, "e4m3fn", scale_exponent=k, out=torch.empty(8))
    assert same_bits(q, cpd.quantize(x.float(), "e4m3fn", scale_exponent=k))
    assert cpd.quantize(x, "e4m3fn", scale_exponent=3).dtype == DTYPES[dtype]


# --- float16 and bfloat16: the float32 path on the widened values, every code, every mode -----

@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("mode", MODES)
def test_16_bit_inputs_equal_the_float32_path(dtype, mode):
    x = every_code(DTYPES[dtype])
    names = [n for n in ("e4m3fn", "e5m2", "e4m3fnuz", "e3m2fn", "e2m1fn", "e4m3", "fp16", "bf16", "e3m0")
             if values_fit(n, dtype)]
    for name in names:
        for over in ("infinity", "saturate"):
            kw = dict(rounding=mode, overflow=over, seed=9, stream=3, offset=11)
            q = cpd.quantize(x, name, **kw)
            ref = cpd.quantize(x.float(), name, **kw)
            assert q.dtype == DTYPES[dtype]
            assert same_bits(q.float(), ref), (name, over)
            assert torch.equal(cpd.encode(x, name, **kw), cpd.encode(x.float(), name, **kw)), (name, over)
    a = x.float().numpy().astype(np.float16) if dtype == "float16" else None
    if a is not None:  # NumPy's float16 arrays: the same as torch's
        assert same_bits(cpd.quantize(a, "e5m2", rounding=mode, seed=9), cpd.quantize(x, "e5m2", rounding=mode,
                                                                                       seed=9).float())


@pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes is not installed (scripts/venv.sh puts it in build/venv)")
@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "float8_e4m3", "float8_e4m3fnuz",
                                  "float8_e5m2fnuz", "float8_e3m4", "float6_e3m2fn", "float6_e2m3fn",
                                  "float4_e2m1fn"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_16_bit_code_against_ml_dtypes_casts(name, dtype):
    if not hasattr(ml_dtypes, name):
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no {name}")
    np16 = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    x = every_code(DTYPES[dtype]).view(torch.int16).numpy().view(np16)
    if not values_fit(name, dtype):
        pytest.skip(f"{name}'s values are not all {dtype} values (refused: test_every_listed_format_...)")
    fmt = getattr(ml_dtypes, name)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = x.astype(fmt).astype(np16)
    ours = cpd.quantize(x, name)
    assert ours.dtype == np16
    keep = np.ones(x.shape, bool) if cpd.finfo(name).has_nan else np.isfinite(x.astype(np.float32))
    # (formats without NaN: ml_dtypes makes NaN and inf -0 or ±max; cpd keeps NaN and saturates inf)
    assert same_bits(ours[keep].astype(np.float64), ref[keep].astype(np.float64))
    finite = np.isfinite(x.astype(np.float32)) & (np.abs(x.astype(np.float32)) <= cpd.finfo(name).max)
    assert np.array_equal(cpd.encode(x, name)[finite], x[finite].astype(fmt).view(np.uint8))


@pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes is not installed")
def test_ml_dtypes_bfloat16_arrays_in_and_out():
    x = RNG.standard_normal(1000).astype(ml_dtypes.bfloat16)
    q = cpd.quantize(x, "e4m3fn")
    assert q.dtype == x.dtype
    assert same_bits(q.astype(np.float32), x.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float32))
    assert cpd.decode(cpd.encode(x, "bf16"), "bf16", dtype=x.dtype).tobytes() == x.tobytes()
    assert cpd.decode(cpd.encode(x, "bf16"), "bf16", dtype="bfloat16").dtype == x.dtype


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_torch_float8_casts(dtype):
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip(f"torch {torch.__version__} has no float8 dtypes (torch >= 2.1)")
    x = every_code(DTYPES[dtype])
    x = x[torch.isfinite(x) & (x.float().abs() <= 448)]
    for name, t in (("e4m3fn", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)):
        assert same_bits(cpd.quantize(x, name).float(), x.to(t).float()), (name, dtype)


def test_16_bit_decode_and_out_dtypes():
    codes = np.arange(256, dtype=np.uint8)
    v32 = cpd.decode(codes, "e4m3fn")
    for dtype, t in DTYPES.items():
        v = cpd.decode(torch.from_numpy(codes), "e4m3fn", dtype=t)
        assert v.dtype == t and same_bits(v.float(), v32)
        o = torch.empty(256, dtype=t)
        assert cpd.decode(torch.from_numpy(codes), "e4m3fn", out=o) is o and same_bits(o.float(), v32)
    v16 = cpd.decode(codes, "e4m3fn", dtype=np.float16)
    assert v16.dtype == np.float16 and same_bits(v16, v32)
    with pytest.raises(TypeError, match="out is float32 and dtype float16"):
        cpd.decode(codes, "e4m3fn", out=np.empty(256, np.float32), dtype="float16")
    with pytest.raises(TypeError, match="dtype"):
        cpd.decode(codes, "e4m3fn", dtype=np.int32)


# --- float64: rounded once, from the double -----------------------------------------------

def test_float64_rounds_once_from_the_double():
    # 1 + 2^-11 + 2^-40 is just above the tie between fp16's 1 and 1 + 2^-10: rounded through
    # float32 it would become the tie 1 + 2^-11, then 1 (ties to even).
    x = np.float64([1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40), 1 + 2**-11])
    q = cpd.quantize(x, "fp16")
    assert q.dtype == np.float64
    assert q.tolist() == [1 + 2**-10, -(1 + 2**-10), 1.0]
    assert cpd.quantize(x.astype(np.float32), "fp16").tolist()[0] == 1.0  # (what float32 would give)


def test_float64_against_numpy_float16_casts():
    x = RNG.standard_normal(200000) * 10.0 ** RNG.uniform(-9, 5, 200000)
    x = np.concatenate([x, (np.arange(-2048, 2048) + 0.5) * 2.0**-10 + RNG.uniform(-1e-12, 1e-12, 4096)])
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16).astype(np.float64)
        codes = x.astype(np.float16).view(np.uint16)
    assert same_bits(cpd.quantize(x, "fp16"), ref)
    assert np.array_equal(cpd.encode(x, "fp16"), codes)


@pytest.mark.parametrize("name", ["e4m3fn", "e5m2", "e2m1fn", "e3m2"])
@pytest.mark.parametrize("mode", ["nearest_even", "nearest_away", "toward_zero", "upward", "downward", "odd"])
def test_float64_near_midpoints_every_mode(name, mode):
    e, m, bias, kind = test_bulk.SPECS[name]
    pairs = {}
    for c in range(1 << (1 + e + m)):
        v = test_bulk.ref_decode(c, e, m, bias, kind)
        if math.isfinite(v) and (v != 0 or c == 0):
            pairs[v] = c
    values = np.array(sorted(pairs))
    codes = [pairs[v] for v in values]
    mids = (values[1:] + values[:-1]) / 2
    pts = np.concatenate([mids * (1 + 2.0**-40), mids * (1 - 2.0**-40), values])  # float32 cannot hold these
    pts = pts[np.abs(pts) <= values[-1]]
    ours = cpd.quantize(pts, name, rounding=mode)
    assert ours.dtype == np.float64
    for x, q in zip(pts.tolist(), ours.tolist()):
        assert q == test_bulk.ref_round(x, mode, values, codes)[0], (name, mode, x)


def test_float64_stochastic_equals_the_scalar_core_on_doubles():
    x = RNG.standard_normal(4096) * 3
    q = cpd.quantize(x, "e4m3fn", rounding="stochastic", seed=5, stream=2, offset=7)
    lo = cpd.quantize(x, "e4m3fn", rounding="downward")
    hi = cpd.quantize(x, "e4m3fn", rounding="upward")
    assert np.all((q == lo) | (q == hi))
    again = cpd.quantize(x, "e4m3fn", rounding="stochastic", seed=5, stream=2, offset=7, threads=1)
    assert same_bits(q, again)
    frac = np.where(hi > lo, (x - lo) / np.where(hi > lo, hi - lo, 1), 0)
    up = (q == hi) & (hi > lo)
    assert abs(up.mean() - frac[hi > lo].mean()) < 0.03  # rounds up with probability = distance


def test_out_of_a_wider_dtype_and_refusals():
    x16 = torch.randn(100).half()
    for t in (torch.float32, torch.float64):
        o = torch.empty(100, dtype=t)
        assert cpd.quantize(x16, "e5m2", out=o) is o
        assert same_bits(o, cpd.quantize(x16.float(), "e5m2"))
    o = np.empty(100, np.float64)
    cpd.quantize(x16.float().numpy(), "e4m3fn", out=o)
    assert same_bits(o, cpd.quantize(x16.float().numpy(), "e4m3fn"))
    with pytest.raises(TypeError, match="out is float16 and the input float32; out must be float32 or float64"):
        cpd.quantize(torch.randn(4), "e4m3fn", out=torch.empty(4, dtype=torch.float16))
    with pytest.raises(TypeError, match="out is float32 and the input float64"):
        cpd.quantize(np.zeros(4), "e4m3fn", out=np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="int64; cpd takes float16, bfloat16, float32 or float64"):
        cpd.quantize(np.zeros(4, np.int64), "e4m3fn")
    with pytest.raises(TypeError, match="torch.int32; cpd takes float16, bfloat16, float32 or float64"):
        cpd.quantize(torch.zeros(4, dtype=torch.int32), "e4m3fn")
    with pytest.raises(TypeError, match="float32"):
        cpd.mx_quantize(torch.zeros(32, dtype=torch.float16), "e4m3fn")


def test_strided_16_bit_and_float64_inputs_and_outs():
    x = torch.randn(8, 6).to(torch.bfloat16)
    q = cpd.quantize(x.t(), "e4m3fn")
    assert q.shape == (6, 8) and torch.equal(q, cpd.quantize(x.t().contiguous(), "e4m3fn"))
    o = torch.empty(6, 16, dtype=torch.bfloat16)[:, ::2]
    cpd.quantize(x.t(), "e4m3fn", out=o)
    assert torch.equal(o, q)
    y = np.random.default_rng(1).standard_normal((5, 7))
    assert same_bits(cpd.quantize(y.T, "e5m2"), cpd.quantize(np.ascontiguousarray(y.T), "e5m2"))
    cpd.quantize(y, "e5m2", out=y)  # in place, float64
    assert same_bits(y, cpd.quantize(y, "e5m2"))
    h = torch.randn(50).half()
    ref = cpd.quantize(h, "e4m3fn")
    assert cpd.quantize(h, "e4m3fn", out=h) is h and torch.equal(h, ref)  # in place, float16


# --- the scalers' statistic and simulate_allreduce ------------------------------------------

def scalers():
    return [cpd.aps("e4m3fn", 3), cpd.aps("e5m2", 8), cpd.current_scaling("e4m3fn"), cpd.fixed_scaling(2),
            cpd.amax_sqrtw_scaling("e5m2", 4), cpd.predivide_scaling(4), cpd.dynamic_loss_scaling(),
            cpd.delayed_scaling("e4m3fn")]


def test_statistics_depend_on_max_abs_only():
    """The GPU and float64 paths take the statistic of [max|x|]: the same for every scaler."""
    for x in (RNG.standard_normal(1000).astype(np.float32) * 1e-3, np.float32([0, -0.0]), np.float32([1, np.nan]),
              np.float32([-np.inf, 2]), np.float32([3e38, -1e-45]), np.zeros(0, np.float32)):
        amax = np.float32([np.max(np.abs(x))]) if x.size else np.zeros(0, np.float32)
        for s in scalers():
            a, b = s.statistic(x), s.statistic(amax)
            assert a == b or (a != a and b != b), (s, x)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_statistic_of_16_bit_values_equals_float32s(dtype):
    x = torch.randn(999).to(DTYPES[dtype]) * 7
    for s in scalers():
        assert s.statistic(x) == s.statistic(x.float()), s


def test_statistic_of_float64_values():
    """float64: the statistic of max|x| rounded up to a float32 (exact where it is one; never a
    smaller scale than the exact amax would give, so no value overflows that would not)."""
    w = 3
    aps = cpd.aps("e4m3fn", w)
    for amax in (0.1, 2.0**-20 / w * (1 + 2**-40), 1.0, 3.0 * 2**-130, 2.0**-140 * (1 + 2**-45)):
        x = np.float64([amax / 2, -amax, 0.0])
        exact = math.ceil(math.log2(amax * w))
        st = aps.statistic(x)
        assert st >= exact and st <= exact + 1, amax
        if float(np.float32(amax)) == amax:
            assert st == exact
        up = np.float32(amax) if float(np.float32(amax)) >= amax else np.nextafter(np.float32(amax), np.float32(1))
        for s in scalers():
            assert s.statistic(x) == s.statistic(np.float32([up])), (s, amax)
    assert aps.statistic(np.float64([1.5, np.nan])) == aps.statistic(np.float32([np.nan]))
    assert aps.statistic(np.zeros(0)) == aps.statistic(np.zeros(0, np.float32))
    with pytest.raises(ValueError, match="beyond float32's range"):
        aps.statistic(np.float64([1e300]))


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_simulate_allreduce_16_bit(dtype):
    workers = [torch.randn(1000).to(DTYPES[dtype]) for _ in range(4)]
    ref, rinfo = cpd.simulate_allreduce([w.float() for w in workers], "e5m2", scaler=cpd.fixed_scaling(0))
    out, info = cpd.simulate_allreduce(workers, "e5m2", scaler=cpd.fixed_scaling(0))
    assert out.dtype == DTYPES[dtype] and same_bits(out.float(), ref) and info["scale"].exponent == 0
    aps_ref, _ = cpd.simulate_allreduce([w.float() for w in workers], "e4m3fn", mean=True)
    o = torch.empty(1000)
    got, _ = cpd.simulate_allreduce(workers, "e4m3fn", mean=True, out=o)
    assert got is o and same_bits(o, aps_ref)
    # bfloat16 workers summed in fp16 (10 mantissa bits); float16 ones of 60000 summed in bf16 (240000 > 65504)
    big = [torch.full((10,), 60000.0).to(DTYPES[dtype])] * 4
    with pytest.raises(ValueError, match=f"not {dtype} values.*float32"):
        cpd.simulate_allreduce(workers if dtype == "bfloat16" else big, "fp16" if dtype == "bfloat16" else "bf16",
                               scaler="none")
    with pytest.raises(TypeError, match="differ in dtype"):
        cpd.simulate_allreduce([workers[0], workers[1].float()], "e5m2")


@pytest.mark.parametrize("mode", ["nearest_even", "stochastic"])
def test_simulate_allreduce_float64_rounds_each_worker_once_from_the_double(mode):
    w, n = 4, 3000
    workers = [RNG.standard_normal(n) for _ in range(w)]
    aps = cpd.aps("e4m3fn", w)
    scale = aps.select(max(aps.statistic(x) for x in workers))
    # the simulation's own quantization of worker r (docs/reduction.md: step -1, stream + 8 r), from the double
    q = [cpd.quantize(x, "e4m3fn", rounding=mode, seed=3, stream=10 + 8 * r, scale_exponent=scale.exponent)
         for r, x in enumerate(workers)]
    ref, _ = cpd.simulate_allreduce([v.astype(np.float32) for v in q], "e4m3fn", rounding=mode, seed=3, stream=10)
    out, info = cpd.simulate_allreduce(workers, "e4m3fn", rounding=mode, seed=3, stream=10)
    assert out.dtype == np.float64 and info["scale"].exponent == scale.exponent
    assert same_bits(out, ref.astype(np.float64))
    # float32 inputs would have been rounded twice: a value just above a midpoint (in the scaled format)
    if mode == "nearest_even":
        k = scale.exponent
        x = [np.full(8, (1.0625 + 2**-30) * 2.0**-k)] + [np.zeros(8)] * (w - 1)  # e4m3fn: 1.0625 = mid(1, 1.125)
        got, _ = cpd.simulate_allreduce(x, "e4m3fn", scaler=cpd.fixed_scaling(k))
        assert np.all(got == 1.125 * 2.0**-k)  # (through float32: the tie 1.0625, then 1)
        got32, _ = cpd.simulate_allreduce([v.astype(np.float32) for v in x], "e4m3fn", scaler=cpd.fixed_scaling(k))
        assert np.all(got32 == 2.0**-k)
