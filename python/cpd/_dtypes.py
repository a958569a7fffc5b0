# SPDX-License-Identifier: MIT
"""The dtypes of cpd's calls (docs/python.md, "Dtypes"): float16, bfloat16, float32 and
float64 arrays and tensors in, the same dtype out. float64 rounds from the double; float16 and
bfloat16 widen exactly to float32 and round from there; a result narrows back to float16 or
bfloat16 only where every value of the (scaled) format is a value of that dtype, so that
nothing is rounded twice."""

import math as _math

import numpy as _np

#: The dtypes the calls take, by name.
NAMES = ("float16", "bfloat16", "float32", "float64")

# name: (mantissa bits, largest finite value, smallest subnormal)
_FACTS = {
    "float16": (10, 65504.0, 2.0**-24),
    "bfloat16": (7, (2.0 - 2.0**-7) * 2.0**127, 2.0**-133),
    "float32": (23, (2.0 - 2.0**-23) * 2.0**127, 2.0**-149),
    "float64": (52, 1.7976931348623157e308, 5e-324),
}

#: The dtypes an out= may have for an input of each (the same, or one that holds every value).
WIDER = {"float16": ("float16", "float32", "float64"), "bfloat16": ("bfloat16", "float32", "float64"),
         "float32": ("float32", "float64"), "float64": ("float64",)}


def _torch():
    import torch  # imported only when a tensor is passed
    return torch


def numpy_name(dt):
    """The cpd name of a NumPy dtype (ml_dtypes' bfloat16 included), or None."""
    dt = _np.dtype(dt)
    if dt in (_np.float16, _np.float32, _np.float64):
        return dt.name
    if dt.name == "bfloat16" and dt.itemsize == 2:
        return "bfloat16"  # ml_dtypes.bfloat16 (a test oracle, never a dependency of cpd)
    return None


def torch_name(dt):
    """The cpd name of a torch dtype, or None."""
    t = _torch()
    return {t.float16: "float16", t.bfloat16: "bfloat16", t.float32: "float32", t.float64: "float64"}.get(dt)


def name_of(who, dtype):
    """The cpd name of a dtype given as a name, a NumPy dtype or a torch dtype."""
    if isinstance(dtype, str) and dtype in NAMES:
        return dtype
    if type(dtype).__module__.startswith("torch"):
        name = torch_name(dtype)
    else:
        try:
            name = numpy_name(dtype)
        except TypeError:
            name = None
    if name is None:
        raise TypeError(f"{who}: dtype {dtype!r} is not one of float16, bfloat16, float32, float64")
    return name


def numpy_dtype(who, name):
    """The NumPy dtype of a name; bfloat16 is ml_dtypes' (TypeError without it)."""
    if name != "bfloat16":
        return _np.dtype(name)
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(f"{who}: NumPy has no bfloat16 (ml_dtypes provides one); pass torch tensors or another "
                        "dtype") from None
    return _np.dtype(ml_dtypes.bfloat16)


def torch_dtype(name):
    return getattr(_torch(), name)


def host_view(a, name):
    """What the native module reads for an array `a` of dtype `name`: the array itself, or, for
    float16 and bfloat16, a uint16 view of the same memory (their codes)."""
    return a.view(_np.uint16) if name in ("float16", "bfloat16") else a


def tensor_view(t, name):
    """A NumPy array sharing a CPU tensor's memory (bfloat16 as its codes, a uint16 view)."""
    if name == "bfloat16":
        return t.detach().view(_torch().int16).numpy().view(_np.uint16)
    return host_view(t.detach().numpy(), name)


def empty(shape, name, torch_like, numpy_like=None):
    """(result, host view): a new array or CPU tensor of dtype `name` and its view for the module.
    numpy_like: the NumPy dtype to use (e.g. the input's own ml_dtypes bfloat16)."""
    if torch_like:
        t = _torch().empty(tuple(shape), dtype=torch_dtype(name))
        return t, tensor_view(t, name)
    a = _np.empty(shape, dtype=numpy_like if numpy_like is not None else numpy_dtype("cpd", name))
    return a, host_view(a, name)


def why_not_exact(info, scale_exponent, name):
    """None when every value of the format `info` (a cpd.finfo) times 2^-scale_exponent is a
    value of dtype `name`; else why not (the precision, the largest or the smallest value)."""
    nmant, dmax, dmin = _FACTS[name]
    if info.nmant > nmant:
        return f"{info.nmant} mantissa bits, {name} has {nmant}"
    try:
        top = _math.ldexp(info.max, -scale_exponent)
    except OverflowError:
        top = _math.inf
    low = _math.ldexp(info.smallest_subnormal, -scale_exponent)
    if top > dmax:
        return f"its largest value {top:g} is beyond {name}'s {dmax:g}"
    if low < dmin:
        return f"its smallest value {low:g} is below {name}'s {dmin:g}"
    return None


def check_exact(who, format, info, scale_exponent, name, fix):
    """Raises ValueError where a result of `format` (scaled) would be rounded again to `name`."""
    if name not in ("float16", "bfloat16"):
        return
    why = why_not_exact(info, scale_exponent, name)
    if why is not None:
        scaled = f" scaled by 2^{-scale_exponent}" if scale_exponent else ""
        raise ValueError(f"{who}: the values of {format}{scaled} are not all {name} values ({why}), so a {name} "
                         f"result would be rounded twice; {fix}")
