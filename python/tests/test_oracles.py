# SPDX-License-Identifier: MIT
"""cpd against test oracles from PyPI (scripts/oracles.txt, installed into build/venv by
scripts/venv.sh): cpd.finfo against ml_dtypes.finfo, every field both define, for every
format both know. Where an oracle is missing the test skips, except under CI=true, where
it fails (CI installs every oracle; a skip there would be a test that cannot fail)."""

import math

import numpy as np
import pytest

import cpd
from oracle import oracle


FORMATS = ["float8_e4m3fn", "float8_e4m3", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz",
           "float8_e3m4", "float8_e8m0fnu", "float6_e3m2fn", "float6_e2m3fn", "float4_e2m1fn", "bfloat16", "float16"]
FIELDS = ["bits", "max", "min", "tiny", "smallest_normal", "smallest_subnormal", "eps", "epsneg", "resolution",
          "precision", "nexp", "nmant", "iexp", "maxexp", "minexp", "machep", "negep"]


def ml_finfo(ml, name):
    return np.finfo(np.float16) if name == "float16" else ml.finfo(getattr(ml, name))


def known(ml, name):
    return name == "float16" or hasattr(ml, name)


def differences(name, ours, theirs):
    """The fields where cpd and the oracle differ: 'field: cpd X, ml_dtypes Y'."""
    out = []
    for f in FIELDS:
        if not hasattr(theirs, f):
            continue
        a, b = getattr(ours, f), getattr(theirs, f)
        if float(a) != float(b):
            out.append(f"{name}.{f}: cpd {float(a)!r}, ml_dtypes {float(b)!r}")
    return out


def test_finfo_matches_ml_dtypes():
    ml = oracle("ml_dtypes")
    compared = [n for n in FORMATS if known(ml, n)]
    assert len(compared) >= 12, compared  # (ml_dtypes 0.5 has every format of the list)
    bad = []
    for name in compared:
        ours, theirs = cpd.finfo(name), ml_finfo(ml, name)
        for line in differences(name, ours, theirs):
            field = line.split(":")[0].split(".")[-1]
            # ml_dtypes, not cpd: its float8 types (and E8M0) hard-code precision = 1 where numpy's
            # definition, int(-log10(eps)), gives 0 (eps 2^-3 for e4m3: -log10 = 0.90; 2^-2 for e5m2;
            # 1 for e8m0). Its float6/float4 types follow numpy (e2m3fn, eps 2^-3 as e4m3: 0), as does
            # numpy's own float16 (3). resolution = 10^-precision in the format follows from it:
            # checked below against that rule on both sides, not skipped.
            if field in ("precision", "resolution") and theirs.precision == 1 and ours.precision == 0 and \
                    int(-math.log10(float(theirs.eps))) == 0:
                continue
            bad.append(line)
    assert not bad, "cpd.finfo differs from ml_dtypes.finfo:\n" + "\n".join(bad)
    for name in compared:  # precision as numpy defines it; resolution = 10^-precision rounded to the format
        ours, theirs = cpd.finfo(name), ml_finfo(ml, name)
        assert ours.precision == int(-math.log10(ours.eps)), name
        dtype = theirs.dtype
        assert ours.resolution == float(np.array(10.0 ** -ours.precision).astype(dtype)), name
        assert float(theirs.resolution) == float(np.array(10.0 ** -theirs.precision).astype(dtype)), name



# torchao's MX scale rules (torchao/prototype/mx_formats/mx_tensor.py, to_mx), restated here in
# NumPy on the float32 bits: element name -> (cpd name, mantissa bits, emax, max).
MX_ELEMENTS = {"float8_e4m3fn": ("e4m3fn", 3, 8, 448.0), "float8_e5m2": ("e5m2", 2, 15, 57344.0),
               "float6_e3m2fn": ("e3m2fn", 2, 4, 28.0), "float6_e2m3fn": ("e2m3fn", 3, 2, 7.5),
               "float4_e2m1fn": ("e2m1fn", 1, 2, 6.0)}


def torchao_scale_exponent(amax, rule, mbits, emax, max_pos):
    """The unbiased E8M0 exponent torchao's to_mx gives a block of largest magnitude amax (a
    finite np.float32 > 0), or None where cpd differs by design: torchao's NaN scale for a
    finite block (even), its descale rounded to float32's subnormal steps (rceil)."""
    if rule == "rceil":  # _f32_to_e8m0_rceil(max_abs * (1 / max_pos)), in float32
        d = np.float32(amax) * np.float32(1.0 / max_pos)
        if d < np.float32(2.0 ** -126):
            return None  # a subnormal descale: torchao rounds it to 2^-149 steps (cpd: exact, docs/scaling.md)
        b = int(np.array(d, np.float32).view(np.uint32))
        exp, man = (b >> 23) & 0xFF, b & 0x7FFFFF
        return exp + (man > 0x400000 if exp == 0 else man != 0) - 127
    b = int(np.array(amax, np.float32).view(np.uint32))
    if rule == "even":  # round the mantissa to mbits, halves up, on the bits
        b = (b + (1 << (23 - mbits - 1))) & 0xFF800000
        if (b >> 23) == 0xFF:
            return None  # amax rounded to inf: torchao's NaN scale (cpd clamps, docs/scaling.md)
    e = ((b >> 23) & 0xFF) - 127
    if rule == "ceil":
        e += (b & 0x7FFFFF) > 0
    return max(-127, min(127, e - emax))


def mx_blocks(mbits, max_pos, rng):
    """Blocks of 32 float32 values whose amax sit on and beside each rule's boundaries."""
    tops = []
    for k in range(-140, 128, 3):
        for base in (1.0, 2.0 - 2.0 ** -(mbits + 1), max_pos / 2 ** math.floor(math.log2(max_pos)), 1.5):
            tops.append(np.float32(math.ldexp(base, k)) if math.ldexp(base, k) < 3.4e38 else None)
    blocks = []
    for t in tops:
        if t is None or not np.isfinite(t) or t == 0:
            continue
        for step in (-1, 0, 1):  # the value itself and its float32 neighbours
            a = np.nextafter(t, np.float32(np.inf if step > 0 else 0)) if step else t
            if not np.isfinite(a) or a == 0:
                continue
            blk = (rng.uniform(-1, 1, 32) * a).astype(np.float32)
            blk[rng.integers(32)] = a if rng.integers(2) else -a
            blocks.append(blk)
    return np.concatenate(blocks)


@pytest.mark.parametrize("rule", ["floor", "ceil", "even", "rceil"])
@pytest.mark.parametrize("element", sorted(MX_ELEMENTS))
def test_mx_quantize_matches_torchao_rules(element, rule):
    ml = oracle("ml_dtypes")
    name, mbits, emax, max_pos = MX_ELEMENTS[element]
    x = mx_blocks(mbits, max_pos, np.random.default_rng(31))
    ours = cpd.mx_quantize(x, name, block_size=32, rule=rule)
    elem = getattr(ml, element)
    checked = 0
    for b in range(0, x.size, 32):
        blk = x[b:b + 32]
        e = torchao_scale_exponent(np.abs(blk).max(), rule, mbits, emax, max_pos)
        if e is None:
            continue
        lp = np.clip(blk * np.float32(2.0 ** -e), -max_pos, max_pos)  # float32 product, saturating
        with np.errstate(over="ignore"):  # (4 * 2^126 of e2m1 is 2^128: inf in float32, in both)
            want = lp.astype(elem).astype(np.float32) * np.float32(2.0 ** e)
        assert np.array_equal(ours[b:b + 32], want), (element, rule, float(np.abs(blk).max()), e)
        checked += 1
    assert checked > 250
