# SPDX-License-Identifier: MIT
"""cpd.quantize / encode / decode against references that share no code with cpd:
numpy's float16, torch's bfloat16 and float16 casts, and a decoder and rounder written
here from the formats' definitions (docs/formats.md); the bulk binding against the
scalar core for every mode, seed, stream and offset; and bad input."""

import math

import numpy as np
import pytest
import torch

import cpd

RNG = np.random.default_rng(12345)


def bits32(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def same_floats(a, b):
    """Equal bit patterns, any NaN equal to any NaN."""
    a = np.asarray(a, dtype=np.float32).ravel()
    b = np.asarray(b, dtype=np.float32).ravel()
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(bits32(a[~nan]), bits32(b[~nan])))


def wide_floats(n):
    """Float32 values across the whole range: normals, subnormals, zeros, near-ties."""
    u = RNG.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
    x = u.view(np.float32).copy()
    x[~np.isfinite(x)] = 1.5
    y = (RNG.standard_normal(n) * 10.0 ** RNG.uniform(-8, 6, size=n)).astype(np.float32)
    return np.concatenate([x, y, np.float32([0.0, -0.0, 1e-45, -1e-45, 65504, 65520, -65520, 3e38])])


# --- the 16-bit formats against numpy and torch ----------------------------------------

def test_fp16_matches_numpy_float16():
    x = wide_floats(200000)
    ours = cpd.quantize(x, "fp16")
    with np.errstate(over="ignore"):  # (numpy's cast warns where it overflows to inf, as it should)
        ref = x.astype(np.float16)
    assert same_floats(ours, ref.astype(np.float32))
    codes = cpd.encode(x, "float16")
    assert codes.dtype == np.uint16
    assert np.array_equal(codes, ref.view(np.uint16))


def test_bf16_and_fp16_match_torch_casts():
    x = torch.from_numpy(wide_floats(200000))
    assert same_floats(cpd.quantize(x, "bf16").numpy(), x.to(torch.bfloat16).to(torch.float32).numpy())
    assert same_floats(cpd.quantize(x, "fp16").numpy(), x.to(torch.float16).to(torch.float32).numpy())
    codes = cpd.encode(x, "bf16")
    assert codes.dtype == torch.int16  # torch has no uint16: the same bits
    assert torch.equal(codes, x.to(torch.bfloat16).view(torch.int16))


def test_nan_and_inf_never_vanish():
    x = np.float32([np.nan, np.inf, -np.inf, 1e6, -1e6, 1.0])
    q, st = cpd.quantize(x, "e4m3fn", stats=True)
    assert np.isnan(q[0]) and np.isnan(q[1]) and np.isnan(q[2])  # fn: no inf, NaN instead
    assert np.isnan(q[3]) and np.isnan(q[4]) and q[5] == 1.0
    assert st["nan_inputs"] == 1 and st["inf_inputs"] == 2 and st["overflow"] == 2
    q = cpd.quantize(x, "e4m3fn", overflow="saturate")
    assert np.isnan(q[0]) and q[1] == 448 and q[2] == -448 and q[3] == 448
    q = cpd.quantize(x, "e5m2")
    assert np.isnan(q[0]) and q[1] == np.inf and q[2] == -np.inf and q[3] == np.inf


# --- 8-bit and smaller formats against a decoder and rounder written here ---------------

# (E, M, bias, kind): ieee = inf and NaNs at the all-ones exponent; fn = no inf, NaN only at
# all ones; fnuz = no inf, no -0, NaN = the -0 pattern; finite = neither.
SPECS = {
    "e4m3fn": (4, 3, 7, "fn"), "e4m3": (4, 3, 7, "ieee"), "e5m2": (5, 2, 15, "ieee"),
    "e4m3fnuz": (4, 3, 8, "fnuz"), "e5m2fnuz": (5, 2, 16, "fnuz"), "e3m4": (3, 4, 3, "ieee"),
    "e3m2fn": (3, 2, 3, "finite"), "e2m3fn": (2, 3, 1, "finite"), "e2m1fn": (2, 1, 1, "finite"),
    "e3m2": (3, 2, 3, "ieee"), "e2m1": (2, 1, 1, "ieee"),
}


def ref_decode(code, e, m, bias, kind):
    sign = (code >> (e + m)) & 1
    ef = (code >> m) & ((1 << e) - 1)
    mf = code & ((1 << m) - 1)
    top = (1 << e) - 1
    if kind == "ieee" and ef == top:
        return math.nan if mf else (-math.inf if sign else math.inf)
    if kind == "fn" and ef == top and mf == (1 << m) - 1:
        return math.nan
    if kind == "fnuz" and sign and ef == 0 and mf == 0:
        return math.nan
    v = math.ldexp(mf, 1 - bias - m) if ef == 0 else math.ldexp((1 << m) | mf, ef - bias - m)
    return -v if sign else v


@pytest.mark.parametrize("name", sorted(SPECS))
def test_decode_of_every_code(name):
    e, m, bias, kind = SPECS[name]
    codes = np.arange(1 << (1 + e + m), dtype=np.uint8)
    ours = cpd.decode(codes, name)
    ref = np.float32([ref_decode(int(c), e, m, bias, kind) for c in codes])
    assert same_floats(ours, ref), name
    assert cpd.finfo(name).max == max(v for v in ref if np.isfinite(v))


def ref_round(x, mode, values, codes):
    """x (finite, |x| <= max) rounded to the sorted finite `values` (codes alongside)."""
    i = np.searchsorted(values, x)
    if i < len(values) and values[i] == x:
        return x, True
    lo, hi = values[i - 1], values[i]
    clo, chi = codes[i - 1], codes[i]
    toward_zero = hi if x < 0 else lo
    if mode == "toward_zero":
        r = toward_zero
    elif mode == "upward":
        r = hi
    elif mode == "downward":
        r = lo
    elif mode == "odd":
        r = lo if clo & 1 else hi
    else:
        mid = (lo + hi) / 2
        if x != mid:
            r = lo if x < mid else hi
        elif mode == "nearest_even":
            r = lo if clo & 1 == 0 else hi
        elif mode == "nearest_zero":
            r = lo if abs(lo) < abs(hi) else hi
        else:  # nearest_away
            r = lo if abs(lo) > abs(hi) else hi
    return r, False


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("mode", ["nearest_even", "nearest_away", "nearest_zero", "toward_zero", "upward", "downward",
                                  "odd"])
def test_quantize_in_range_every_mode(name, mode):
    e, m, bias, kind = SPECS[name]
    pairs = {}
    for c in range(1 << (1 + e + m)):
        v = ref_decode(c, e, m, bias, kind)
        if math.isfinite(v) and (v != 0 or c == 0):  # +0 stands for both zeros
            pairs[v] = c
    values = np.array(sorted(pairs))
    codes = [pairs[v] for v in values]
    top = values[-1]
    # uniform over the range, values, midpoints and their float32 neighbours
    mids = (values[1:] + values[:-1]) / 2
    pts = np.concatenate([values, mids, RNG.uniform(-top, top, 3000)]).astype(np.float32)
    pts = np.concatenate([pts, np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(-np.inf))])
    pts = pts[np.abs(pts) <= top]
    ours = cpd.quantize(pts, name, rounding=mode)
    for x, q in zip(pts.tolist(), ours.tolist()):
        r, _ = ref_round(x, mode, values, codes)
        assert q == r, (name, mode, x, q, r)


# --- the binding passes everything through ------------------------------------------------

@pytest.mark.parametrize("generator", cpd.generators)
@pytest.mark.parametrize("mode", cpd.roundings)
@pytest.mark.parametrize("name", ["e4m3fn", "e5m2", "bf16", "e2m1fn", "e3m0", "e6m9"])
def test_bulk_equals_scalar_core(name, mode, generator):
    x = wide_floats(3000)
    x = x[np.abs(x) < 1e30]
    seed, stream, offset = 77, 5, 1001
    ours = cpd.quantize(x, name, rounding=mode, overflow="saturate", seed=seed, stream=stream, offset=offset,
                        generator=generator)
    ref = np.float32([cpd._cpd.scalar_quantize(name, mode, "saturate", float(v),
                                               cpd.random_bits(seed, stream, offset + i, generator)
                                               if mode == "stochastic" else 0) for i, v in enumerate(x.tolist())])
    assert same_floats(ours, ref)


def test_generators_by_name_and_by_manual_seed():
    x = (RNG.standard_normal(4096)).astype(np.float32)
    assert cpd.generators == ("v1", "v2")
    assert cpd.random_bits(0, 0, 0, "v2") == 0x7B1DCDAF  # splitmix64's first output from seed 0, low half
    assert cpd.random_bits(1, 2, 3, "v1") == 0x0B1CB866  # v1's word, as before v2
    v1 = cpd.quantize(x, "e4m3fn", rounding="stochastic", seed=5, generator="v1")
    v2 = cpd.quantize(x, "e4m3fn", rounding="stochastic", seed=5, generator="v2")
    assert not same_floats(v1, v2)
    default = {"v1": v1, "v2": v2}[cpd._cpd.default_generator]
    assert same_floats(default, cpd.quantize(x, "e4m3fn", rounding="stochastic", seed=5))
    codes = cpd.encode(x, "e4m3fn", rounding="stochastic", seed=5, generator="v1")
    assert same_floats(cpd.decode(codes, "e4m3fn"), v1)
    cpd.manual_seed(3, generator="v1")  # every call that names no generator: v1
    try:
        assert same_floats(cpd.quantize(x, "e4m3fn", rounding="stochastic", seed=5), v1)
        assert cpd.random_bits(1, 2, 3) == 0x0B1CB866
    finally:
        cpd.manual_seed(0)
    assert same_floats(cpd.quantize(x, "e4m3fn", rounding="stochastic", seed=5), default)
    with pytest.raises(ValueError, match="generator 'v3' is not one of v1, v2"):
        cpd.quantize(x, "e4m3fn", rounding="stochastic", seed=5, generator="v3")
    with pytest.raises(ValueError, match="generator"):
        cpd.manual_seed(1, generator="xorshift")


def test_scale_exponent():
    x = (RNG.standard_normal(5000) * 1e-3).astype(np.float32)
    for k in (-3, 0, 7, 20):
        a = cpd.quantize(x, "e4m3fn", scale_exponent=k)
        b = (cpd.quantize((x * np.float32(2.0**k)).astype(np.float32), "e4m3fn") * np.float32(2.0**-k))
        assert same_floats(a, b), k
        c = cpd.encode(x, "e4m3fn", scale_exponent=k)
        assert same_floats(cpd.decode(c, "e4m3fn", scale_exponent=k), a)


def test_stochastic_seeds_streams_and_threads():
    x = (RNG.standard_normal(1 << 18)).astype(np.float32)
    a = cpd.quantize(x, "e5m2", rounding="stochastic", seed=3)
    assert same_floats(a, cpd.quantize(x, "e5m2", rounding="stochastic", seed=3, threads=1))
    assert same_floats(a, cpd.quantize(x, "e5m2", rounding="stochastic", seed=3, threads=2))
    assert not same_floats(a, cpd.quantize(x, "e5m2", rounding="stochastic", seed=4))
    # pieces with offsets draw what the whole does
    half = len(x) // 2
    b = np.concatenate([cpd.quantize(x[:half], "e5m2", rounding="stochastic", seed=3),
                        cpd.quantize(x[half:], "e5m2", rounding="stochastic", seed=3, offset=half)])
    assert same_floats(a, b)
    # no seed: cpd.manual_seed's sequence, repeatable
    cpd.manual_seed(9)
    c1 = cpd.quantize(x, "e5m2", rounding="stochastic")
    c2 = cpd.quantize(x, "e5m2", rounding="stochastic")
    cpd.manual_seed(9)
    assert same_floats(c1, cpd.quantize(x, "e5m2", rounding="stochastic"))
    assert not same_floats(c1, c2)
    # unbiased: the mean error is small against the ulp
    y = np.full(1 << 16, 1.1, dtype=np.float32)
    assert abs(float(cpd.quantize(y, "e5m2", rounding="stochastic", seed=1).mean()) - 1.1) < 2e-3


# --- tensors, arrays, strides, in place --------------------------------------------------

def test_shapes_strides_and_in_place():
    x = RNG.standard_normal((64, 33)).astype(np.float32)
    ref = cpd.quantize(x, "e4m3fn")
    assert ref.shape == x.shape
    t = x.T  # strided
    assert same_floats(cpd.quantize(t, "e4m3fn"), ref.T)
    tt = torch.from_numpy(x).t()
    assert same_floats(cpd.quantize(tt, "e4m3fn").numpy(), ref.T)
    y = x.copy()
    r = cpd.quantize(y, "e4m3fn", out=y)
    assert r is y and same_floats(y, ref)
    z = torch.from_numpy(x.copy()).requires_grad_()
    assert same_floats(cpd.quantize(z, "e4m3fn").numpy(), ref)
    w = torch.from_numpy(x.copy())
    cpd.quantize(w, "e4m3fn", out=w)
    assert same_floats(w.numpy(), ref)
    s = np.zeros((33, 64), dtype=np.float32).T  # a strided out
    cpd.quantize(x, "e4m3fn", out=s)
    assert same_floats(s, ref)


def test_scalars_and_empty_arrays():
    assert cpd.quantize(np.float32(1.3), "e2m1fn") == 1.5
    assert cpd.quantize(torch.tensor(1.3), "e2m1fn").item() == 1.5
    assert cpd.quantize(np.zeros(0, np.float32), "e4m3fn").shape == (0,)
    assert cpd.encode(torch.zeros(0, 3), "bf16").shape == (0, 3)


def test_no_copy_for_contiguous_float32():
    x = torch.randn(1000)
    out = torch.empty(1000)
    res = cpd.quantize(x, "bf16", out=out)
    assert res is out and out.data_ptr() == res.data_ptr()
    c = cpd.encode(x, "e4m3fn")
    assert c.dtype == torch.uint8 and c.shape == x.shape
    assert cpd.encode(np.zeros(3, np.float32), "e2m1fn").dtype == np.uint8
    assert cpd.encode(np.zeros(3, np.float32), "e8m10").dtype == np.uint32


def test_decode_roundtrip_every_8bit_code_through_torch():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    v = cpd.decode(codes, "e5m2")
    again = cpd.encode(v, "e5m2")
    keep = ~torch.isnan(v)
    assert torch.equal(again[keep], codes[keep])


# --- bad input ---------------------------------------------------------------------------

def test_bad_input_raises_named_errors():
    x = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="unknown format"):
        cpd.quantize(x, "q4m3")
    with pytest.raises(ValueError, match="rounding"):
        cpd.quantize(x, "e4m3fn", rounding="nearest")
    with pytest.raises(ValueError, match="overflow"):
        cpd.quantize(x, "e4m3fn", overflow="clip")
    with pytest.raises(ValueError):
        cpd.quantize(x, "e11m52")  # values that are not floats
    with pytest.raises(TypeError, match="int32; cpd takes float16, bfloat16, float32 or float64"):
        cpd.quantize(np.zeros(4, np.int32), "e4m3fn")
    with pytest.raises(TypeError, match="complex64; cpd takes float16, bfloat16, float32 or float64"):
        cpd.quantize(torch.zeros(4, dtype=torch.complex64), "e4m3fn")
    with pytest.raises(TypeError, match="meta"):
        cpd.quantize(torch.empty(4, device="meta"), "e4m3fn")
    with pytest.raises(TypeError):
        cpd.quantize([1.0, 2.0], "e4m3fn")
    with pytest.raises(TypeError):
        cpd.quantize(x, 8)
    with pytest.raises(ValueError, match="shape"):
        cpd.quantize(x, "e4m3fn", out=np.zeros(5, np.float32))
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        cpd.quantize(x, "e4m3fn", out=ro)
    with pytest.raises(ValueError, match="threads"):
        cpd.quantize(x, "e4m3fn", threads=-1)
    with pytest.raises(ValueError, match="threads"):
        cpd.quantize(x, "e4m3fn", threads=2**40)
    with pytest.raises(ValueError, match="offset"):
        cpd.quantize(x, "e4m3fn", rounding="stochastic", seed=1, offset=-1)
    with pytest.raises(ValueError, match="stream"):
        cpd.encode(x, "e4m3fn", stream=2**64)
    with pytest.raises(TypeError, match="seed"):
        cpd.quantize(x, "e4m3fn", rounding="stochastic", seed="1")
    with pytest.raises(ValueError, match="scale_exponent"):
        cpd.quantize(x, "e4m3fn", scale_exponent=2**40)
    with pytest.raises(ValueError, match="range"):
        cpd.quantize(x, "e4m3fn", scale_exponent=5000)  # the scaled format leaves double's range
    with pytest.raises(ValueError, match="seed"):
        cpd.quantize(x, "e4m3fn", rounding="stochastic", seed=-1)
    with pytest.raises(ValueError, match="code"):
        cpd.decode(np.uint8([0x1F]), "e2m1fn")  # bits above the format's 4
    with pytest.raises(TypeError, match="codes"):
        cpd.decode(np.zeros(3, np.float32), "e4m3fn")
    with pytest.raises(TypeError):
        cpd.encode(x, "bf16", out=np.zeros(4, np.uint8))  # 8-bit integers for 16-bit codes
    with pytest.raises(ValueError):
        cpd.finfo("e0m3")


# --- formats and finfo --------------------------------------------------------------------

def test_formats_and_finfo():
    names = cpd.formats()
    assert "e4m3fn" in names and "e5m2" in names and cpd.finfo("e2m1fn").name in names
    for n in names:
        cpd.finfo(n)
    f, h = cpd.finfo("fp16"), np.finfo(np.float16)
    assert (f.bits, f.max, f.tiny, f.smallest_subnormal, f.eps, f.epsneg, f.maxexp, f.minexp, f.nmant, f.nexp,
            f.precision) == (h.bits, h.max, h.tiny, h.smallest_subnormal, h.eps, h.epsneg, h.maxexp, h.minexp,
                             h.nmant, h.nexp, h.precision)
    assert f.resolution == float(h.resolution)  # (10^-3 rounded to float16, as numpy's)
    b, tb = cpd.finfo("bf16"), torch.finfo(torch.bfloat16)
    assert (b.bits, b.max, b.tiny, b.eps) == (tb.bits, tb.max, tb.tiny, tb.eps)
    e = cpd.finfo("e4m3fn")
    assert (e.max, e.tiny, e.smallest_subnormal, e.has_inf, e.has_nan) == (448, 2**-6, 2**-9, False, True)
    assert cpd.finfo("e2m1fn").max == 6 and not cpd.finfo("e2m1fn").has_nan


def test_finfo_agrees_with_the_format_values():
    """Independent of ml_dtypes: min, epsneg, eps, tiny and smallest_subnormal of every named
    format from the list of its values (every code decoded by cpd.decode)."""
    for name in cpd.formats():
        f = cpd.finfo(name)
        if f.bits > 16 or not f.bits:
            continue
        codes = np.arange(2 ** f.bits, dtype=np.uint8 if f.bits <= 8 else np.uint16)
        if not cpd._cpd.format_info(name)["fits_float"]:
            continue  # (values that are not floats: the decode to float32 refuses them)
        v = cpd.decode(codes, name).astype(np.float64)
        v = np.unique(v[np.isfinite(v)])
        assert f.min == v[0] and f.max == v[-1], name
        pos = v[v > 0]
        assert f.smallest_subnormal == pos[0], name
        if 1.0 in v and v[0] < 1.0:
            below, above = v[v < 1.0][-1], v[v > 1.0][0] if f.max > 1 else None
            assert f.epsneg == 1.0 - below, name
            if above is not None:
                assert f.eps == above - 1.0, name
    # the three the issue found: E8M0 has no zero; 1 is the smallest normal of e2m1fn and e2m3fn
    assert cpd.finfo("float8_e8m0fnu").min == 2.0**-127 and not cpd.finfo("e8m0fnu").has_zero
    assert (cpd.finfo("float4_e2m1fn").epsneg, cpd.finfo("float6_e2m3fn").epsneg) == (0.5, 0.125)
    assert (cpd.finfo("float4_e2m1fn").negep, cpd.finfo("float6_e2m3fn").negep) == (-1, -3)


# --- scalers and MX -------------------------------------------------------------------------

def test_scalers_follow_their_definitions():
    g = [RNG.standard_normal(100).astype(np.float32) * s for s in (1e-3, 5e-2, 2.0)]
    aps = cpd.aps("e4m3fn", world_size=3)
    sts = [aps.statistic(x) for x in g]
    assert sts == [math.ceil(math.log2(float(np.abs(x).max()) * 3)) for x in g]
    st = aps.identity
    for s in sts:
        st = aps.combine(st, s)
    assert st == max(sts) and aps.select(st).exponent == 8 - st and aps.select(st).pow2
    assert aps.statistic(torch.from_numpy(g[0]).view(10, 10).t()) == sts[0]  # a strided tensor
    assert aps.statistic(np.zeros(5, np.float32)) == aps.identity  # all zero: no information
    bad = aps.select(aps.statistic(np.float32([1.0, np.nan])))
    assert bad.nonfinite and bad.exponent == 0
    cur = cpd.current_scaling("e4m3fn")
    amax = cur.statistic(g[1])
    assert amax == float(np.abs(g[1]).max())
    sc = cur.select(amax)
    assert not sc.pow2 and sc.value == np.float32(448.0) / np.float32(amax)
    assert cur.select(cur.combine(amax, float("inf"))).nonfinite
    assert cpd.current_scaling("e4m3fn", power_of_two=True).select(amax).value == 2.0 ** math.floor(
        math.log2(448.0 / amax))
    dl = cpd.delayed_scaling("e5m2", history_length=4)
    assert dl.select(2.0).value == 1.0  # the first step uses the initial scale, then records
    assert dl.select(1.0).value == np.float32(57344.0) / np.float32(2.0)  # the window's max
    loss = cpd.dynamic_loss_scaling(init_scale=1024.0, growth_interval=2)
    assert loss.statistic(np.float32([1.0, np.inf])) == 1
    assert loss.select(1).value == 512.0  # an overflow halves the scale
    assert loss.select(0).value == 512.0 and loss.select(0).value == 1024.0  # two clean steps double it
    ms = cpd.amax_sqrtw_scaling("e4m3fn", 16)
    assert ms.select(ms.statistic(np.full(10, 0.02, np.float32))).value == np.float32(112.0) / np.float32(0.02)
    pd = cpd.predivide_scaling(4)
    assert (pd.select(pd.statistic(g[0])).value, pd.select(0).inverse) == (0.25, 4.0)
    fx = cpd.fixed_scaling(5)
    assert fx.select(fx.statistic(g[0])).exponent == 5
    with pytest.raises(ValueError, match="world_size"):
        cpd.aps("e4m3fn", 0)
    with pytest.raises(ValueError, match="compiled"):
        cpd.aps("e6m9", 2)
    with pytest.raises(TypeError, match="int64; cpd takes float16"):
        aps.statistic(np.zeros(3, np.int64))  # (float64 is taken: python/tests/test_dtypes.py)


def test_mx_quantize_floor_rule():
    e, m, bias, kind = SPECS["e4m3fn"]
    pairs = {}
    for c in range(256):
        v = ref_decode(c, e, m, bias, kind)
        if math.isfinite(v) and (v != 0 or c == 0):
            pairs[v] = c
    values = np.array(sorted(pairs))
    codes = [pairs[v] for v in values]
    x = (RNG.standard_normal(320) * 10.0 ** RNG.uniform(-4, 4, size=320)).astype(np.float32)
    ours = cpd.mx_quantize(x, "e4m3fn", block_size=32)
    for b in range(0, 320, 32):
        blk = x[b:b + 32].astype(np.float64)
        ex = math.floor(math.log2(np.abs(blk).max())) - 8  # OCP MX: floor(log2(amax)) - emax(e4m3fn)
        for i, v in enumerate(blk):
            y = min(max(v / 2.0**ex, -448.0), 448.0)  # the elements saturate
            r, _ = ref_round(y, "nearest_even", values, codes)
            assert ours[b + i] == np.float32(r * 2.0**ex), (b + i, v, ours[b + i], r * 2.0**ex)
    with pytest.raises(ValueError, match="rule"):
        cpd.mx_quantize(x, "e4m3fn", rule="round")
    with pytest.raises(ValueError, match="element"):
        cpd.mx_quantize(x, "bf16")


@pytest.mark.parametrize("name,mbits", [("int8", 8), ("int4", 4), ("int2", 2)])
def test_mx_quantize_integer_elements_are_microxcalings(name, mbits):
    """microxcaling's integer elements restated: shared exponent floor(log2(amax)) (emax 0),
    V / 2^e times 2^(mbits - 2) rounded half to even and clipped to +-(2^(mbits-1) - 1)."""
    x = (RNG.standard_normal(256) * 10.0 ** RNG.uniform(-3, 3, size=256)).astype(np.float32)
    x[:8] = [1.0, 0.5, -0.375, 0.25, 0.125, -0.0625, 0.1875, 0.03125]  # ties of the int grids
    ours = cpd.mx_quantize(x, name, block_size=16)
    top, frac = 2.0 ** (mbits - 1) - 1, 2.0 ** (mbits - 2)
    for b in range(0, 256, 16):
        blk = x[b:b + 16].astype(np.float64)
        ex = math.floor(math.log2(np.abs(blk).max()))
        k = np.clip(np.rint(blk / 2.0 ** ex * frac), -top, top)
        want = (k / frac * 2.0 ** ex).astype(np.float32)
        assert np.array_equal(ours[b:b + 16], want), (name, b, blk, ours[b:b + 16], want)


# --- outputs that alias ----------------------------------------------------------------------

def stride0(n, dtype=np.float32):
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape=(n,), strides=(0,))


def test_out_whose_elements_share_memory_is_refused():
    x = RNG.standard_normal(6).astype(np.float32)
    overlapping = np.lib.stride_tricks.as_strided(np.zeros(8, np.float32), shape=(3, 2), strides=(4, 4))
    for bad in (stride0(6), torch.zeros(1).expand(6), overlapping):
        xb = x.reshape(3, 2) if tuple(bad.shape) == (3, 2) else x
        calls = [lambda o: cpd.quantize(xb, "e4m3fn", out=o), lambda o: cpd.mx_quantize(xb, "e4m3fn", out=o),
                 lambda o: cpd.decode(cpd.encode(xb, "e4m3fn"), "e4m3fn", out=o),
                 lambda o: cpd.simulate_allreduce([xb, xb], "e4m3fn", out=o)]
        for call in calls:
            with pytest.raises(ValueError, match="share memory"):
                call(bad)
    with pytest.raises(ValueError, match="share memory"):
        cpd.encode(x, "e4m3fn", out=stride0(6, np.uint8))
    # strides that interleave without sharing a byte are an ordinary output
    buf = np.zeros(12, np.float32)
    interleaved = np.lib.stride_tricks.as_strided(buf, shape=(3, 2), strides=(8, 12))
    cpd.quantize(x.reshape(3, 2), "e4m3fn", out=interleaved)
    assert same_floats(interleaved, cpd.quantize(x.reshape(3, 2), "e4m3fn"))


def test_simulate_allreduce_refuses_out_overlapping_an_input():
    buf = np.arange(30, dtype=np.float32) / 7 + 1
    ref, _ = cpd.simulate_allreduce([buf[:10].copy(), buf[10:20].copy()], "e4m3fn")
    before = buf.copy()
    with pytest.raises(ValueError, match="out overlaps worker 0"):
        cpd.simulate_allreduce([buf[:10], buf[10:20]], "e4m3fn", out=buf[5:15])
    assert np.array_equal(buf, before)  # nothing written
    t = torch.from_numpy(buf)
    with pytest.raises(ValueError, match="out overlaps worker 1"):
        cpd.simulate_allreduce([t[:10], t[10:20]], "e4m3fn", out=t[15:25])
    with pytest.raises(ValueError, match="out overlaps worker 1"):  # strided views of one buffer
        cpd.simulate_allreduce([buf[0:20:2], buf[1:20:2]], "e4m3fn", out=buf[3:23:2])
    assert np.array_equal(buf, before)
    # out may be a worker's tensor itself (summed in place), or interleave with one
    xs = [buf[:10].copy(), buf[10:20].copy()]
    cpd.simulate_allreduce(xs, "e4m3fn", out=xs[1])
    assert same_floats(xs[1], ref)
    z = np.zeros(20, np.float32)
    z[::2] = buf[:10]
    cpd.simulate_allreduce([z[::2], buf[10:20]], "e4m3fn", out=z[1::2])
    assert same_floats(z[1::2], ref) and same_floats(z[::2], buf[:10])


# --- integer arguments, scalers and scales ---------------------------------------------------

def test_integer_like_arguments_and_non_integers():
    x = RNG.standard_normal(100).astype(np.float32)
    n = np.int64
    assert same_floats(cpd.quantize(x, "e5m2", rounding="stochastic", seed=n(3), stream=np.uint8(2), offset=n(7),
                                    threads=n(1), scale_exponent=np.int16(4)),
                       cpd.quantize(x, "e5m2", rounding="stochastic", seed=3, stream=2, offset=7, threads=1,
                                    scale_exponent=4))
    aps = cpd.aps("e4m3fn", n(8), margin=np.int32(1))
    assert aps.world_size == 8 and aps.select(n(3)).exponent == cpd.aps("e4m3fn", 8, 1).select(3).exponent
    cpd.manual_seed(n(5))
    for bad in (8.7, 8.0, "8", True):
        with pytest.raises(TypeError, match="world_size"):
            cpd.aps("e4m3fn", bad)
        with pytest.raises(TypeError, match="world_size"):
            cpd.amax_sqrtw_scaling("e4m3fn", bad)
    for call in (lambda: cpd.predivide_scaling(2.5), lambda: cpd.fixed_scaling(1.5),
                 lambda: cpd.quantize(x, "e4m3fn", threads=1.0),
                 lambda: cpd.delayed_scaling("e4m3fn", history_length=10.5), lambda: cpd.manual_seed(2.5),
                 lambda: cpd.dynamic_loss_scaling(growth_interval=2.5), lambda: cpd.aps("e4m3fn", 2, margin=0.5)):
        with pytest.raises(TypeError, match="must be an int"):
            call()
    with pytest.raises(ValueError, match="world_size 0"):
        cpd.aps("e4m3fn", 0)


def test_select_and_combine_check_the_statistic():
    aps, amax = cpd.aps("e4m3fn", 8), cpd.current_scaling("e4m3fn")
    for st in (2**40, -2**40, 2**31):
        with pytest.raises(ValueError, match=f"statistic {st} is outside"):
            aps.select(st)
        with pytest.raises(ValueError, match="statistic"):
            aps.combine(st, 0)
    with pytest.raises(TypeError, match="statistic must be an int"):
        aps.select(2.5)
    with pytest.raises(TypeError, match="statistic must be a float"):
        amax.select("1")
    assert amax.select(np.float32(2.0)).value == amax.select(2.0).value


def test_simulate_allreduce_refuses_a_scaler_made_for_another_exchange():
    grads = [RNG.standard_normal(50).astype(np.float32) for _ in range(4)]
    with pytest.raises(ValueError, match="format e5m2; the exchange sums in e4m3fn"):
        cpd.simulate_allreduce(grads, "e4m3fn", scaler=cpd.aps("e5m2", 4))
    with pytest.raises(ValueError, match="8 workers; the exchange has 4"):
        cpd.simulate_allreduce(grads, "e4m3fn", scaler=cpd.aps("e4m3fn", 8))
    with pytest.raises(ValueError, match="2 workers; the exchange has 4"):
        cpd.simulate_allreduce(grads, "e4m3fn", scaler=cpd.predivide_scaling(2))
    # the same format by another name, and scalers that name no format, are fine
    a, _ = cpd.simulate_allreduce(grads, "e4m3fn", scaler=cpd.aps("float8_e4m3fn", np.int64(4)))
    b, _ = cpd.simulate_allreduce(grads, "float8_e4m3fn", scaler="aps")
    assert same_floats(a, b)
    cpd.simulate_allreduce(grads, "e4m3fn", scaler=cpd.fixed_scaling(2))


def test_the_names_and_counters_are_the_cpp_librarys():
    # cpd::from_string's names, cpd::simulated_algorithms, cpd::value_stats_fields: one list each
    assert cpd.roundings == ("nearest_even", "nearest_away", "toward_zero", "upward", "downward", "stochastic", "odd",
                             "nearest_zero")
    assert cpd.algorithms == ("sequential", "ring", "halving_doubling", "pipelined_ring", "two_step", "all_gather")
    assert cpd.value_stats_fields == ("count", "zeros", "underflow", "overflow", "nan", "saturated", "nan_inputs",
                                      "inf_inputs")
    x = np.float32([0, 1e-30, 3e38, np.nan, np.inf, 1.0])
    _, counts = cpd.quantize(x, "e4m3fn", stats=True)
    assert tuple(counts) == cpd.value_stats_fields
    assert (counts["zeros"], counts["underflow"], counts["nan_inputs"], counts["inf_inputs"]) == (1, 1, 1, 1)
    with pytest.raises(ValueError, match="'nearest' is not one of nearest_even, nearest_away, toward_zero"):
        cpd.quantize(x, "e4m3fn", rounding="nearest")
    with pytest.raises(ValueError, match="'x' is not one of max, most_recent"):
        cpd.delayed_scaling("e4m3fn", amax_algorithm="x")
    with pytest.raises(ValueError, match="'round' is not one of floor, ceil, rceil, even"):
        cpd.mx_quantize(x, "e4m3fn", rule="round")
    g = [np.ones(8, np.float32)] * 2
    with pytest.raises(ValueError, match="'zigzag' is not one of sequential, ring, halving_doubling, pipelined_ring"):
        cpd.simulate_allreduce(g, "e4m3fn", algorithm="zigzag")
    # native is MPI's own order: the simulation refuses it by name, before the scaler's select
    loss = cpd.dynamic_loss_scaling(init_scale=1024.0, growth_interval=1)
    with pytest.raises(ValueError, match="algorithm native is not one the simulation runs .sequential, ring,"):
        cpd.simulate_allreduce(g, "e4m3fn", scaler=loss, algorithm="native")
    assert loss.select(0).value == 2048.0  # (the refused call did not update it)


def test_a_refused_simulation_leaves_a_stateful_scaler_as_it_was():
    # the simulation takes power-of-two scales: loss and delayed scaling are refused before
    # their select runs, so that a refused call does not move GradScaler's scale or the history
    g = [np.full(8, 0.5, np.float32)] * 2
    loss = cpd.dynamic_loss_scaling(init_scale=1024.0, growth_interval=1)
    with pytest.raises(ValueError, match="the scaler dynamic_loss_scaling selects float scales; the simulation"):
        cpd.simulate_allreduce(g, "e4m3fn", scaler=loss)
    assert loss.select(0).value == 2048.0
    delayed = cpd.delayed_scaling("e4m3fn")
    with pytest.raises(ValueError, match="the scaler delayed_scaling selects float scales"):
        cpd.simulate_allreduce(g, "e4m3fn", scaler=delayed)
    assert delayed.select(0.0).value == 1.0  # (no amax of an earlier step in its history)
    # a call refused for its rounding or format leaves the scaler's state too
    with pytest.raises(ValueError, match="rounds nearest_even or stochastic, not odd"):
        cpd.simulate_allreduce(g, "e4m3fn", scaler=loss, rounding="odd")
    with pytest.raises(ValueError, match="format e6m9 is not compiled into the package"):
        cpd.simulate_allreduce(g, "e6m9", scaler=loss)
    assert loss.select(0).value == 4096.0


def test_decode_takes_every_scale_exponent_that_quantize_and_encode_take():
    x = np.concatenate([wide_floats(3000), np.float32([3.4028235e38, -3e38, 1e-45, np.inf, -np.inf, np.nan])])
    for fmt in ("e4m3fn", "e5m2", "e2m1fn", "e3m2fn", "e8m0fnu", "bf16", "fp16"):
        for k in (0, 30, -30, 141, -120, 200, -200, 1000, -1000, 1100, -1100):
            try:
                q = cpd.quantize(x, fmt, scale_exponent=k)
            except ValueError as e:  # out of double's range: all three refuse alike
                assert "scale_exponent" in str(e)
                with pytest.raises(ValueError, match="scale_exponent"):
                    cpd.encode(x, fmt, scale_exponent=k)
                with pytest.raises(ValueError, match="scale_exponent"):
                    cpd.decode(np.zeros(3, np.uint8), fmt, scale_exponent=k)
                continue
            got = cpd.decode(cpd.encode(x, fmt, scale_exponent=k), fmt, scale_exponent=k)
            keep = ~np.isnan(x) | cpd.finfo(fmt).has_nan  # (a NaN has no code in e2m1fn: encode reports it)
            assert same_floats(got[keep], q[keep]), (fmt, k)
    # values beyond float's range round as a float conversion does: 448 * 2^120 is inf; 2^-150 a
    # tie between 0 and 2^-149 (to 0, even), 3 * 2^-150 between 2^-149 and 2^-148 (to 2^-148)
    assert same_floats(cpd.decode(np.uint8([0x7E, 0xFE, 0x38]), "e4m3fn", scale_exponent=-120),
                       np.float32([np.inf, -np.inf, 2.0**120]))
    assert same_floats(cpd.decode(np.uint8([1, 2, 3, 0x81]), "e4m3fn", scale_exponent=141),
                       np.float32([0.0, 2.0**-149, 2.0**-148, -0.0]))
    assert same_floats(cpd.decode(np.uint8([0x7F]), "e4m3fn", scale_exponent=141), np.float32([np.nan]))


# --- subnormals="flush" and variant= ----------------------------------------------------

def _f16(x):
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def flush_reference(x):
    """binary16 without subnormals, nearest_even, from numpy's float16 cast and the definition:
    below 2^-14 a value goes to 0 or to 2^-14, the midpoint 2^-15 to 0 (MPFR's convention)."""
    x = np.asarray(x, dtype=np.float32)
    ref = _f16(x)  # numpy's cast (beyond 65520: inf, as binary16)
    a = np.abs(x.astype(np.float64))
    tiny = a < 2.0 ** -14
    ref[tiny] = np.where(a[tiny] > 2.0 ** -15, np.copysign(np.float32(2.0 ** -14), x[tiny]),
                         np.copysign(np.float32(0), x[tiny]))
    return ref


def test_flush_subnormals_against_numpy_and_the_definition():
    x = np.concatenate([wide_floats(20000), np.float32([2.0 ** -15, -2.0 ** -15, 2.0 ** -16, 3 * 2.0 ** -16,
                                                       np.nextafter(np.float32(2.0 ** -15), np.float32(1))]),
                        (RNG.uniform(-1, 1, 5000) * 2.0 ** -13).astype(np.float32)])
    got, counts = cpd.quantize(x, "fp16", subnormals="flush", stats=True)
    assert same_floats(got, flush_reference(x))
    want_zeros = int(np.sum((np.abs(x) <= 2.0 ** -15) & (x != 0)))
    assert counts["underflow"] == want_zeros
    # the codes are binary16's: a flushed result is 0 or the smallest normal's code
    codes = cpd.encode(x, "fp16", subnormals="flush")
    assert same_floats(codes.view(np.float16).astype(np.float32), got)
    # keep is the default and unchanged: binary16's subnormals
    assert same_floats(cpd.quantize(x, "fp16"), _f16(x))
    # upward: everything in (0, 2^-14) goes to 2^-14
    up = cpd.quantize(np.float32([1e-7, -1e-7]), "fp16", rounding="upward", subnormals="flush")
    assert up[0] == np.float32(2.0 ** -14) and up[1] == 0 and np.signbit(up[1])


def test_variant_and_subnormals_names_and_errors():
    assert "equal" in cpd.stochastic_variants and list(cpd.subnormal_modes) == ["keep", "flush"]
    x = np.full(20000, 1.0125, dtype=np.float32)  # a tenth of an ulp of E4M3 above 1
    ups = {v: float(np.mean(cpd.quantize(x, "e4m3fn", "stochastic", seed=3, variant=v) > 1)) for v in ("a", "equal")}
    assert abs(ups["a"] - 0.1) < 0.02 and abs(ups["equal"] - 0.5) < 0.03
    with pytest.raises(ValueError, match="subnormal_mode"):
        cpd.quantize(x, "e4m3fn", subnormals="ftz")
    with pytest.raises(ValueError, match="stochastic_variant"):
        cpd.quantize(x, "e4m3fn", "stochastic", seed=1, variant="d")
    with pytest.raises(ValueError, match="posit"):
        cpd.quantize(x, "posit8es0", subnormals="flush")


def unbounded_reference(x):
    """float32 rounded to 11 significant bits (binary16's precision) with float32's exponent
    range, nearest_even, from the definition: above 2^-126 by integer arithmetic on the bits
    (a carry into the exponent field of 255 is inf), below it to multiples of 2^-136."""
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    mag = u & 0x7FFFFFFF
    rounded = (mag + 0xFFF + ((mag >> 13) & 1)) & ~np.uint64(0x1FFF)
    big = ((u & 0x80000000) | rounded).astype(np.uint32).view(np.float32)
    small = (np.round(x.astype(np.float64) * 2.0 ** 136) * 2.0 ** -136).astype(np.float32)
    small = np.copysign(small, x)
    return np.where(np.abs(x) < np.float32(2.0 ** -126), small, big)


def test_unbounded_exponent_range_against_the_definition():
    x = wide_floats(30000)
    x = x[np.isfinite(x)]
    got, counts = cpd.quantize(x, "fp16", exponents="unbounded", stats=True)
    assert same_floats(got, unbounded_reference(x))
    assert counts["overflow"] == int(np.sum(np.isinf(unbounded_reference(x))))
    # inside binary16's normal range it is binary16's rounding
    inside = x[(np.abs(x) >= 2.0 ** -14) & (np.abs(x) < 65504)]
    assert same_floats(cpd.quantize(inside, "fp16", exponents="unbounded"), _f16(inside))
    assert "unbounded" in cpd.exponent_ranges
    with pytest.raises(ValueError, match="posit"):
        cpd.quantize(x, "posit16es1", exponents="unbounded")
    with pytest.raises(ValueError, match="exponent_range"):
        cpd.quantize(x, "fp16", exponents="infinite")
    with pytest.raises(ValueError, match="scale_exponent"):
        cpd.quantize(x, "fp16", exponents="unbounded", scale_exponent=2)
