#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""cpd against ml_dtypes, a reference that shares no code with cpd.

    python3 tests/ml_dtypes/check_ml_dtypes.py --tool build/<preset>/tests/cpd_dump [--count N] [--json FILE]

Draws a few million float32 and float64 inputs (every format's values and the
midpoints between them with their neighbours, float specials, a stride through
all float32 bit patterns, random values at every scale), lets cpd_dump encode them
with cpd (nearest-even, overflow::infinity) and decode every code, and compares
with ml_dtypes' astype for every format both libraries have (numpy's float16 for
float16). A mismatch on a finite input whose magnitude is within the format's
range fails the check; where the two differ by convention (what an overflow or a
NaN becomes), each class is counted and printed, never hidden. Exit 0: no
mismatch in range; 1: some, or ml_dtypes missing under CI=true (the CI run installs it:
scripts/venv.sh); 77: ml_dtypes is missing elsewhere.
"""
import argparse
import bisect
import json
import os
import subprocess
import sys
import tempfile
from fractions import Fraction

try:
    import numpy as np
    import ml_dtypes
except ImportError as e:  # (scripts/venv.sh installs it into build/venv)
    if os.environ.get("CI") == "true":
        print(f"FAILED: {e.name} is not installed for {sys.executable}; under CI the oracle must be there "
              "(scripts/venv.sh makes build/venv, scripts/test.sh runs it before configuring)")
        sys.exit(1)
    print(f"SKIPPED: {e.name} is not installed for {sys.executable}; the cross-check did not run "
          "(scripts/venv.sh installs it)")
    sys.exit(77)

FORMATS = [
    "float8_e4m3fn", "float8_e4m3", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "float8_e4m3b11fnuz", "float8_e3m4", "float8_e8m0fnu", "float6_e3m2fn", "float6_e2m3fn",
    "float4_e2m1fn", "bfloat16", "float16",
]
BITS = {"float6_e3m2fn": 6, "float6_e2m3fn": 6, "float4_e2m1fn": 4, "bfloat16": 16, "float16": 16}


def dtype_of(name):
    if name == "float16":
        return np.dtype(np.float16)
    return np.dtype(getattr(ml_dtypes, name))


def code_view(a, name):
    return a.view(np.uint16 if BITS.get(name, 8) == 16 else np.uint8)


def finite_values(name):
    bits = BITS.get(name, 8)
    codes = np.arange(1 << bits, dtype=np.uint16 if bits == 16 else np.uint8)
    v = codes.view(dtype_of(name)).astype(np.float64)
    return np.unique(v[np.isfinite(v)])


def available(name):
    """Whether this ml_dtypes (numpy, for float16) has the format."""
    return name == "float16" or hasattr(ml_dtypes, name)


def make_inputs(count, seed):
    rng = np.random.default_rng(seed)
    # Every format's values and midpoints with their neighbours: one float ulp either side
    # for the float inputs, one double ulp for the doubles (a cast through float32 would
    # round those twice).
    parts, parts64 = [], []
    for name in filter(available, FORMATS):
        v = finite_values(name)
        mid = (v[:-1] + v[1:]) / 2
        m32 = mid.astype(np.float32)
        parts += [v.astype(np.float32), m32, np.nextafter(m32, np.float32(-np.inf)),
                  np.nextafter(m32, np.float32(np.inf))]
        parts64 += [v, mid, np.nextafter(mid, -np.inf), np.nextafter(mid, np.inf)]
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3.4e38, -3.4e38, 1e-45, -1.2e-38],
                        dtype=np.float32)
    stride = (np.arange(count // 2, dtype=np.uint64) * np.uint64(0xFFFFFFFF // max(count // 2, 1))).astype(np.uint32)
    scaled = np.ldexp(rng.uniform(1, 2, count // 2) * rng.choice([-1.0, 1.0], count // 2),
                      rng.integers(-140, 130, count // 2)).astype(np.float32)
    x32 = np.concatenate(parts + [specials, stride.view(np.float32), scaled]).astype(np.float32)
    r64 = np.ldexp(rng.uniform(1, 2, count // 2) * rng.choice([-1.0, 1.0], count // 2),
                   rng.integers(-150, 140, count // 2))
    x64 = np.concatenate(parts64 + [specials.astype(np.float64), r64])
    return x32, x64


def exact_codes(name, xs):
    """The correctly rounded code (nearest, ties to the even code) of each x in xs, by exact
    rational arithmetic over the format's values as ml_dtypes decodes them (which equals
    cpd's decode of every code, checked first), or None where the format leaves it to a
    convention: e8m0 (no zero, no sign, no mantissa bit to make a tie even) for x <= 0,
    x below its smallest value, and ties."""
    bits = BITS.get(name, 8)
    codes = np.arange(1 << bits, dtype=np.uint16 if bits == 16 else np.uint8)
    vals = codes.view(dtype_of(name)).astype(np.float64)
    table = {}
    for c, v in zip(codes.tolist(), vals.tolist()):
        if np.isfinite(v):
            key = (Fraction(v), np.signbit(v))
            table.setdefault(key, c)
    values = sorted({k[0] for k in table})
    has_neg_zero = (Fraction(0), True) in table
    no_zero = name == "float8_e8m0fnu"
    out = []
    for x in xs.tolist():
        fx = Fraction(x)
        neg = bool(np.signbit(x))
        if no_zero and (fx <= 0 or fx < values[0]):
            out.append(None)
            continue
        i = bisect.bisect_left(values, fx)
        if i < len(values) and values[i] == fx:
            v = fx
        elif i == len(values) or i == 0:  # beyond the largest magnitude, short of the rounding boundary
            v = values[-1] if i else values[0]
        else:
            lo, hi = values[i - 1], values[i]
            if fx - lo != hi - fx:
                v = lo if fx - lo < hi - fx else hi
            elif no_zero:
                out.append(None)
                continue
            else:
                clo, chi = table.get((lo, lo < 0 or (lo == 0 and neg)), table.get((lo, False))), \
                    table.get((hi, hi < 0 or (hi == 0 and neg)), table.get((hi, False)))
                v = lo if clo % 2 == 0 else hi
                assert (clo % 2 == 0) != (chi % 2 == 0), (name, x)
        zero_sign = neg and v == 0 and has_neg_zero
        out.append(table.get((v, bool(v < 0) or zero_sign), table.get((v, False))))
    return out


def adjudicate(name, x, ref_c, got_c, mask):
    """Splits the in-range mismatches by who rounds correctly (exact_codes)."""
    idx = np.flatnonzero(mask)
    want = exact_codes(name, x[idx].astype(np.float64))
    cls = {"cpd_correct": 0, "ml_dtypes_correct": 0, "neither": 0, "convention": 0}
    first_wrong = None
    for j, w in zip(idx.tolist(), want):
        if w is None:
            cls["convention"] += 1
        elif int(got_c[j]) == w:
            cls["cpd_correct"] += 1
        else:
            cls["ml_dtypes_correct" if int(ref_c[j]) == w else "neither"] += 1
            if first_wrong is None:
                first_wrong = f"x={x[j]!r}: exact 0x{w:x}, cpd 0x{int(got_c[j]):x}, ml_dtypes 0x{int(ref_c[j]):x}"
    return cls, first_wrong


def compare(name, tmp, x32, x64):
    dt = dtype_of(name)
    bits = BITS.get(name, 8)
    utype = np.uint16 if bits == 16 else np.uint8
    res = {"format": name}
    # Decode of every code.
    codes = np.arange(1 << bits, dtype=utype)
    ref = codes.view(dt).astype(np.float32)
    got = np.fromfile(os.path.join(tmp, name + ".decode.f32"), dtype=np.float32)
    same = (ref.view(np.uint32) == got.view(np.uint32)) | (np.isnan(ref) & np.isnan(got))
    res["codes"] = int(codes.size)
    res["decode_mismatch"] = int((~same).sum())
    res["decode_nan_sign_or_payload_differs"] = int(
        (np.isnan(ref) & np.isnan(got) & (ref.view(np.uint32) != got.view(np.uint32))).sum())
    if res["decode_mismatch"]:
        i = int(np.flatnonzero(~same)[0])
        res["decode_first"] = f"code 0x{int(codes[i]):x}: ml_dtypes {ref[i]!r}, cpd {got[i]!r}"
    # Encode (float and double inputs).
    fv = finite_values(name)
    # Above the midpoint between the largest value and the next one up (gap as below it):
    # rounds beyond the format's range; the tie itself counts as overflow too.
    maxv = float(fv[-1] + (fv[-1] - fv[-2]) / 2)
    for tag, x in (("f32", x32), ("f64", x64)):
        ext = ".u16" if bits == 16 else ".u8"
        got_c = np.fromfile(os.path.join(tmp, f"{name}.encode_{tag}{ext}"), dtype=utype)
        with np.errstate(all="ignore"):
            ref_c = code_view(x.astype(dt), name)
        if bits < 8:
            ref_c = ref_c & utype((1 << bits) - 1)
        diff = ref_c != got_c
        xd = x.astype(np.float64)
        nan_in = np.isnan(xd)
        # At or beyond the rounding boundary above the largest value (or infinite): overflow conventions.
        over = ~nan_in & (np.abs(xd) >= maxv)
        inrange = ~nan_in & ~over
        res[f"encode_{tag}_inputs"] = int(x.size)
        res[f"encode_{tag}_mismatch_in_range"] = int((diff & inrange).sum())
        res[f"encode_{tag}_mismatch_overflow"] = int((diff & over).sum())
        res[f"encode_{tag}_mismatch_nan_input"] = int((diff & nan_in).sum())
        res[f"encode_{tag}_overflow_inputs"] = int(over.sum())
        cls, wrong = adjudicate(name, x, ref_c, got_c, diff & inrange)
        for k, v in cls.items():
            res[f"encode_{tag}_in_range_{k}"] = v
        if wrong:
            res[f"encode_{tag}_first_cpd_wrong"] = wrong
        # ml_dtypes' cast from double: does it go through float32 (rounding twice)?
        if tag == "f64" and cls["cpd_correct"]:
            bad = np.flatnonzero(diff & inrange)
            via32 = code_view(x[bad].astype(np.float32).astype(dt), name)
            if bits < 8:
                via32 = via32 & utype((1 << bits) - 1)
            res["ml_dtypes_f64_mismatches_equal_cast_through_float32"] = bool(np.all(via32 == ref_c[bad]))
        for cls, mask in (("in_range", inrange), ("overflow", over), ("nan_input", nan_in)):
            bad = np.flatnonzero(diff & mask)
            if bad.size:
                i = int(bad[0])
                res[f"encode_{tag}_first_{cls}"] = (f"x={x[i]!r}: ml_dtypes 0x{int(ref_c[i]):x} "
                                                    f"({ref_c[i:i+1].view(dt).astype(np.float64)[0]!r}), "
                                                    f"cpd 0x{int(got_c[i]):x} "
                                                    f"({got_c[i:i+1].view(dt).astype(np.float64)[0]!r})")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True, help="the cpd_dump binary")
    ap.add_argument("--count", type=int, default=4_000_000, help="random and strided inputs of each width")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    if a.count < 2:
        ap.error("--count must be at least 2")
    np.seterr(all="ignore")  # overflow and NaN casts are what the check is about
    x32, x64 = make_inputs(a.count, a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        x32.tofile(os.path.join(tmp, "inputs.f32"))
        x64.tofile(os.path.join(tmp, "inputs.f64"))
        subprocess.run([a.tool, tmp], check=True)
        results = [compare(n, tmp, x32, x64) for n in FORMATS if available(n)]
    missing = [n for n in FORMATS if not available(n)]
    print(f"ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}; "
          f"{x32.size} float and {x64.size} double inputs; not in this ml_dtypes: {missing or 'none'}")
    hdr = ("format", "decode", "f32 in range", "f32 overflow", "f32 NaN in", "f64 in range", "f64 overflow",
           "f64 NaN in")
    print("mismatches (cpd vs ml_dtypes):")
    print(" | ".join(hdr))
    failed = False
    for r in results:
        print(" | ".join(str(v) for v in (
            r["format"], r["decode_mismatch"], r["encode_f32_mismatch_in_range"], r["encode_f32_mismatch_overflow"],
            r["encode_f32_mismatch_nan_input"], r["encode_f64_mismatch_in_range"], r["encode_f64_mismatch_overflow"],
            r["encode_f64_mismatch_nan_input"])))
        for k, v in r.items():
            if "first" in k:
                print(f"    {r['format']} {k}: {v}")
        for tag in ("f32", "f64"):
            if r[f"encode_{tag}_mismatch_in_range"]:
                print(f"    {r['format']} {tag} in range: cpd exact {r[f'encode_{tag}_in_range_cpd_correct']}, "
                      f"ml_dtypes exact {r[f'encode_{tag}_in_range_ml_dtypes_correct']}, "
                      f"neither {r[f'encode_{tag}_in_range_neither']}, "
                      f"a convention {r[f'encode_{tag}_in_range_convention']}")
        if "ml_dtypes_f64_mismatches_equal_cast_through_float32" in r:
            print(f"    {r['format']}: ml_dtypes' double inputs that differ equal a cast through float32: "
                  f"{r['ml_dtypes_f64_mismatches_equal_cast_through_float32']}")
        failed |= bool(r["decode_mismatch"] or r["encode_f32_in_range_ml_dtypes_correct"] or
                       r["encode_f32_in_range_neither"] or r["encode_f64_in_range_ml_dtypes_correct"] or
                       r["encode_f64_in_range_neither"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ml_dtypes": ml_dtypes.__version__, "numpy": np.__version__, "results": results}, f, indent=1)
    print("FAILED: cpd misrounds or misdecodes where the exact rounding is defined" if failed else
          "OK: wherever cpd and ml_dtypes differ on a defined rounding, cpd's code is the exact one")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
