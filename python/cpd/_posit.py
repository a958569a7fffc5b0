# SPDX-License-Identifier: MIT
"""Posits in the package (docs/formats.md, "Posits"): cpd.quantize, cpd.encode, cpd.decode
and cpd.finfo send a format named "posit<n>es<es>" here (cpd::posit_format and
cpd/host/posit_bulk.hpp). Values are float32 or float64 arrays (NumPy, torch on the CPU);
float16/bfloat16 values, GPU arrays and scale_exponent are not yet supported for posits."""

import math as _math

from . import _cpd

_SUPPORTED = ("float32", "float64")


def is_posit(format):
    return isinstance(format, str) and format.startswith("posit")


def _check(who, name, scale_exponent, x):
    if scale_exponent != 0:
        raise ValueError(f"{who}: scale_exponent {scale_exponent} is not yet supported for posits")
    from . import _cuda
    if _cuda.on_device(x):
        raise TypeError(f"{who}: GPU arrays are not yet supported for posits; pass a CPU array")
    if name is not None and name not in _SUPPORTED:
        raise TypeError(f"{who}: posits take float32 or float64 values, not {name}; convert with .astype")


def quantize(x, format, rounding, seed, stream, generator, offset, scale_exponent, out, threads, stats):
    from . import _run, _threads
    who = "cpd.quantize"
    info = _facts(format)
    counts = {}

    def body(a, o, ni, no):
        _check(who, ni, scale_exponent, x)
        if ni != no:
            raise TypeError(f"{who}: out is {no} and the input {ni}; posits round into the input's dtype")
        if ni == "float32" and not info['fits_float']:
            raise ValueError(f"{who}: {info['name']} has values that are not float32 values; pass float64")
        r = _cpd.posit_quantize(a, o, ni, info['name'], rounding, seed, stream, generator, offset, _threads(threads),
                                stats)
        if stats:
            counts.update(r)

    _check(who, None, scale_exponent, x)
    result = _run(who, x, out, body)
    return (result, counts) if stats else result


def encode(x, format, rounding, seed, stream, generator, offset, scale_exponent, out, threads, stats):
    from . import _run, _threads
    who = "cpd.encode"
    info = _facts(format)
    counts = {}

    def body(a, o, ni, _):
        _check(who, ni, scale_exponent, x)
        r = _cpd.posit_encode(a, o.view(_unsigned(o.dtype)), ni, info['name'], rounding, seed, stream, generator,
                              offset, _threads(threads), stats)
        if stats:
            counts.update(r)

    _check(who, None, scale_exponent, x)
    result = _run(who, x, out, body, codes_bits=info['bits'])
    return (result, counts) if stats else result


def decode(codes, format, scale_exponent, out, threads, dtype_name):
    from . import _run, _threads
    who = "cpd.decode"
    info = _facts(format)
    _check(who, dtype_name, scale_exponent, codes)

    def body(a, o, _, no):
        _check(who, no, 0, codes)
        _cpd.posit_decode(a.view(_unsigned(a.dtype)), o, no, info['name'], _threads(threads))

    return _run(who, codes, out, body, codes_in=True, out_name=dtype_name or "float32")


def _facts(format):
    return _cpd.posit_info(format)  # ValueError naming the problem for a bad name


def _unsigned(dtype):
    import numpy as np
    return {1: np.uint8, 2: np.uint16, 4: np.uint32}[np.dtype(dtype).itemsize]


class finfo:
    """Machine limits of posit<n, es>, in numpy.finfo's terms (docs/formats.md, "Posits"):
    max = maxpos, min = -maxpos, tiny = smallest_normal = smallest_subnormal = minpos (a
    posit has no subnormals and never underflows to 0); eps = the spacing above 1,
    2^-nmant with nmant = max(n - 3 - es, 0) the fraction bits at 1; epsneg = 1 - (the
    posit below 1); nexp = es; maxexp = log2(maxpos) + 1, minexp = log2(minpos);
    has_nan: NaR; no inf, no -0."""

    def __init__(self, format):
        d = _cpd.posit_info(format)  # ValueError naming the problem for a bad name
        self.name = d["name"]
        self.bits = d["bits"]
        self.es = self.nexp = self.iexp = d["es"]
        self.nmant = d["fraction_bits"]
        self.bias = None
        self.encoding = "posit"
        self.max = d["maxpos"]
        self.min = -self.max
        self.tiny = self.smallest_normal = self.smallest_subnormal = d["minpos"]
        self.maxexp = d["max_exponent"] + 1
        self.minexp = -d["max_exponent"]
        one = 1 << (self.bits - 2)  # the code of 1
        import numpy as np
        near = np.array([one - 1, one + 1], dtype=np.uint32)
        below, above = (float(v) for v in decode(near, self.name, 0, None, 1, "float64"))
        self.eps = above - 1.0
        self.epsneg = 1.0 - below
        self.machep = round(_math.log2(self.eps))
        self.negep = round(_math.log2(self.epsneg))
        self.precision = int(_math.floor(self.nmant * _math.log10(2))) if self.nmant > 0 else 0
        self.resolution = float(quantize(np.array([10.0 ** -self.precision]), self.name, "nearest_even", 0, 0,
                                         "v2", 0, 0, None, 1, False)[0])
        self.fits_float = d["fits_float"]
        self.has_sign = True
        self.has_zero = True
        self.has_inf = False
        self.has_nan = True  # NaR
        self.has_negative_zero = False
        self.has_subnormals = False

    def __repr__(self):
        return (f"finfo(name={self.name}, bits={self.bits}, max={self.max!r}, tiny={self.tiny!r}, "
                f"eps={self.eps!r}, epsneg={self.epsneg!r}, has_nan={self.has_nan} (NaR))")
