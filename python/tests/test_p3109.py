# SPDX-License-Identifier: MIT
"""IEEE P3109 binary{K}p{P} (signed/unsigned, finite/extended) against gfloat (Graphcore),
which implements the interim report in Python: every code decodes to gfloat's value; every
value, midpoint, quarter point and a double ulp either side of them, and values beyond the
largest, round to gfloat's value and code in every rounding mode, saturating or not; stochastic
rounding in the report's variants A, B and C (gfloat's StochasticFastest, StochasticFast and
Stochastic) with every random number of up to 3 bits and random ones of up to 13; finfo against
gfloat's and, for the two formats ml_dtypes names (binary8p4sf = float8_e4m3fnuz, binary8p3sf =
float8_e5m2fnuz), against ml_dtypes'.

Where gfloat and the report differ cpd follows the report (docs/formats.md, "IEEE P3109"), and
these tests check the report's rule instead: an overflow in the finite domain without
saturation is +-max (gfloat: NaN); a negative value in an unsigned format is 0, or NaN where
the report's SatNone says so (gfloat keeps the sign, or turns -inf into +inf); epsneg where 1
is the smallest normal is the subnormal spacing (gfloat: eps / 2). TiesToAway one double ulp
below a midpoint rounds toward zero: gfloat's vectorized round_ndarray, the oracle here, does so
(its scalar round_float, nu + 0.5 >= 1 in double, rounds up)."""

import math

import numpy as np
import pytest
from oracle import oracle

import cpd


def p3109_formats(kmin=3, kmax=8):
    """(cpd name, K, P, signed, extended) of every format whose exponent field fits 11 bits."""
    out = []
    for k in range(kmin, kmax + 1):
        for signed in (True, False):
            for p in range(1, (k - 1 if signed else k) + 1):
                if (k - p if signed else k - p + 1) > 11:
                    continue
                for extended in (True, False):
                    out.append((f"binary{k}p{p}{'s' if signed else 'u'}{'e' if extended else 'f'}", k, p, signed,
                                extended))
    return out


FORMATS = p3109_formats()
IDS = [f[0] for f in FORMATS]


class G:
    """gfloat's names, once it is imported (an oracle: skip, or fail under CI=true)."""

    def __init__(self):
        g = oracle("gfloat")
        from gfloat.formats import format_info_p3109
        from gfloat.types import Domain, Signedness
        self.g, self.Domain, self.RoundMode = g, Domain, g.RoundMode
        self._fi, self._s = format_info_p3109, Signedness
        R = g.RoundMode
        self.modes = {R.TowardZero: "toward_zero", R.TowardPositive: "upward", R.TowardNegative: "downward",
                      R.TiesToAway: "nearest_away", R.TiesToEven: "nearest_even"}
        self.variants = {"a": R.StochasticFastest, "b": R.StochasticFast, "c": R.Stochastic}

    def fi(self, k, p, signed, extended):
        return self._fi(k, p, self._s.Signed if signed else self._s.Unsigned,
                        self.Domain.Extended if extended else self.Domain.Finite)


def values(g, fi):
    """The finite values of fi, ascending."""
    v = {g.g.decode_float(fi, c).fval for c in range(2 ** fi.k)}
    return sorted(x for x in v if math.isfinite(x))


def inputs(g, fi):
    v = values(g, fi)
    xs = []
    for i, a in enumerate(v):
        pts = [a]
        if i + 1 < len(v):
            b = v[i + 1]
            pts += [(a + b) / 2, a + (b - a) / 4, a + 3 * (b - a) / 4]
        for x in pts:
            xs += [x, math.nextafter(x, -math.inf), math.nextafter(x, math.inf)]
    hi, ulp = v[-1], v[-1] - v[-2]
    xs += [hi + ulp / 2, hi + ulp, 2 * hi, 1e300, math.inf, math.nan]
    if fi.is_signed:
        xs += [-x for x in xs]
    else:  # (gfloat keeps the sign of a negative input to an unsigned format: the report's rule is tested below)
        xs = [x for x in xs if not x < 0]
    return np.array(xs, dtype=np.float64)


def report_rounding(g, fi, xs, mode, sat):
    """gfloat's rounding of the array xs: round_ndarray, and round_float for infinities and NaN.
    (For TiesToAway one double ulp below a midpoint, gfloat 0.5.2's round_float tests
    nu + 0.5 >= 1 in double, which rounds up; round_ndarray, like the report, tests nu >= 0.5.)"""
    fin = np.isfinite(xs)
    out = np.empty_like(xs)
    out[~fin] = [g.g.round_float(fi, x, mode, sat) for x in xs[~fin].tolist()]
    out[fin] = g.g.round_ndarray(fi, xs[fin], mode, sat)
    return out


def same(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return bool(np.all((np.isnan(a) & np.isnan(b)) | (a == b)))


@pytest.mark.parametrize("name,k,p,s,e", FORMATS, ids=IDS)
def test_every_code_decodes_to_gfloat(name, k, p, s, e):
    g = G()
    fi = g.fi(k, p, s, e)
    codes = np.arange(2 ** fi.k, dtype=np.uint8 if fi.k <= 8 else np.uint16)
    ours = cpd.decode(codes, name, dtype=np.float64)
    want = np.array([g.g.decode_float(fi, int(c)).fval for c in codes], dtype=np.float64)
    assert same(ours, want)
    zero_sign = np.signbit(ours[(ours == 0)])
    assert not zero_sign.any()  # P3109 has no -0


@pytest.mark.parametrize("name,k,p,s,e", FORMATS, ids=IDS)
def test_rounding_as_gfloat(name, k, p, s, e):
    g = G()
    fi = g.fi(k, p, s, e)
    xs = inputs(g, fi)
    hi = fi.max
    for mode, rounding in g.modes.items():
        for sat in (False, True):
            overflow = "saturate" if sat else "infinity"
            want = report_rounding(g, fi, xs, mode, sat)
            if not sat and not e:  # the report: SatNone in the finite domain gives +-max (gfloat: NaN)
                over = np.isnan(want) & ~np.isnan(xs)
                want[over] = np.copysign(hi, xs[over])
            got = cpd.quantize(xs, name, rounding=rounding, overflow=overflow)
            ok = (np.isnan(got) & np.isnan(want)) | (got == want)
            bad = list(zip(xs[~ok].tolist(), got[~ok].tolist(), want[~ok].tolist()))
            assert not bad, f"{name} {rounding} {overflow}: (x, cpd, gfloat) {bad[:5]}"
            codes = cpd.encode(xs, name, rounding=rounding, overflow=overflow)
            assert codes.tolist() == g.g.encode_ndarray(fi, want).tolist(), f"{name} {rounding} {overflow}"


@pytest.mark.parametrize("name,k,p,s,e", [f for f in FORMATS if f[1] in (3, 6, 8)],
                         ids=[f[0] for f in FORMATS if f[1] in (3, 6, 8)])
def test_stochastic_variants_as_gfloat(name, k, p, s, e):
    g = G()
    fi = g.fi(k, p, s, e)
    v = values(g, fi)
    rng = np.random.default_rng(fi.k * 100 + fi.precision)
    xs = []
    pairs = list(zip(v[:-1], v[1:]))
    if len(pairs) > 48:  # the first and last gaps, and 46 others at random
        pairs = [pairs[0], pairs[-1]] + [pairs[i] for i in rng.choice(len(pairs) - 2, 46, replace=False) + 1]
    for a, b in pairs:
        xs += [a + (b - a) * j / 16 for j in (1, 5, 8, 11, 15)]
    xs += [float(x) for x in rng.choice(v[:-1], 20)]  # values themselves: exact
    idx = rng.integers(0, len(v) - 1, 40)
    xs += [v[i] + (v[i + 1] - v[i]) * float(u) for i, u in zip(idx.tolist(), rng.random(40))]
    if fi.is_signed:
        xs += [-x for x in xs]
    for variant, mode in g.variants.items():
        for n in (1, 2, 3, 5, 13):
            rs = range(2 ** n) if n <= 3 else [int(r) for r in rng.integers(0, 2 ** n, 4)]
            for x in xs:
                for r in rs:
                    want = g.g.round_float(fi, x, mode, True, r, n)
                    got = cpd._cpd.scalar_quantize(name, "stochastic", "saturate", x, r, n, variant, False)
                    assert same(got, want), f"{name} {variant} N={n} R={r} x={x!r}: cpd {got}, gfloat {want}"


@pytest.mark.parametrize("name,k,p,s,e", FORMATS, ids=IDS)
def test_report_rules_where_gfloat_differs(name, k, p, s, e):
    hi = cpd.finfo(name).max
    big = np.array([2 * hi, math.inf], dtype=np.float64)
    if not e:  # SatNone saturates in the finite domain
        assert same(cpd.quantize(big, name, overflow="infinity"), [hi, hi])
    else:
        assert same(cpd.quantize(big, name, overflow="propagate"), [hi, math.inf])
    if not s:
        neg = np.array([-1.0, -math.inf, -1e-300, -0.0], dtype=np.float64)
        assert same(cpd.quantize(neg, name, overflow="saturate"), [0, 0, 0, 0])
        assert same(cpd.quantize(neg, name, overflow="propagate"), [0, 0, 0, 0])
        assert same(cpd.quantize(neg, name, overflow="infinity"), [math.nan, math.nan, 0, 0])
        assert same(cpd.quantize(neg, name, rounding="toward_zero"), [0, math.nan, 0, 0])
        assert cpd.encode(neg, name).tolist()[:2] == [2 ** k - 1] * 2


@pytest.mark.parametrize("name,k,p,s,e", FORMATS, ids=IDS)
def test_finfo_as_gfloat(name, k, p, s, e):
    fi = G().fi(k, p, s, e)
    f = cpd.finfo(name)
    assert f.name == name
    assert f.bits == fi.bits
    assert f.max == fi.max
    assert f.tiny == f.smallest_normal == fi.smallest_normal
    assert f.smallest_subnormal == fi.smallest_subnormal
    assert f.eps == fi.eps
    assert f.min == fi.min
    if fi.smallest_normal < 1:
        assert f.epsneg == fi.epsneg
    else:  # 1 is the smallest normal: the value below it is 1 - the subnormal spacing
        assert f.epsneg == fi.smallest_subnormal
    assert f.has_inf == e
    assert f.has_nan and not f.has_negative_zero


@pytest.mark.parametrize("name,dtype", [("binary8p4sf", "float8_e4m3fnuz"), ("binary8p3sf", "float8_e5m2fnuz")])
def test_finfo_and_values_as_ml_dtypes(name, dtype):
    ml_dtypes = oracle("ml_dtypes")
    t = getattr(ml_dtypes, dtype)
    f, m = cpd.finfo(name), ml_dtypes.finfo(t)
    # (not precision: ml_dtypes' float8 types hard-code 1 where numpy's definition gives 0; test_oracles.py)
    for field in ("bits", "eps", "epsneg", "max", "min", "tiny", "smallest_normal", "smallest_subnormal",
                  "nmant", "nexp", "maxexp", "minexp", "machep", "negep"):
        assert float(getattr(f, field)) == float(getattr(m, field)), field
    codes = np.arange(256, dtype=np.uint8)
    assert same(cpd.decode(codes, name, dtype=np.float64), codes.view(t).astype(np.float64))
    x = np.random.default_rng(1).standard_normal(4096) * float(m.max) / 4
    assert same(cpd.quantize(x, name, overflow="saturate"), x.astype(t).astype(np.float64))
