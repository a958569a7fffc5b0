# SPDX-License-Identifier: MIT
"""NVFP4 in the package (cpd.nvfp4_quantize/encode/decode) against torchao's reference
formulas written here in NumPy float32 (nvfp4_quantize with a per-tensor scale), with
ml_dtypes' float8_e4m3fn and float4_e2m1fn casts as the roundings: no code shared with cpd."""

import numpy as np
import pytest

import cpd
from oracle import oracle

F32 = np.float32


def reference(x):
    """torchao's two-level NVFP4 of float32 x (n a multiple of 16 or not): (s, scales, codes, values)."""
    mld = oracle("ml_dtypes")
    x = np.asarray(x, dtype=F32).reshape(-1)
    n = x.size
    pad = (-n) % 16
    xp = np.concatenate([x, np.zeros(pad, F32)]).reshape(-1, 16)
    amax = np.max(np.abs(x)).astype(F32)
    s = F32(amax / F32(448.0 * 6.0))
    block_scale = (np.max(np.abs(xp), axis=1) / F32(6.0)).astype(F32)
    scaled = (block_scale / s).astype(F32)
    scaled = np.clip(scaled, F32(2.0 ** -6), F32(448.0)).astype(F32)
    b8 = scaled.astype(mld.float8_e4m3fn)
    b = b8.astype(F32)
    total = (s * b).astype(F32)
    d = np.clip((xp / total[:, None]).astype(F32), F32(-6.0), F32(6.0))
    q4 = d.astype(mld.float4_e2m1fn)
    codes = q4.view(np.uint8).reshape(-1)[:n] & 0xF
    values = (q4.astype(F32) * total[:, None]).astype(F32).reshape(-1)[:n]
    return s, b8.view(np.uint8), codes, values


def unpack(packed, n):
    lo, hi = packed & 0xF, packed >> 4
    return np.stack([lo, hi], axis=1).reshape(-1)[:n]


def check(x):
    s, scales, codes, values = reference(x)
    p, sc, ts = cpd.nvfp4_encode(x)
    assert np.float32(ts).view(np.uint32) == s.view(np.uint32)
    np.testing.assert_array_equal(sc, scales)
    np.testing.assert_array_equal(unpack(p, x.size), codes)
    q = cpd.nvfp4_quantize(x)
    np.testing.assert_array_equal(q.view(np.uint32), values.view(np.uint32))
    d = cpd.nvfp4_decode(p, sc, ts, x.size)
    np.testing.assert_array_equal(d.view(np.uint32), values.view(np.uint32))


def test_every_code_under_every_block_scale():
    mld = oracle("ml_dtypes")
    e2m1 = np.arange(16, dtype=np.uint8).view(mld.float4_e2m1fn).astype(F32)
    for amax in (F32(2688.0), F32(1.0), F32(3.7e-3), F32(123456.0)):
        s = F32(amax / F32(2688.0))
        for bc in range(0x08, 0x7F):
            factor = F32(s * np.array([bc], np.uint8).view(mld.float8_e4m3fn).astype(F32)[0])
            mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], F32) * factor
            blk = np.concatenate([[amax], np.zeros(15, F32), e2m1 * factor, mids, -mids,
                                  np.nextafter(mids, F32(0)), np.nextafter(mids, F32(1e30))]).astype(F32)
            check(np.clip(blk, -amax, amax).astype(F32))


def test_random_inputs():
    rng = np.random.default_rng(33)
    for trial in range(100):
        n = int(rng.integers(1, 400))
        x = (rng.standard_normal(n) * np.exp(rng.standard_normal(n) * (1 + trial % 5))).astype(F32)
        check(x)


def test_dtypes_are_read_as_float32_and_given_back():
    mld = oracle("ml_dtypes")
    rng = np.random.default_rng(1)
    x = rng.standard_normal(100).astype(F32)
    for dt in (np.float16, mld.bfloat16, np.float64):
        xd = x.astype(dt)
        q = cpd.nvfp4_quantize(xd)
        assert q.dtype == xd.dtype
        want = reference(xd.astype(F32))[3].astype(dt)
        np.testing.assert_array_equal(q.astype(np.float64), want.astype(np.float64))


def test_every_mode_and_stochastic_unbiased():
    x = np.tile(np.array([6.0] + [1.3] * 15, F32), 4000)  # factor 1: 1.3 between 1 and 1.5
    for mode in cpd.roundings:
        q = cpd.nvfp4_quantize(x, rounding=mode, seed=5)
        assert set(np.unique(q[1::16]).tolist()) <= {1.0, 1.5}
    q = cpd.nvfp4_quantize(x, rounding="stochastic", seed=7)
    rest = q.reshape(-1, 16)[:, 1:]
    assert abs(float(rest.mean()) - 1.3) < 0.01
    q2 = cpd.nvfp4_quantize(x, rounding="stochastic", seed=7)
    np.testing.assert_array_equal(q, q2)


def test_nan_and_inf_are_counted_and_mark_their_block():
    x = np.ones(48, F32)
    x[3] = np.inf
    x[20] = np.nan
    q, counts = cpd.nvfp4_quantize(x, stats=True)
    assert counts["inf_inputs"] == 1 and counts["nan_inputs"] == 1 and counts["nan"] == 30
    assert np.isnan(q[:32]).all() and (q[32:] == 1.0).all()
    p, sc, ts = cpd.nvfp4_encode(x)
    assert sc[0] == 0x7F and sc[1] == 0x7F


def test_make_scaler_refuses_nvfp4_by_name():
    with pytest.raises(ValueError, match="nvfp4 scales blocks of 16 values"):
        cpd._cpd.make_scaler("nvfp4", "e2m1fn")
