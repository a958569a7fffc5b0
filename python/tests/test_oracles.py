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

