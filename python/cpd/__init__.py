# SPDX-License-Identifier: MIT
"""cpd: customized-precision floating point for deep learning (docs/python.md).

The calls of the C++ library on NumPy arrays and PyTorch CPU tensors of float32:

    import cpd, torch
    x = torch.randn(1000)
    y = cpd.quantize(x, "e4m3fn")                      # float32 values of E4M3FN
    codes = cpd.encode(x, "e5m2", rounding="stochastic", seed=1)
    z = cpd.decode(codes, "e5m2")

Every format name that cpd::format::parse takes works ("e4m3fn", "bf16", "e3m0",
"e5m10", "float6_e3m2fn", ...), every rounding mode, both overflow modes; the results
are the C++ bulk calls' bits. cpd.torch holds the DDP communication hook and the
emulation of W workers in one process.
"""

import itertools as _itertools
import math as _math
import operator as _operator

import numpy as _np

from . import _cpd
from . import _cuda
from . import _dtypes
from . import _posit

__all__ = [
    "quantize", "encode", "decode", "fixed_point_quantize", "int_quantize", "formats", "finfo", "manual_seed", "roundings",
    "stochastic_variants", "subnormal_modes", "exponent_ranges", "mx_quantize", "nvfp4_quantize", "nvfp4_encode", "nvfp4_decode", "generators",
    "random_bits", "hadamard",
    "aps", "current_scaling", "delayed_scaling", "dynamic_loss_scaling", "fixed_scaling", "amax_sqrtw_scaling",
    "predivide_scaling", "Scaler", "Scale",
    "simulate_allreduce", "simulate_block_scaled_allreduce", "simulate_codec_allreduce", "block_rules",
    "exchange_formats", "algorithms", "value_stats_fields",
]

__version__ = _cpd.version

Scale = _cpd.Scale


class Scaler:
    """A scaler of docs/scaling.md behind the protocol every exchange uses:
    st = statistic(x) on each worker (x: a float32 array or CPU tensor), combined over the
    workers by combine(a, b) (max) starting from `identity`, then select(st), the Scale
    (.exponent for a power of two, .value and .inverse for a float scale, .nonfinite when
    some worker's data held inf or NaN). Stateful scalers (delayed, loss) update in select."""

    def __init__(self, native, kind, format=None, world_size=None):
        self._native = native
        #: the name of the call that made it ("aps", "current_scaling", ...)
        self.kind = kind
        self.identity = native.identity
        #: the format the scaler was made for (its name as cpd.finfo(format).name), or None
        self.format = format
        #: the number of workers the scaler was made for, or None where it takes none
        self.world_size = world_size

    def statistic(self, x):
        """The statistic of x: an array or tensor of float16, bfloat16, float32 or float64 (on
        the CPU or, with the CUDA module, on a GPU). A statistic depends on max|x| alone."""
        who = f"cpd.{self.kind}.statistic"
        if _cuda.on_device(x):
            return self._native.statistic(_amax_array(who, _cuda.amax(who, x)))
        a, _, name, _ = _float_input(who, x)
        return self._native.statistic(_statistic_input(who, a, name))

    def _stat(self, what, st):
        """st as the scaler's statistic type: an int32 (int-like values only) or a float."""
        who = f"cpd.{self.kind}.{what}"
        if isinstance(self.identity, int):
            return _int(who, "the statistic", st, -2**31, 2**31 - 1)
        if isinstance(st, bool) or not isinstance(st, (int, float, _np.integer, _np.floating)):
            raise TypeError(f"{who}: the statistic must be a float, not {type(st).__name__}")
        return float(st)

    def combine(self, a, b):
        return self._native.combine(self._stat("combine", a), self._stat("combine", b))

    def select(self, st):
        return self._native.select(self._stat("select", st))

    def __repr__(self):
        return f"cpd.Scaler({self.kind})"

#: The rounding modes (docs/rounding.md): cpd::rounding's names.
roundings = _cpd.roundings
#: How stochastic rounding uses its random bits (docs/rounding.md): cpd::stochastic_variant's names.
stochastic_variants = _cpd.stochastic_variants
#: Below the smallest normal (docs/rounding.md): cpd::subnormal_mode's names, "keep" and "flush".
subnormal_modes = _cpd.subnormal_modes
#: The exponent range of a rounding (docs/rounding.md): "format", or "unbounded" (the input dtype's).
exponent_ranges = _cpd.exponent_ranges
#: The summation orders of simulate_allreduce (docs/reduction.md): cpd::simulated_algorithms.
algorithms = _cpd.simulated_algorithms
#: The counters of cpd::value_stats, the keys of every dict of counts (stats=True, diagnostics).
value_stats_fields = _cpd.value_stats_fields

# --- random bits of stochastic rounding when no seed is given ------------------------

#: The generators of stochastic rounding's random bits (docs/random.md): "v1" reproduces
#: results made before "v2", the default.
generators = _cpd.generators

# instances: the streams of cpd.torch.Quantizer and cpd.qtorch.quantizer (their next number);
# generator: the one of the calls that name none
_seed_state = {"seed": 0, "calls": _itertools.count(), "instances": _itertools.count(),
               "generator": _cpd.default_generator}


def _generator(who, generator):
    """generator by name (None: the one of the last cpd.manual_seed, else the default)."""
    if generator is None:
        return _seed_state["generator"]
    if not isinstance(generator, str) or generator not in generators:
        raise ValueError(f"{who}: generator {generator!r} is not one of {', '.join(generators)}")
    return generator


def manual_seed(seed, generator=None):
    """Seeds the stochastic calls that pass no seed: call k after manual_seed(s) draws the
    random bits of (seed s, stream k), so that a program's results repeat run after run.
    It also restarts the numbering of the streams of cpd.torch.Quantizer layers (the k-th
    one built afterwards gets stream k, with the seed s). generator: the generator of every
    call that names none from now on ("v1" or "v2"; None: the default, v2)."""
    seed = _int("cpd.manual_seed", "the seed", seed, 0, 2**64 - 1)
    g = _cpd.default_generator if generator is None else _generator("cpd.manual_seed", generator)
    _seed_state["seed"] = seed
    _seed_state["calls"] = _itertools.count()
    _seed_state["instances"] = _itertools.count()
    _seed_state["generator"] = g


def _key(rounding, seed, stream, who="cpd", generator=None):
    """(seed, stream, generator) of a call."""
    stream = _int(who, "stream", stream, 0, 2**64 - 1)
    g = _generator(who, generator)
    if rounding != "stochastic" or seed is not None:
        return _int(who, "seed", 0 if seed is None else seed, 0, 2**64 - 1), stream, g
    return _seed_state["seed"], (stream + (next(_seed_state["calls"]) << 32)) % 2**64, g


def random_bits(seed, stream, counter, generator=None):
    """cpd::random_bits: the 32 random bits of element `counter` of stream `stream` under
    `seed`, as every stochastic call draws them (generator None: the current one)."""
    who = "cpd.random_bits"
    return _cpd.random_bits(_int(who, "seed", seed, 0, 2**64 - 1), _int(who, "stream", stream, 0, 2**64 - 1),
                            _int(who, "counter", counter, 0, 2**64 - 1), _generator(who, generator))


# --- arrays and tensors -----------------------------------------------------------------

def _torch():
    import torch  # imported only when a tensor is passed
    return torch


def _is_tensor(x):
    t = type(x)
    return t.__module__.startswith("torch") and hasattr(x, "numpy") and hasattr(x, "device")


def _check_str(who, name, value):
    if not isinstance(value, str):
        raise TypeError(f"{who}: {name} must be a string, not {type(value).__name__}")


def _threads(threads):
    if threads is None:
        return 0
    try:
        return _int("cpd", "threads", threads, 0, 4096)
    except ValueError:
        raise ValueError(f"threads must be an int in [0, 4096] (0 or None: every hardware thread), not {threads!r}") \
            from None


def _int(who, name, v, lo, hi):
    """v as an int in [lo, hi], else ValueError (TypeError for a non-integer) naming it. Takes
    what indexes a list (int, numpy's integers: operator.index), never a float or a bool."""
    try:
        if isinstance(v, bool):
            raise TypeError
        v = _operator.index(v)
    except TypeError:
        raise TypeError(f"{who}: {name} must be an int, not {type(v).__name__} ({v!r})") from None
    if not lo <= v <= hi:
        raise ValueError(f"{who}: {name} {v} is outside [{lo}, {hi}]")
    return v


def _distinct_elements(shape, strides, itemsize):
    """Whether no two elements of an array (shape, strides in bytes) share a byte of memory:
    a stride 0, or strides that overlap, make an output whose elements alias (the last write
    would win)."""
    dims = sorted((abs(st), n) for st, n in zip(strides, shape) if n > 1)
    if not dims or any(n == 0 for n in shape):
        return True
    if dims[0][0] == 0:
        return False
    span = itemsize
    for st, n in dims:
        if st < span:
            break  # strides that interleave: settle it element by element below
        span = st * (n - 1) + span
    else:
        return True
    at = _np.zeros(1, dtype=_np.int64)
    for st, n in zip(strides, shape):
        at = (at[:, None] + st * _np.arange(n, dtype=_np.int64)[None, :]).ravel()
    at.sort()
    return bool(_np.all(_np.diff(at) >= itemsize))


def _check_out(who, o):
    if not o.flags.writeable:
        raise ValueError(f"{who}: out is read-only")
    if not _distinct_elements(o.shape, o.strides, o.itemsize):
        raise ValueError(f"{who}: out has elements that share memory (shape {tuple(o.shape)}, strides {o.strides} "
                         "bytes: a stride 0, from expand or as_strided, or overlapping strides); every output element "
                         "must have its own memory")


_DTYPES = "float16, bfloat16, float32 or float64"


def _float_input(who, x):
    """(view, tensor or None, dtype name, NumPy dtype or None): an array sharing the memory of
    x, an array or CPU tensor of float16, bfloat16, float32 or float64 (strided allowed); the
    16-bit ones as uint16 views of their codes (_dtypes.host_view)."""
    if _is_tensor(x):
        if x.device.type != "cpu":
            raise TypeError(f"{who}: the tensor is on {x.device}; cpd takes CPU tensors, and CUDA tensors "
                            f"through its CUDA module ({_cuda.why_missing()})")
        if x.layout != _torch().strided:
            raise TypeError(f"{who}: the tensor's layout is {x.layout}; cpd takes dense tensors")
        name = _dtypes.torch_name(x.dtype)
        if name is None:
            raise TypeError(f"{who}: the tensor is {x.dtype}; cpd takes {_DTYPES}")
        return _dtypes.tensor_view(x, name), x, name, None
    if isinstance(x, (_np.ndarray, _np.generic)):
        a = x if isinstance(x, _np.ndarray) else _np.asarray(x)
        name = _dtypes.numpy_name(a.dtype)
        if name is None:
            raise TypeError(f"{who}: the array is {a.dtype}; cpd takes {_DTYPES} (bfloat16: ml_dtypes')")
        return _dtypes.host_view(a, name), None, name, a.dtype
    raise TypeError(f"{who}: expected a numpy.ndarray or torch.Tensor of {_DTYPES}, not {type(x).__name__}")


def _contiguous(a):
    return a if a.flags.c_contiguous else _np.ascontiguousarray(a)


def _amax_array(who, amax):
    """[amax] as a float32 array whose statistic is x's: the smallest float32 >= amax (amax
    itself for float32, float16 and bfloat16 data); beyond float32's range a ValueError."""
    if _math.isfinite(amax) and amax > float(_np.finfo(_np.float32).max):
        raise ValueError(f"{who}: max|x| = {amax!r} is beyond float32's range; the scalers' statistics are of "
                         "float32 values")
    f = _np.float32(amax)  # (nearest; inf and NaN as they are)
    if float(f) < amax:
        f = _np.nextafter(f, _np.float32(_np.inf))
    return _np.array([f], dtype=_np.float32)


def _statistic_input(who, a, name):
    """The float32 array whose statistic is that of a (a view of dtype name): a itself, its
    float16/bfloat16 values widened (exact), or for float64 [max|a| rounded up to float32]."""
    a = _contiguous(a)
    if name == "float32":
        return a
    if name == "float64":
        return _amax_array(who, float(_np.max(_np.abs(a)))) if a.size else _np.empty(0, _np.float32)
    wide = _np.empty(a.shape, dtype=_np.float32)
    _cpd.cast(a, wide, name, "float32")
    return wide


def _code_dtype(bits, torch_like):
    if torch_like:
        t = _torch()
        return t.uint8 if bits <= 8 else (t.int16 if bits <= 16 else t.int32)
    return _np.uint8 if bits <= 8 else (_np.uint16 if bits <= 16 else _np.uint32)


def _code_input(who, c):
    if _is_tensor(c):
        if c.device.type != "cpu":
            raise TypeError(f"{who}: the codes are on {c.device}; the Python package runs on the CPU")
        t = _torch()
        if c.dtype not in (t.uint8, t.int8, t.int16, t.int32):
            raise TypeError(f"{who}: codes must be uint8, int16 or int32 tensors (torch has no uint16/uint32), "
                            f"not {c.dtype}")
        return c.detach().numpy(), c
    if isinstance(c, _np.ndarray):
        if c.dtype not in (_np.uint8, _np.uint16, _np.uint32, _np.int8, _np.int16, _np.int32):
            raise TypeError(f"{who}: codes must be an array of uint8, uint16 or uint32 (or int8/16/32), not {c.dtype}")
        return c, None
    raise TypeError(f"{who}: expected codes as a numpy.ndarray or torch.Tensor, not {type(c).__name__}")


def _run(who, x, out, body, *, codes_bits=None, codes_in=False, out_name=None, exact=None):
    """Runs body(input view, output view, input dtype, output dtype) on C-contiguous views
    and returns the result in x's kind (tensor or array); strided arrays go through
    contiguous copies. Values are float16, bfloat16, float32 or float64 (the 16-bit ones as
    uint16 views), codes integers (dtype None). out_name: the result's dtype without out
    (default: the input's); exact(dtype): checks, before anything runs, that the result's
    values are that dtype's (_dtypes.check_exact)."""
    if codes_in:
        (a, t), name, like = _code_input(who, x), None, None
    else:
        a, t, name, like = _float_input(who, x)
    ain = _contiguous(a)
    if out is None:
        if codes_bits is not None:
            kind = _code_dtype(codes_bits, t is not None)
            result = _torch().empty(tuple(a.shape), dtype=kind) if t is not None else _np.empty(a.shape, dtype=kind)
            o, oname = (result.numpy() if t is not None else result), None
        else:
            oname = out_name or name
            if exact is not None:
                exact(oname)
            result, o = _dtypes.empty(a.shape, oname, t is not None, like if oname == name else None)
        body(ain, o, name, oname)
        return result
    if codes_bits is None:
        o, _, oname, _ = _float_input(who + " (out)", out)
        if name is not None and oname not in _dtypes.WIDER[name]:
            raise TypeError(f"{who}: out is {oname} and the input {name}; out must be "
                            f"{' or '.join(_dtypes.WIDER[name])} (a dtype that holds every value of the input's)")
        if exact is not None:
            exact(oname)
    else:
        (o, _), oname = _code_input(who + " (out)", out), None
        if o.dtype.itemsize * 8 < codes_bits:
            raise TypeError(f"{who}: out holds {o.dtype.itemsize * 8}-bit integers; the codes have {codes_bits} bits")
    if o.shape != a.shape:
        raise ValueError(f"{who}: out has shape {tuple(o.shape)}, the input {tuple(a.shape)}")
    _check_out(who, o)
    if o.flags.c_contiguous:
        body(ain, o, name, oname)
    else:
        tmp = _np.empty(o.shape, dtype=o.dtype)
        body(ain, tmp, name, oname)
        o[...] = tmp
    return out


def _exact_check(who, format, scale_exponent, fix):
    """exact(dtype) for _run: a ValueError where the format's values (times 2^-scale_exponent)
    are not all values of a float16 or bfloat16 result (they would be rounded twice)."""
    info = finfo(format)
    return lambda name: _dtypes.check_exact(who, info.name, info, scale_exponent, name, fix)


# --- the bulk calls ---------------------------------------------------------------------

def quantize(x, format, rounding="nearest_even", overflow="infinity", seed=None, scale_exponent=0, out=None, *,
             stream=0, offset=0, threads=None, stats=False, generator=None, variant="a", subnormals="keep",
             exponents="format"):
    """x rounded to `format`, in x's dtype: cpd::quantize of the runtime format.

    x: float16, bfloat16, float32 or float64 (docs/python.md, "Dtypes"); NumPy, torch (CPU,
    or CUDA with the CUDA module), or an array with __cuda_array_interface__ or DLPack on a
    GPU. A float16 or bfloat16 result must hold every value of the format (else ValueError:
    pass float32, or out= of float32); out may be of a wider dtype than x.

    rounding: one of cpd.roundings; overflow: "infinity" (IEEE 754), "saturate" or "propagate" (saturate
    finite values, keep infinities: IEEE P3109's SatPropagate).
    seed, stream, offset, generator: the random bits of stochastic rounding (element i draws
    cpd::random_bits(seed, stream, offset + i, generator)); seed=None takes the next key of
    cpd.manual_seed's sequence; generator "v1" or "v2" (None: the one of the last
    cpd.manual_seed, v2 by default). scale_exponent k: rounds x * 2^k and returns it times 2^-k.
    out: where to write (out=x rounds in place). threads: None or 0 for every hardware
    thread, 1 for the calling thread. stats=True returns (result, counts) with the
    counts of cpd::value_stats (underflow, overflow, nan_inputs, ...).
    variant: how stochastic rounding uses its random bits, one of cpd.stochastic_variants ("a",
    IEEE P3109's "b" and "c", "equal": either neighbour with probability 1/2). subnormals:
    "keep" the format's subnormals, or "flush": none, values below the smallest normal round
    to 0 or to it in the mode (those that become 0 count as underflow). exponents: "format",
    or "unbounded": the format's precision with the exponent range of the float32 or float64
    computation (scale_exponent 0, M >= 1). All three on CPU arrays of float formats;
    docs/rounding.md.
    """
    for n, v in (("format", format), ("rounding", rounding), ("overflow", overflow), ("variant", variant),
                 ("subnormals", subnormals), ("exponents", exponents)):
        _check_str("cpd.quantize", n, v)
    offset = _int("cpd.quantize", "offset", offset, 0, 2**64 - 1)
    scale_exponent = _int("cpd.quantize", "scale_exponent", scale_exponent, -2**31, 2**31 - 1)
    s, st, g = _key(rounding, seed, stream, "cpd.quantize", generator)
    th = _threads(threads)
    counts = {}
    _host_options("cpd.quantize", x, format, variant, subnormals, exponents)
    if _posit.is_posit(format):
        return _posit.quantize(x, format, rounding, s, st, g, int(offset), scale_exponent, out, threads, bool(stats))

    exact = _exact_check("cpd.quantize", format, scale_exponent,
                         "pass a float32 input, or out= of float32, and round that as you choose")
    if _cuda.on_device(x):
        if stats:
            raise ValueError("cpd.quantize: stats=True on a GPU array (the device keeps no counts); pass stats=False")
        return _cuda.quantize(x, out, exact, format, rounding, overflow, s, st, g, int(offset), int(scale_exponent))

    def body(a, o, ni, no):
        r = _cpd.quantize(a, o, ni, no, format, rounding, overflow, s, st, g, int(offset), int(scale_exponent), variant,
                          subnormals, exponents, th, bool(stats))
        if stats:
            counts.update(r)

    result = _run("cpd.quantize", x, out, body, exact=exact)
    return (result, counts) if stats else result


def _host_options(who, x, format, variant, subnormals, exponents="format"):
    """A ValueError where variant, subnormals or exponents asks for what only the host calls of
    float formats do."""
    if variant == "a" and subnormals == "keep" and exponents == "format":
        return
    where = ("a GPU array (the device calls round with variant 'a' and keep subnormals)" if _cuda.on_device(x)
             else "a posit format (posits round with variant 'a' and have no subnormals)"
             if _posit.is_posit(format) else None)
    if where is not None:
        raise ValueError(f"{who}: variant={variant!r}, subnormals={subnormals!r}, exponents={exponents!r} on {where}")


def _run_cpu_float(who, what, x, out, call):
    """_run for the calls that take float32 or float64 arrays on the CPU into their own dtype:
    call(input view, output view, dtype name)."""
    if _cuda.on_device(x):
        raise TypeError(f"{who}: GPU arrays are not yet supported for {what}; pass a CPU array")

    def body(a, o, ni, no):
        if ni not in ("float32", "float64") or no != ni:
            raise TypeError(f"{who}: {what} takes float32 or float64 values, into their own dtype (the input is "
                            f"{ni}, out {no}); convert with .astype or .to")
        call(a, o, ni)

    return _run(who, x, out, body)


def fixed_point_quantize(x, word_bits, fraction_bits, clamp=True, symmetric=False, rounding="nearest_even", seed=None,
                         scale_exponent=0, out=None, *, stream=0, offset=0, threads=None, stats=False, generator=None):
    """x rounded to the signed fixed point of word_bits bits (two's complement), fraction_bits
    of them after the binary point: k * 2^-fraction_bits for k in [-2^(word_bits-1),
    2^(word_bits-1) - 1] (symmetric: from -(2^(word_bits-1) - 1)); cpd::fixed_point_quantize
    (docs/formats.md, "Fixed point").

    x: float32 or float64 (NumPy, torch on the CPU), the result in its dtype. rounding: one of
    cpd.roundings (stochastic: seed, stream, offset, generator as cpd.quantize). clamp=True
    clamps the rounded value to the range (overflow and saturated counted); clamp=False
    rounds to the grid only (QPyTorch's clamp=False). scale_exponent k rounds x * 2^k and
    returns it times 2^-k. out, threads, stats: as cpd.quantize.
    """
    who = "cpd.fixed_point_quantize"
    _check_str(who, "rounding", rounding)
    word_bits = _int(who, "word_bits", word_bits, 2, 64)
    fraction_bits = _int(who, "fraction_bits", fraction_bits, -2**31, 2**31 - 1)
    offset = _int(who, "offset", offset, 0, 2**64 - 1)
    scale_exponent = _int(who, "scale_exponent", scale_exponent, -2**31, 2**31 - 1)
    s, st, g = _key(rounding, seed, stream, who, generator)
    th = _threads(threads)
    counts = {}

    def call(a, o, dtype):
        r = _cpd.fixed_point_quantize(a, o, dtype, word_bits, fraction_bits, bool(symmetric), bool(clamp), rounding,
                                      s, st, g, int(offset), int(scale_exponent), th, bool(stats))
        if stats:
            counts.update(r)

    result = _run_cpu_float(who, "fixed point", x, out, call)
    return (result, counts) if stats else result


def hadamard(x, block=16, seed=0, inverse=False, out=None, *, stream=0, threads=None, stats=False, generator=None):
    """The random Hadamard rotation of x in blocks of `block` consecutive values (a power of
    two, 2 .. 65536): y = H (s * x) / sqrt(block) per block, s a vector of random signs drawn
    from (seed, stream, generator), shared by every block; inverse=True undoes it,
    x = s * (H y / sqrt(block)). The last x.size % block values pass unchanged; a block that
    holds an inf or NaN comes out non-finite (counted with stats=True: {"blocks",
    "nonfinite_blocks"}). cpd::hadamard_rotate, docs/scaling.md ("Random Hadamard rotations").

    x: float32 or float64 (NumPy, torch on the CPU), the result in its dtype; the blocks run
    along the flattened array. out, threads: as cpd.quantize.
    """
    who = "cpd.hadamard"
    block = _int(who, "block", block, 2, 65536)
    if block & (block - 1):
        raise ValueError(f"{who}: block must be a power of two, not {block}")
    seed = _int(who, "seed", seed, 0, 2**64 - 1)
    stream = _int(who, "stream", stream, 0, 2**64 - 1)
    g = _generator(who, generator)
    th = _threads(threads)
    counts = {}
    result = _run_cpu_float(who, "the rotation", x, out, lambda a, o, dtype: counts.update(
        _cpd.hadamard(a, o, dtype, block, seed, stream, g, bool(inverse), th)))
    return (result, counts) if stats else result


def encode(x, format, rounding="nearest_even", overflow="infinity", seed=None, scale_exponent=0, out=None, *,
           stream=0, offset=0, threads=None, stats=False, generator=None, variant="a", subnormals="keep"):
    """The codes of x rounded to `format`, one per element: uint8 for codes of at most 8
    bits, uint16 (torch: int16, the same bits) for at most 16, uint32 (torch: int32) above.
    Arguments as quantize."""
    for n, v in (("format", format), ("rounding", rounding), ("overflow", overflow), ("variant", variant),
                 ("subnormals", subnormals)):
        _check_str("cpd.encode", n, v)
    _host_options("cpd.encode", x, format, variant, subnormals)
    offset = _int("cpd.encode", "offset", offset, 0, 2**64 - 1)
    scale_exponent = _int("cpd.encode", "scale_exponent", scale_exponent, -2**31, 2**31 - 1)
    if _posit.is_posit(format):
        s, st, g = _key(rounding, seed, stream, "cpd.encode", generator)
        return _posit.encode(x, format, rounding, s, st, g, int(offset), scale_exponent, out, threads, bool(stats))
    bits = finfo(format).bits
    s, st, g = _key(rounding, seed, stream, "cpd.encode", generator)
    th = _threads(threads)
    counts = {}

    if _cuda.on_device(x):
        if stats:
            raise ValueError("cpd.encode: stats=True on a GPU array (the device keeps no counts); pass stats=False")
        return _cuda.encode(x, out, bits, format, rounding, overflow, s, st, g, int(offset), int(scale_exponent))

    def body(a, o, ni, _):
        r = _cpd.encode(a, o.view(_unsigned(o.dtype)), ni, format, rounding, overflow, s, st, g, int(offset),
                        int(scale_exponent), variant, subnormals, "format", th, bool(stats))
        if stats:
            counts.update(r)

    result = _run("cpd.encode", x, out, body, codes_bits=bits)
    return (result, counts) if stats else result


def _unsigned(dtype):
    return {1: _np.uint8, 2: _np.uint16, 4: _np.uint32}[_np.dtype(dtype).itemsize]


def decode(codes, format, scale_exponent=0, out=None, *, threads=None, dtype=None):
    """The values of `codes` of `format` (times 2^-scale_exponent), as float32, or as out's
    dtype, or as `dtype` (float16, bfloat16, float32, float64: a name, NumPy's or torch's; a
    float16 or bfloat16 one must hold every value of the format). A code with bits above the
    format's width is a ValueError (it is no code of the format)."""
    who = "cpd.decode"
    _check_str(who, "format", format)
    scale_exponent = _int(who, "scale_exponent", scale_exponent, -2**31, 2**31 - 1)
    th = _threads(threads)
    name = None if dtype is None else _dtypes.name_of(who, dtype)
    if _posit.is_posit(format):
        if out is not None and name is not None and _out_name(who, out) != name:
            raise TypeError(f"{who}: out is {_out_name(who, out)} and dtype {name}; give one of them")
        return _posit.decode(codes, format, scale_exponent, out, threads,
                             name if out is None else _out_name(who, out))
    exact = _exact_check(who, format, scale_exponent, "decode into float32 (dtype= or out=)")
    if out is not None and name is not None and _out_name(who, out) != name:
        raise TypeError(f"{who}: out is {_out_name(who, out)} and dtype {name}; give one of them")
    if _cuda.on_device(codes):
        return _cuda.decode(codes, out, name or "float32", exact, format, int(scale_exponent))

    def body(a, o, _, no):
        _cpd.decode(a.view(_unsigned(a.dtype)), o, no, format, int(scale_exponent), th)

    return _run(who, codes, out, body, codes_in=True, out_name=name or "float32", exact=exact)


def _out_name(who, out):
    if _cuda.on_device(out):
        return _cuda.dtype_name(who, out)
    return _float_input(who + " (out)", out)[2]


def int_quantize(x, bits=8, symmetric=True, axis=None, block_size=None, rounding="nearest_even", seed=None, out=None,
                 *, stream=0, offset=0, threads=None, stats=False, generator=None, return_params=False):
    """Integer fake quantization with a float scale and zero point per tensor, per channel
    (axis) or per block (block_size consecutive values in C order), chosen as torch.ao's
    MinMaxObserver does: cpd::int_quantize (docs/formats.md, "Integers").

    bits in [2, 16]; symmetric: signed integers [-2^(bits-1), 2^(bits-1) - 1], zero point 0,
    scale max|x| / ((qmax - qmin) / 2); else unsigned [0, 2^bits - 1] with scale (max - min) /
    (qmax - qmin) and a zero point (torch.per_tensor_affine). Each value becomes
    (clamp(round(x * (1 / scale)) + zero_point, qmin, qmax) - zero_point) * scale in `rounding`
    (stochastic: seed, stream, offset, generator as cpd.quantize), as
    torch.fake_quantize_per_channel_affine. x: float32 (NumPy, torch on the CPU).
    return_params=True also returns (scales, zero_points), one per group (per channel: in
    the order of axis). stats=True returns the counts as cpd.quantize."""
    who = "cpd.int_quantize"
    _check_str(who, "rounding", rounding)
    bits = _int(who, "bits", bits, 2, 16)
    offset = _int(who, "offset", offset, 0, 2**64 - 1)
    if axis is not None and block_size is not None:
        raise ValueError(f"{who}: give axis (per channel) or block_size (per block), not both")
    s, st, g = _key(rounding, seed, stream, who, generator)
    th = _threads(threads)
    if _cuda.on_device(x):
        raise TypeError(f"{who}: GPU arrays are not yet supported; pass a CPU array")
    counts, params = {}, {}

    def body(a, o, ni, no):
        if ni != "float32" or no != "float32":
            raise TypeError(f"{who}: takes and gives float32 (not {ni}, {no}); use .astype(numpy.float32) or .float()")
        flat, dest, group = a, o, max(a.size, 1)
        if axis is not None:
            ax = _int(who, "axis", axis, -a.ndim, a.ndim - 1) % a.ndim if a.ndim else None
            if ax is None:
                raise ValueError(f"{who}: axis {axis} of a 0-d array")
            outer, channels, inner = _math.prod(a.shape[:ax]), a.shape[ax], _math.prod(a.shape[ax + 1:])
            if a.size and inner >= 64:  # cpd::int_quantize_channels, no moved copy (the same bits)
                scales, zps = _np.empty(channels, _np.float32), _np.empty(channels, _np.int32)
                r = _cpd.int_quantize_channels(a.reshape(-1), o.reshape(-1), scales, zps, bits, bool(symmetric),
                                               outer, channels, inner, rounding, s, st, g, int(offset), th, bool(stats))
                params.update(scales=scales, zero_points=zps)
                if stats:
                    counts.update(r)
                return
            # short runs of a channel (channels last): numpy's moved copy beats a strided gather
            flat = _np.ascontiguousarray(_np.moveaxis(a, ax, 0))
            dest = _np.empty_like(flat)
            group = max(flat.size // max(flat.shape[0], 1), 1)
        elif block_size is not None:
            group = _int(who, "block_size", block_size, 1, 2**62)
        groups = (flat.size + group - 1) // group
        scales, zps = _np.empty(groups, _np.float32), _np.empty(groups, _np.int32)
        r = _cpd.int_quantize(flat.reshape(-1), dest.reshape(-1), scales, zps, bits, bool(symmetric), int(group),
                              rounding, s, st, g, int(offset), th, bool(stats))
        if flat is not a:
            o[...] = _np.moveaxis(dest, 0, ax)
        params.update(scales=scales, zero_points=zps)
        if stats:
            counts.update(r)

    result = _run(who, x, out, body)
    extra = ((params["scales"], params["zero_points"]),) if return_params else ()
    extra += (counts,) if stats else ()
    return (result,) + extra if extra else result


# MX's integer elements as cpd formats: 1 exponent bit of bias 1 makes a uniform grid (cpd::mx_int8 ...).
_MX_INT_ELEMENTS = {"int8": "e1m6b1finite", "int4": "e1m2b1finite", "int2": "e1m0b1finite"}


def mx_quantize(x, element_format, block_size=32, rule="floor", rounding="nearest_even", seed=0, out=None, *,
                stream=0, generator=None):
    """OCP MX fake quantization (cpd::mx_quantize): blocks of block_size values share an
    E8M0 scale chosen by `rule` (floor, ceil, rceil, even: docs/scaling.md); the elements round to element_format
    (e4m3fn, e5m2, e3m2fn, e2m3fn, e2m1fn; int8, int4, int2: MXINT8 and microxcaling's MXINT4 and
    MXINT2, k/64, k/4 and k for |k| up to 127, 7 and 1), saturating. x is flattened in C order."""
    _check_str("cpd.mx_quantize", "element_format", element_format)
    element_format = _MX_INT_ELEMENTS.get(element_format, element_format)
    block_size = _int("cpd.mx_quantize", "block_size", block_size, 1, 2**32)
    seed = _int("cpd.mx_quantize", "seed", seed, 0, 2**64 - 1)
    stream = _int("cpd.mx_quantize", "stream", stream, 0, 2**64 - 1)
    g = _generator("cpd.mx_quantize", generator)

    def body(a, o, ni, no):
        if ni != "float32" or no != "float32":
            raise TypeError(f"cpd.mx_quantize: takes and gives float32 (not {ni}, {no}); use .float()")
        _cpd.mx_quantize(a, o, element_format, rounding, int(block_size), rule, int(seed), int(stream), g)

    return _run("cpd.mx_quantize", x, out, body)


def _nvfp4_args(who, tensor_scale, seed, stream, generator):
    ts = 0.0 if tensor_scale is None else float(tensor_scale)
    return (ts, _int(who, "seed", seed, 0, 2**64 - 1), _int(who, "stream", stream, 0, 2**64 - 1),
            _generator(who, generator))


def nvfp4_quantize(x, rounding="nearest_even", tensor_scale=None, seed=0, out=None, *, stream=0, generator=None,
                   stats=False):
    """NVFP4 fake quantization (cpd::nvfp4_quantize, docs/scaling.md#nvfp4): blocks of 16
    values (x flattened in C order) share an E4M3 scale, the tensor a float32 scale s =
    amax / 2688 (or tensor_scale), elements E2M1 rounded in `rounding` (every mode). x is
    float16, bfloat16, float32 or float64, read as float32 (float64 rounded, as torch's
    .float()); the result has x's dtype. stats=True returns (result, counts)."""
    who = "cpd.nvfp4_quantize"
    _check_str(who, "rounding", rounding)
    ts, seed, stream, g = _nvfp4_args(who, tensor_scale, seed, stream, generator)
    counts = {}

    def body(a, o, ni, no):
        counts.update(_cpd.nvfp4_quantize(a, o, ni, no, rounding, ts, seed, stream, g))

    result = _run(who, x, out, body)
    return (result, counts) if stats else result


def nvfp4_encode(x, rounding="nearest_even", tensor_scale=None, seed=0, *, stream=0, generator=None, stats=False):
    """NVFP4 encoding (cpd::nvfp4_encode): (packed, scales, tensor_scale), NumPy arrays of
    uint8 (E2M1 codes two per byte, value 2j in the low nibble of byte j: torchao's
    pack_uint4 order; one E4M3 code per 16 values) and a Python float; with stats=True
    also the counts. x as nvfp4_quantize's, flattened in C order."""
    who = "cpd.nvfp4_encode"
    _check_str(who, "rounding", rounding)
    ts, seed, stream, g = _nvfp4_args(who, tensor_scale, seed, stream, generator)
    a, _, name, _ = _float_input(who, x)
    a = _contiguous(a)
    n = int(a.size)
    packed = _np.zeros((n + 1) // 2, dtype=_np.uint8)
    scales = _np.zeros((n + 15) // 16, dtype=_np.uint8)
    s, counts = _cpd.nvfp4_encode(a.reshape(-1), packed, scales, name, rounding, ts, seed, stream, g)
    return (packed, scales, s, counts) if stats else (packed, scales, s)


def nvfp4_decode(packed, scales, tensor_scale, n, dtype="float32"):
    """NVFP4 decoding (cpd::nvfp4_decode): n values value(code) * (tensor_scale *
    value(block scale)) in float32, then in `dtype` (float16, bfloat16, float32, float64)
    as a NumPy array (a block whose scale is E4M3's NaN, 0x7F, decodes to NaN)."""
    who = "cpd.nvfp4_decode"
    n = _int(who, "n", n, 0, 2**62)
    p = _np.ascontiguousarray(_code_input(who, packed)[0]).reshape(-1).view(_np.uint8)
    sc = _np.ascontiguousarray(_code_input(who, scales)[0]).reshape(-1).view(_np.uint8)
    name = _dtypes.name_of(who, dtype)
    result, o = _dtypes.empty((n,), name, False)
    _cpd.nvfp4_decode(p, sc, float(tensor_scale), o, name, n)
    return result


# --- formats ----------------------------------------------------------------------------

def formats():
    """The formats cpd names (every alias it compiles kernels for, as format.name() writes
    them). Any eXmY[bB][fn|fnuz|fnu|finite] and IEEE P3109 binary{K}p{P}{s|u}{e|f} of the rules in
    docs/formats.md works too."""
    return list(_cpd.format_names())


def exchange_formats():
    """The formats of the exchange (simulate_allreduce, cpd.torch): cpd-train's list."""
    return [s.strip() for s in _cpd.exchange_format_names().split(",")]


class finfo:
    """Machine limits of a format, as numpy.finfo: bits, eps, epsneg, max, min, tiny
    (= smallest_normal), smallest_subnormal, maxexp, minexp, nexp, nmant, precision,
    resolution; and cpd's facts (bias, encoding, has_inf, has_nan, has_zero, ...).

    As numpy defines them: min is the smallest value (-max with a sign; for E8M0, which has
    neither sign nor zero, 2^-127); epsneg = 1 - (the value below 1), the subnormal spacing
    where 1 is the smallest normal (e2m3fn: 0.125; e2m1fn: 0.5); precision = int(-log10(eps));
    resolution = 10^-precision rounded to the format."""

    def __init__(self, format):
        _check_str("cpd.finfo", "format", format)
        if _posit.is_posit(format):
            self.__dict__.update(_posit.finfo(format).__dict__)
            return
        d = _cpd.format_info(format)
        self.name = d["name"]
        self.bits = d["bits"]
        self.nexp = d["exponent_bits"]
        self.nmant = d["mantissa_bits"]
        self.bias = d["bias"]
        self.encoding = d["encoding"]
        self.max = d["max"]
        self.has_zero = d["has_zero"]
        self.min = -d["max"] if d["has_sign"] else (0.0 if self.has_zero else d["smallest_subnormal"])
        self.smallest_normal = d["smallest_normal"]
        self.tiny = self.smallest_normal
        self.smallest_subnormal = d["smallest_subnormal"]
        self.maxexp = d["emax"] + 1
        self.minexp = d["emin"]
        self.iexp = self.nexp
        self.machep = -self.nmant
        self.eps = 2.0 ** self.machep
        # below 1: 1 - 2^-(nmant+1) where 1 is above the smallest normal, else the spacing of
        # the subnormals (1 is the smallest normal in e2m3fn and e2m1fn)
        self.negep = -(self.nmant + 1) if self.minexp < 0 or not d["has_subnormals"] else self.minexp - self.nmant
        self.epsneg = 2.0 ** self.negep
        self.precision = int(_math.floor(self.nmant * _math.log10(2))) if self.nmant > 0 else 0
        self.resolution = self._nearest(10.0 ** -self.precision)
        self.has_sign = d["has_sign"]
        self.has_inf = d["has_inf"]
        self.has_nan = d["has_nan"]
        self.has_negative_zero = d["has_negative_zero"]
        self.has_subnormals = d["has_subnormals"]

    def _nearest(self, x):
        """The value of the format nearest the positive double x (ties to even), x <= max."""
        e = max(_math.frexp(x)[1] - 1, self.minexp)
        ulp = 2.0 ** (e - self.nmant)
        return max(round(x / ulp) * ulp, 0.0 if self.has_zero else self.smallest_subnormal)

    def __repr__(self):
        return (f"finfo(name={self.name}, bits={self.bits}, max={self.max!r}, tiny={self.tiny!r}, "
                f"smallest_subnormal={self.smallest_subnormal!r}, eps={self.eps!r}, has_inf={self.has_inf}, "
                f"has_nan={self.has_nan})")


# --- scalers ---------------------------------------------------------------------------

def _format_name(who, format):
    _check_str(who, "format", format)
    return finfo(format).name  # ValueError for a name cpd::format::parse rejects


def _world(who, world_size):
    return _int(who, "world_size", world_size, 1, 2**31 - 1)


def _margin(who, margin):
    return _int(who, "margin", margin, -2**31, 2**31 - 1)


def aps(format, world_size, margin=0):
    """APS (Han et al., PPoPP 2021) for world_size workers summing in `format`:
    statistic(g) = ceil(log2(max|g| * world_size)) (an int), combined by max over the
    workers, select(st) = the power of two 2^(emax - st - margin)."""
    who = "cpd.aps"
    name, w = _format_name(who, format), _world(who, world_size)
    return Scaler(_cpd.make_scaler("aps", format, world_size=w, margin=_margin(who, margin)), "aps", name, w)


def current_scaling(format, margin=0, epsilon=0.0, power_of_two=False):
    """Transformer Engine's current scaling: max(format) / max(amax, epsilon) / 2^margin."""
    who = "cpd.current_scaling"
    name = _format_name(who, format)
    return Scaler(_cpd.make_scaler("amax", format, margin=_margin(who, margin), epsilon=float(epsilon),
                                   power_of_two=bool(power_of_two)), "current_scaling", name)


def delayed_scaling(format, history_length=1024, amax_algorithm="max", margin=0):
    """Transformer Engine's delayed scaling: the scale of a step comes from the amax history."""
    who = "cpd.delayed_scaling"
    name = _format_name(who, format)
    history_length = _int(who, "history_length", history_length, 1, 2**32)
    _check_str(who, "amax_algorithm", amax_algorithm)
    return Scaler(_cpd.make_scaler("delayed", format, history_length=history_length, amax_algorithm=amax_algorithm,
                                   margin=_margin(who, margin)), "delayed_scaling", name)


def amax_sqrtw_scaling(format, world_size, margin=0, power_of_two=False):
    """MS-AMP's rule for W workers: max(format) / (amax * sqrt(W)) / 2^margin, a float scale."""
    who = "cpd.amax_sqrtw_scaling"
    name, w = _format_name(who, format), _world(who, world_size)
    return Scaler(_cpd.make_scaler("amax-sqrtw", format, world_size=w, margin=_margin(who, margin),
                                   power_of_two=bool(power_of_two)), "amax_sqrtw_scaling", name, w)


def predivide_scaling(world_size):
    """PyTorch's fp16_compress_hook: every worker multiplies by 1/W before the sum."""
    w = _world("cpd.predivide_scaling", world_size)
    return Scaler(_cpd.make_scaler("predivide", None, world_size=w), "predivide_scaling", None, w)


def dynamic_loss_scaling(init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                         min_scale=2.0**-126):
    """PyTorch GradScaler's dynamic loss scaling: statistic = found_inf (0 or 1)."""
    growth_interval = _int("cpd.dynamic_loss_scaling", "growth_interval", growth_interval, 1, 2**31 - 1)
    return Scaler(_cpd.make_scaler("loss", None, init_scale=float(init_scale), growth_factor=float(growth_factor),
                                   backoff_factor=float(backoff_factor), growth_interval=growth_interval,
                                   min_scale=float(min_scale)), "dynamic_loss_scaling")


def fixed_scaling(exponent=0):
    """A fixed power-of-two scale 2^exponent (its statistic says whether inf/NaN was seen)."""
    exponent = _int("cpd.fixed_scaling", "exponent", exponent, -2**31, 2**31 - 1)
    return Scaler(_cpd.make_scaler("fixed", None, exponent=exponent), "fixed_scaling")


# --- the simulated exchange -------------------------------------------------------------

def _scaler_for(who, scaler, format, world_size):
    if scaler is None or scaler == "none":
        return fixed_scaling(0)
    if isinstance(scaler, str):
        if scaler == "aps":
            return aps(format, world_size)
        raise ValueError(f"{who}: scaler '{scaler}' is not one of aps, none (or a cpd.Scaler with a "
                         "power-of-two scale)")
    if not isinstance(scaler, Scaler):
        raise TypeError(f"{who}: scaler must be 'aps', 'none', None or a cpd.Scaler, not {type(scaler).__name__}")
    name = finfo(format).name
    if scaler.format is not None and scaler.format != name:
        raise ValueError(f"{who}: the scaler {scaler.kind} was made for the format {scaler.format}; the exchange "
                         f"sums in {name}")
    if scaler.world_size is not None and scaler.world_size != world_size:
        raise ValueError(f"{who}: the scaler {scaler.kind} was made for {scaler.world_size} workers; the exchange "
                         f"has {world_size}")
    return scaler


def simulate_allreduce(tensors, format, scaler="aps", algorithm="ring", rounding="nearest_even", kahan=False,
                       mean=False, seed=0, stream=0, out=None, *, threads=None, diagnostics=False, generator=None):
    """cpd::simulate_allreduce: W workers' tensors (a list, same shape, one dtype of float16,
    bfloat16, float32, float64) summed in one process in the order of `algorithm`, every
    addition rounded to `format`; the result in their dtype (or out's, a wider one).

    scaler: "aps" (APS for W workers), "none", or a cpd.Scaler whose scale is a power of
    two (aps, fixed_scaling); its statistic is taken per worker and combined in rank
    order. Returns (result, info): info has the scale and nonfinite_out (and, with
    diagnostics, the counts of the scaled and unscaled quantization). float16 and bfloat16
    values widen to float32 (exact) and the sum narrows back where it is exact (else a
    ValueError); float64 values are rounded to the format from the double (as the
    simulation's own quantization, with its random bits), then summed in float32. CUDA tensors
    (torch, one device; with the CUDA module) are summed on their device by W device ranks of
    the rank schedule (cpd::cuda::rank_exchange): the same bits; halving_doubling, which has
    no rank schedule, on host copies; diagnostics only on the CPU."""
    who = "cpd.simulate_allreduce"
    _check_str(who, "format", format)
    seed = _int(who, "seed", seed, 0, 2**64 - 1)
    stream = _int(who, "stream", stream, 0, 2**64 - 1)
    g = _generator(who, generator)
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise TypeError(f"{who}: tensors must be a non-empty list of arrays or tensors of {_DTYPES}")
    if _cuda.on_device(tensors[0]):
        o = {"algorithm": algorithm, "rounding": rounding, "kahan": kahan, "mean": mean, "seed": seed, "stream": stream,
             "generator": g}
        return _simulate_on_device(who, tensors, format, scaler, o, out, diagnostics)
    views, name = [], None
    for r, x in enumerate(tensors):
        a, _, n, _ = _float_input(who, x)
        if views and a.shape != views[0].shape:
            raise ValueError(f"{who}: the workers' tensors differ in shape: {tuple(views[0].shape)} and "
                             f"{tuple(a.shape)}")
        if name is not None and n != name:
            raise TypeError(f"{who}: the workers' tensors differ in dtype: worker 0's is {name}, worker {r}'s {n}")
        views.append(a)
        name = n
    if out is not None:
        _out_apart(who, out, views)
    w = len(views)
    sc = _scaler_for(who, scaler, format, w)
    # every argument checked before select, which moves a stateful scaler (delayed, loss) on
    _cpd.check_simulation(format, rounding, algorithm, bool(kahan))
    if sc.kind not in ("aps", "fixed_scaling"):
        raise ValueError(f"{who}: the scaler {sc.kind} selects float scales; the simulation takes a power of two "
                         "(aps, fixed_scaling)")
    st = sc.identity
    for a in views:
        st = sc.combine(st, sc.statistic(_statistic_input(who, a, name)))
    scale = sc.select(st)
    info = {"scale": scale}
    arrays, scaled = _simulation_inputs(who, views, name, format, rounding, scale, (seed, stream, g),
                                        bool(diagnostics))
    if out is not None:  # out is a worker's tensor itself: that worker's values are copied first
        o = _float_input(who, out)[0]
        arrays = [a.copy() if _np.may_share_memory(a, o) else a for a in arrays]

    def body(_, o, _ni, no):
        wide = o if no == "float32" else _np.empty(o.shape, dtype=_np.float32)
        info.update(_cpd.simulate(arrays, wide, format, rounding, scale.exponent, scale.nonfinite, algorithm,
                                  bool(kahan), bool(mean), int(seed), int(stream), g, _threads(threads),
                                  bool(diagnostics)))
        if scaled is not None:
            info["scaled"] = scaled
        if no != "float32":
            done = _np.empty(o.shape, dtype=o.dtype)
            if _cpd.cast(wide, done, "float32", no) != 0:
                raise ValueError(f"{who}: the sum has values that are not {no} values (the format {format} and the "
                                 f"scale 2^{scale.exponent} give values beyond {no}'s precision or range); pass "
                                 "out= of float32")
            o[...] = done

    return _run(who, tensors[0], out, body), info


# The rules of simulate_block_scaled_allreduce: OCP MX's power of two per 32 values
# (cpd::mx_block_scaling) and NVFP4's E4M3 scale per 16 values times a tensor scale
# (cpd::nvfp4_block_scaling).
block_rules = ("mx32", "nvfp4")


def _float32_workers(who, tensors):
    """The W workers' float32 arrays or CPU tensors (one shape) as C-contiguous float32 arrays,
    and a function that gives a float32 result array in worker 0's kind (array or tensor)."""
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise TypeError(f"{who}: tensors must be a non-empty list of float32 arrays or CPU tensors")
    arrays = []
    for r, x in enumerate(tensors):
        if _is_tensor(x) and x.device.type != "cpu":
            raise TypeError(f"{who}: worker {r}'s tensor is on {x.device}; this exchange runs on the host "
                            "(pass .cpu() copies)")
        a, _, name, _ = _float_input(who, x)
        if name != "float32":
            raise TypeError(f"{who}: worker {r}'s tensor is {name}; this exchange takes float32")
        if arrays and a.shape != arrays[0].shape:
            raise ValueError(f"{who}: the workers' tensors differ in shape: {tuple(arrays[0].shape)} and "
                             f"{tuple(a.shape)}")
        arrays.append(_contiguous(a))
    if _is_tensor(tensors[0]):
        return arrays, lambda o: _torch().from_numpy(o)
    return arrays, lambda o: o


def simulate_block_scaled_allreduce(tensors, format, rule="mx32", algorithm="ring", kahan=False, mean=False, seed=0,
                                    stream=0, *, threads=None, diagnostics=False, generator=None):
    """cpd::simulate_block_scaled_allreduce: the W workers' float32 tensors (arrays or CPU
    tensors, one shape) summed in one process as simulate_allreduce sums them, with a scale per
    block instead of one per tensor. rule "mx32": OCP MX, a power of two per 32 values from the
    block's largest magnitude over all workers (cpd::mx_block_scaling); "nvfp4": an E4M3 scale
    per 16 values times one float32 tensor scale (cpd::nvfp4_block_scaling). The scaled values
    are rounded to `format` nearest-even, saturating (both rules say so), and summed in the
    order of `algorithm`; the sum is scaled back. Returns (result, info): info has nonfinite
    (some block held inf or NaN: the step should be skipped), nonfinite_out, blocks,
    tensor_scale (NVFP4's; 0 for MX) and, with diagnostics, the counts of the scaled and
    unscaled quantization (docs/scaling.md: "MX blocks as an exchange's scale", "NVFP4 as an
    exchange's scale")."""
    who = "cpd.simulate_block_scaled_allreduce"
    _check_str(who, "format", format)
    _check_str(who, "rule", rule)
    if rule not in block_rules:
        raise ValueError(f"{who}: rule {rule!r} is not one of " + ", ".join(block_rules))
    seed = _int(who, "seed", seed, 0, 2**64 - 1)
    stream = _int(who, "stream", stream, 0, 2**64 - 1)
    g = _generator(who, generator)
    arrays, wrap = _float32_workers(who, tensors)
    out = _np.empty(arrays[0].shape, dtype=_np.float32)
    info = _cpd.simulate_blocks(arrays, out, format, rule, algorithm, bool(kahan), bool(mean), int(seed), int(stream),
                                g, _threads(threads), bool(diagnostics))
    return wrap(out), info


def simulate_codec_allreduce(tensors, codec, mean=False, seed=0, stream=0, *, threads=None, generator=None):
    """cpd::simulate_codec_allreduce: the W workers' float32 tensors (arrays or CPU tensors, one
    shape) exchanged through a gradient codec named as cpd::make_codec names them ("int:8:32",
    "fp:e4m3fn", "fp:binary8p3se", "posit:8", "qsgd:4bit:512", ...; docs/codecs.md): worker r
    encodes its tensor with the stream stream * W + r, every payload is decoded and the W
    decoded tensors are added in float in rank order (divided by W for a mean). Returns
    (result, info): info has payload_bytes (one worker's), bits_per_value, nonfinite_out and
    the codec's name."""
    who = "cpd.simulate_codec_allreduce"
    _check_str(who, "codec", codec)
    seed = _int(who, "seed", seed, 0, 2**64 - 1)
    stream = _int(who, "stream", stream, 0, 2**64 - 1)
    g = _generator(who, generator)
    arrays, wrap = _float32_workers(who, tensors)
    out = _np.empty(arrays[0].shape, dtype=_np.float32)
    info = _cpd.simulate_codec(arrays, out, codec, bool(mean), int(seed), int(stream), g, _threads(threads))
    return wrap(out), info


def _simulate_on_device(who, tensors, format, scaler, o, out, diagnostics):
    """simulate_allreduce of torch CUDA tensors (o: algorithm, rounding, kahan, mean, seed,
    stream, generator): on their device (cpd/_torch_cuda.py), or for halving_doubling on host copies."""
    if not _cuda.available():
        raise TypeError(f"{who}: the tensors are on a GPU and {_cuda.why_missing()}")
    x0 = tensors[0]
    for r, x in enumerate(tensors):
        if not _is_tensor(x) or x.device != x0.device:
            raise TypeError(f"{who}: worker {r}'s tensor is not a torch tensor on {x0.device}, as worker 0's is; the "
                            "workers' tensors must lie on one device")
        if x.shape != x0.shape:
            raise ValueError(f"{who}: the workers' tensors differ in shape: {tuple(x0.shape)} and {tuple(x.shape)}")
        if x.dtype != x0.dtype:
            raise TypeError(f"{who}: the workers' tensors differ in dtype: worker 0's is {x0.dtype}, worker {r}'s "
                            f"{x.dtype}")
    name = _dtypes.torch_name(x0.dtype)
    if name is None:
        raise TypeError(f"{who}: the tensors are {x0.dtype}; cpd takes {_DTYPES}")
    if out is not None and (not _is_tensor(out) or out.device != x0.device or out.shape != x0.shape
                            or _dtypes.torch_name(out.dtype) not in _dtypes.WIDER[name]):
        raise TypeError(f"{who}: out must be a tensor on {x0.device} of the workers' shape and of "
                        f"{' or '.join(_dtypes.WIDER[name])}")
    sc = _scaler_for(who, scaler, format, len(tensors))
    _cpd.check_simulation(format, o["rounding"], o["algorithm"], bool(o["kahan"]))
    if sc.kind not in ("aps", "fixed_scaling"):
        raise ValueError(f"{who}: the scaler {sc.kind} selects float scales; the simulation takes a power of two "
                         "(aps, fixed_scaling)")
    if diagnostics:
        raise ValueError(f"{who}: diagnostics are counted on the CPU; pass CPU tensors (or diagnostics=False)")
    from . import _torch_cuda
    if o["algorithm"] in _torch_cuda.DEVICE_ALGORITHMS:
        return _torch_cuda.simulate(who, list(tensors), name, format, sc, o, out)
    # halving_doubling has no rank schedule: on the host
    res, info = simulate_allreduce([x.cpu() for x in tensors], format, sc, o["algorithm"], o["rounding"], o["kahan"],
                                   o["mean"], o["seed"], o["stream"], generator=o["generator"])
    if out is None:
        return res.to(x0.device), info
    out.copy_(res)
    return out, info


def _simulation_inputs(who, views, name, format, rounding, scale, key, diagnostics):
    """The workers' float32 arrays for _cpd.simulate, and the counts of their quantization where
    it is done here, else None. float16 and bfloat16 widen exactly; float64 values are rounded
    to the format from the double with the simulation's own scale and random bits (worker r:
    stream + 8 r, docs/reduction.md), so that the simulation's rounding of them changes nothing."""
    if name in ("float32", "float16", "bfloat16"):
        arrays = []
        for a in views:
            wide = _contiguous(a) if name == "float32" else _np.empty(a.shape, dtype=_np.float32)
            if name != "float32":
                _cpd.cast(_contiguous(a), wide, name, "float32")
            arrays.append(wide)
        return arrays, None
    arrays, counts = [], {}
    seed, stream, g = key
    for r, a in enumerate(views):
        q = _np.empty(a.shape, dtype=_np.float64)
        c = _cpd.quantize(_contiguous(a), q, "float64", "float64", format, rounding, "infinity", seed,
                          (stream + 8 * r) % 2**64, g, 0, scale.exponent, "a", "keep", "format", 0, diagnostics)
        wide = _np.empty(a.shape, dtype=_np.float32)
        if _cpd.cast(q, wide, "float64", "float32") != 0:
            raise ValueError(f"{who}: worker {r}'s values rounded to {format} (scale 2^{scale.exponent}) are not all "
                             "float32 values (beyond float32's range); the simulation sums float32 values")
        for k, v in (c or {}).items():
            counts[k] = counts.get(k, 0) + v
        arrays.append(wide)
    return arrays, (counts if diagnostics else None)


def _out_apart(who, out, views):
    """Checks, on the memory the arrays and tensors use, that out shares none with the workers'
    tensors, except that out may be one of them exactly (the workers' values are read into
    their own arrays before anything is written: see simulate_allreduce)."""
    o, _, _, _ = _float_input(who + " (out)", out)
    for r, v in enumerate(views):
        try:
            if not _np.shares_memory(o, v):
                continue
        except _np.TooHardError:
            pass  # (strides too intricate to tell: treated as overlapping)
        same = (o.__array_interface__["data"][0] == v.__array_interface__["data"][0] and o.shape == v.shape
                and o.strides == v.strides)
        if not same:
            raise ValueError(f"{who}: out overlaps worker {r}'s tensor (partly: out may be a worker's tensor itself, "
                             "or memory apart from them)")
