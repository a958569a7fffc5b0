# SPDX-License-Identifier: MIT
"""Posits in the package (cpd.quantize/encode/decode/finfo with "posit<n>es<es>") against
SoftPosit (PyPI, scripts/oracles.txt: posit8es0, posit16es1 every code and every midpoint;
posit32es2 and posit<n>es2 through posit_2 at random) and against a decoder written here
from the Posit Standard 2022 with exact fractions. Where SoftPosit is missing its tests
skip, except under CI=true, where they fail."""

import math
from fractions import Fraction

import numpy as np
import pytest

import cpd
from oracle import oracle


def ref_value(n, es, code):
    """The value of a code by the standard's definition: None for NaR."""
    code &= (1 << n) - 1
    if code == 0:
        return Fraction(0)
    if code == 1 << (n - 1):
        return None
    neg = code >> (n - 1)
    if neg:
        code = (1 << n) - code
    bits = [(code >> i) & 1 for i in range(n - 2, -1, -1)]
    run = 1
    while run < len(bits) and bits[run] == bits[0]:
        run += 1
    k = run - 1 if bits[0] else -run
    rest = bits[run + 1:]
    e = 0
    for j in range(es):
        e = 2 * e + (rest[j] if j < len(rest) else 0)
    frac = rest[es:]
    f = Fraction(int("".join(map(str, frac)) or "0", 2), 2 ** len(frac))
    v = (1 + f) * Fraction(2) ** (k * 2 ** es + e)
    return -v if neg else v


def midpoint_inputs(n, es):
    """Doubles at, just below and just above every midpoint (the (n+1)-bit posit between two
    positive codes), both signs."""
    mids = np.array([float(ref_value(n + 1, es, 2 * c + 1)) for c in range(1, (1 << (n - 1)) - 1)])
    xs = np.concatenate([mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf)])
    return np.concatenate([xs, -xs])


@pytest.mark.parametrize("n,es", [(n, es) for n in (3, 5, 8, 11, 16) for es in range(4)])
def test_decode_every_code_against_the_standard(n, es):
    codes = np.arange(1 << n, dtype=np.uint32)
    got = cpd.decode(codes, f"posit{n}es{es}", dtype="float64")
    for c in range(1 << n):
        want = ref_value(n, es, c)
        assert (math.isnan(got[c]) if want is None else Fraction(float(got[c])) == want), (n, es, c)


def softposit_pairs(sp):
    return [("posit8es0", 8, sp.convertDoubleToP8, sp.convertP8ToDouble),
            ("posit16es1", 16, sp.convertDoubleToP16, sp.convertP16ToDouble)]


@pytest.mark.parametrize("which", [0, 1])
def test_every_code_and_midpoint_against_softposit(which):
    sp = oracle("softposit")
    name, n, to_posit, to_double = softposit_pairs(sp)[which]
    codes = np.arange(1 << n, dtype=np.uint16)
    got = cpd.decode(codes, name, dtype="float64")
    for c in range(1 << n):
        p = to_posit(0.0)
        p.v = c
        want = to_double(p)
        assert got[c] == want or (math.isnan(got[c]) and (math.isnan(want) or math.isinf(want))), (name, c)
    xs = midpoint_inputs(n, 0 if n == 8 else 1)
    enc = cpd.encode(xs, name)
    want = np.array([to_posit(float(x)).v for x in xs])
    bad = np.nonzero(enc.astype(np.int64) != want)[0]
    assert bad.size == 0, [(xs[i], int(enc[i]), int(want[i])) for i in bad[:10]]
    q32 = cpd.quantize(xs.astype(np.float32), name)  # float32 inputs too (every value of these is a float)
    want32 = np.array([to_double(to_posit(float(x))) for x in xs.astype(np.float32)], dtype=np.float32)
    assert np.array_equal(q32, want32)


def test_posit32es2_random_against_softposit():
    sp = oracle("softposit")
    rng = np.random.default_rng(32)
    count = 1_000_000
    xs = np.ldexp(rng.uniform(1, 2, count), rng.integers(-125, 125, count)) * rng.choice([-1.0, 1.0], count)
    enc = cpd.encode(xs, "posit32es2")
    f = sp.convertDoubleToP32
    want = np.fromiter((f(x).v for x in xs.tolist()), dtype=np.uint32, count=count)
    bad = np.nonzero(enc != want)[0]
    assert bad.size == 0, [(xs[i], int(enc[i]), int(want[i])) for i in bad[:10]]
    codes = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    got = cpd.decode(codes, "posit32es2", dtype="float64")
    p = sp.convertDoubleToP32(0.0)
    for c, g in zip(codes.tolist(), got.tolist()):
        p.v = c
        w = sp.convertP32ToDouble(p)
        assert g == w or (math.isnan(g) and (math.isnan(w) or math.isinf(w))), c


@pytest.mark.parametrize("n", [5, 9, 12, 20, 24, 28])
def test_posit_n_es2_random_against_softposit_posit_2(n):
    sp = oracle("softposit")
    rng = np.random.default_rng(n)
    count = 50_000
    xs = np.ldexp(rng.uniform(1, 2, count), rng.integers(-4 * n, 4 * n, count)) * rng.choice([-1.0, 1.0], count)
    enc = cpd.encode(xs, f"posit{n}es2")
    want = np.array([sp.convertDoubleToPX2(x, n).v >> (32 - n) for x in xs.tolist()], dtype=np.uint32)
    bad = np.nonzero(enc.astype(np.uint32) != want)[0]
    assert bad.size == 0, [(xs[i], int(enc[i]), int(want[i])) for i in bad[:10]]


def test_finfo_of_posits():
    f = cpd.finfo("posit16es1")
    assert (f.name, f.bits, f.es, f.nmant) == ("posit16es1", 16, 1, 12)
    assert f.max == 2.0 ** 28 and f.min == -(2.0 ** 28) and f.tiny == 2.0 ** -28
    assert f.smallest_subnormal == f.tiny and not f.has_subnormals and not f.has_inf and f.has_nan
    assert f.eps == 2.0 ** -12 and f.epsneg == 2.0 ** -13
    # eps and epsneg from the standard's decoder: the posits next to 1
    for name, n, es in (("posit8es0", 8, 0), ("posit8es2", 8, 2), ("posit32es2", 32, 2), ("posit4es3", 4, 3)):
        g = cpd.finfo(name)
        one = 1 << (n - 2)
        assert Fraction(g.eps) == ref_value(n, es, one + 1) - 1
        assert Fraction(g.epsneg) == 1 - ref_value(n, es, one - 1)
        assert Fraction(g.max) == ref_value(n, es, (1 << (n - 1)) - 1)
        assert Fraction(g.tiny) == ref_value(n, es, 1)
    assert cpd.finfo("posit32es2").max == 2.0 ** 120


def test_posit_calls_round_trip_and_errors():
    x = np.array([0.0, 1.0, -2.5, 1e-40, 1e40, np.inf, np.nan], dtype=np.float64)
    q, st = cpd.quantize(x, "posit8es2", stats=True)
    assert q[1] == 1.0 and q[2] == -2.5 and q[3] == 2.0 ** -24 and q[4] == 2.0 ** 24
    assert np.isnan(q[5]) and np.isnan(q[6])
    assert st["overflow"] == 1 and st["nan_inputs"] == 1 and st["inf_inputs"] == 1 and st["underflow"] == 0
    codes = cpd.encode(x, "posit8es2")
    assert codes.dtype == np.uint8 and codes[5] == 0x80 and codes[0] == 0
    assert np.array_equal(cpd.decode(codes, "posit8es2", dtype="float64"), q, equal_nan=True)
    s1 = cpd.quantize(np.full(1000, 1.1), "posit8es0", "stochastic", seed=5)
    s2 = cpd.quantize(np.full(1000, 1.1), "posit8es0", "stochastic", seed=5)
    assert np.array_equal(s1, s2) and set(s1.tolist()) == {1.09375, 1.125}  # posit8es0 has 5 fraction bits at 1
    with pytest.raises(ValueError, match="posit32es2 has values that are not float32 values"):
        cpd.quantize(np.ones(3, np.float32), "posit32es2")
    with pytest.raises(ValueError, match="say the exponent bits"):
        cpd.finfo("posit16")
    with pytest.raises(ValueError, match="scale_exponent 2 is not yet supported for posits"):
        cpd.quantize(np.ones(3), "posit16es1", scale_exponent=2)
    with pytest.raises(TypeError, match="posits take float32 or float64 values, not float16"):
        cpd.quantize(np.ones(3, np.float16), "posit16es1")


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    t = torch.tensor([0.3, -7.0, 1e-3], dtype=torch.float32)
    q = cpd.quantize(t, "posit16es1")
    assert isinstance(q, torch.Tensor) and q.dtype == torch.float32
    assert np.array_equal(q.numpy(), cpd.quantize(t.numpy(), "posit16es1"))
