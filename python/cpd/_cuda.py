# SPDX-License-Identifier: MIT
"""cpd's calls on GPU arrays (docs/python.md, "CUDA"): torch CUDA tensors, and arrays that
offer __cuda_array_interface__ (CuPy, JAX, Numba) or DLPack on a CUDA device, through the
CUDA module cpd._cpd_cuda on the array's current stream (torch: torch.cuda.current_stream;
the interface's 'stream'), without a host copy and without torch's C++ ABI: the module takes
the pointer, the count, the dtype and the stream as integers. The package imports and works
without the module; a GPU array is then a TypeError that says so."""

import importlib as _importlib

try:
    from . import _cpd_cuda as _native
    _missing = None
except ImportError as e:  # built without nvcc, or no CUDA runtime to load
    _native, _missing = None, str(e)

from . import _dtypes

_KDL_CUDA, _KDL_CUDA_MANAGED = 2, 13
# The package whose from_dlpack takes a result back, by the module its array type lives in
# (JAX's arrays are jaxlib's types: jaxlib._jax.ArrayImpl).
_PRODUCERS = {"jaxlib": "jax"}
_TYPESTR = {"f2": "float16", "f4": "float32", "f8": "float64"}
_CODES = {"u1": 1, "i1": 1, "u2": 2, "i2": 2, "u4": 4, "i4": 4}


def available():
    """Whether the CUDA module is built and loads (a GPU may still be absent: device_count)."""
    return _native is not None


def device_count():
    return _native.device_count() if _native is not None else 0


def why_missing():
    if _native is not None:
        return "mx_quantize runs on the CPU: move the tensors with .cpu()"
    return ("this cpd has no CUDA module cpd._cpd_cuda: pip install it where nvcc is found, docs/python.md"
            + (f"; {_missing}" if _missing else ""))


def _is_torch(x):
    return type(x).__module__.startswith("torch") and hasattr(x, "device") and hasattr(x, "data_ptr")


def on_device(x):
    """Whether x is an array on a CUDA device (torch, __cuda_array_interface__, DLPack)."""
    if _is_torch(x):
        return x.device.type == "cuda"
    if type(x).__module__.startswith("numpy"):
        return False
    try:
        if hasattr(x, "__cuda_array_interface__"):
            return True
        dev = getattr(x, "__dlpack_device__", None)
        return dev is not None and dev()[0] in (_KDL_CUDA, _KDL_CUDA_MANAGED)
    except Exception:  # pylint: disable=broad-except  (an array on no CUDA device: not ours)
        return False


class _Array:
    """A C-contiguous device array: pointer, shape, count, dtype name (values) or code bytes,
    device, stream, and how to make a result of the same kind."""

    def __init__(self, who, x, writable=False):
        import torch  # noqa: F401  (only where GPU arrays are passed)
        self.obj, self.who = x, who
        if not _is_torch(x) and not hasattr(x, "__cuda_array_interface__"):
            x = torch.utils.dlpack.from_dlpack(x)  # DLPack only: a zero-copy torch view
            self.producer = self.obj
        else:
            self.producer = None
        if _is_torch(x):
            self._from_torch(x, writable)
        else:
            self._from_interface(x, writable)
        self.n = 1
        for d in self.shape:
            self.n *= d

    def _from_torch(self, t, writable):
        import torch
        if not t.is_contiguous():
            if writable:
                raise ValueError(f"{self.who}: out is a non-contiguous CUDA tensor; pass a contiguous one")
            t = t.contiguous()  # (a copy on the device)
        self.tensor, self.shape = t, tuple(t.shape)
        self.name = _dtypes.torch_name(t.dtype)
        codes = {torch.uint8: 1, torch.int8: 1, torch.int16: 2, torch.int32: 4}
        self.code_bytes = codes.get(t.dtype)
        self.kind = str(t.dtype)
        self.ptr, self.device = t.data_ptr(), t.device.index
        self.stream = torch.cuda.current_stream(t.device).cuda_stream

    def _from_interface(self, x, writable):
        d = x.__cuda_array_interface__
        self.tensor, self.shape = None, tuple(d["shape"])
        self.ptr, readonly = d["data"]
        if writable and readonly:
            raise ValueError(f"{self.who}: out is read-only")
        strides = d.get("strides")
        if strides is not None:
            size, want = int(d["typestr"][2:]), []
            for n in reversed(self.shape):
                want.insert(0, size)
                size *= n
            if any(s != w for s, w, n in zip(strides, want, self.shape) if n > 1):
                raise ValueError(f"{self.who}: the device array is not C-contiguous (strides {strides}); pass a "
                                 "contiguous copy")
        key = d["typestr"][1:]
        self.name, self.code_bytes, self.kind = _TYPESTR.get(key), _CODES.get(key), d["typestr"]
        stream = d.get("stream")
        self.stream = 0 if stream is None else int(stream)  # 1, 2: the legacy and per-thread default streams
        self.device = _native.pointer_device(self.ptr) if self.ptr else 0

    def values(self):
        if self.name is None:
            raise TypeError(f"{self.who}: the device array holds {self.kind}; cpd takes float16, bfloat16, float32 "
                            "or float64")
        return self.name

    def codes(self):
        if self.code_bytes is None:
            raise TypeError(f"{self.who}: codes must be uint8, int8, int16/uint16 or int32/uint32, not {self.kind}")
        return self.code_bytes

    def empty(self, shape, name=None, code_bytes=None):
        """(result in the input's kind, its _Array): a new device array of `name` (values)
        or of codes of code_bytes bytes, on the input's device."""
        import torch
        if self.tensor is not None and self.producer is None:
            dt = getattr(torch, name) if name else {1: torch.uint8, 2: torch.int16, 4: torch.int32}[code_bytes]
            t = torch.empty(shape, dtype=dt, device=self.tensor.device)
            return t, _Array(self.who, t, writable=True)
        root = type(self.obj).__module__.split(".")[0]
        root = _PRODUCERS.get(root, root)
        if root == "cupy":
            import cupy
            dt = _dtypes.numpy_dtype(self.who, name) if name else {1: "uint8", 2: "uint16", 4: "uint32"}[code_bytes]
            with cupy.cuda.Device(self.device):
                a = cupy.empty(shape, dtype=dt)
            return a, _Array(self.who, a, writable=True)
        # (JAX and others: a torch tensor, handed to the producer's from_dlpack)
        dt = getattr(torch, name) if name else {1: torch.uint8, 2: torch.int16, 4: torch.int32}[code_bytes]
        t = torch.empty(shape, dtype=dt, device=f"cuda:{self.device}")
        return _Handoff(root, t), _Array(self.who, t, writable=True)


class _Handoff:
    """A result made as a torch tensor for an array library that takes it through DLPack."""

    def __init__(self, root, tensor):
        self.root, self.tensor = root, tensor

    def finish(self):
        for name in (self.root + ".numpy", self.root, self.root + ".dlpack"):
            try:
                f = getattr(_importlib.import_module(name), "from_dlpack", None)
            except ImportError:
                f = None
            if f is not None:
                return f(self.tensor)
        return self.tensor


def _require(who, x):
    if _native is None:
        raise TypeError(f"{who}: the array is on a GPU and {why_missing()}")
    return _Array(who, x)


def _target(who, a, out, shape, name=None, code_bytes=None):
    """(result, output _Array): out itself (same shape, on a GPU) or a new array."""
    if out is None:
        return a.empty(shape, name=name, code_bytes=code_bytes)
    if not on_device(out):
        raise TypeError(f"{who}: the input is on a GPU and out is not; pass out= on the same device (or none)")
    o = _Array(who + " (out)", out, writable=True)
    if o.shape != a.shape:
        raise ValueError(f"{who}: out has shape {o.shape}, the input {a.shape}")
    if o.device != a.device:
        raise ValueError(f"{who}: out is on device {o.device}, the input on {a.device}")
    return out, o


def _done(result):
    return result.finish() if isinstance(result, _Handoff) else result


def dtype_name(who, x):
    return _require(who, x).values()


def quantize(x, out, exact, format, rounding, overflow, seed, stream, generator, offset, scale_exponent):
    who = "cpd.quantize"
    a = _require(who, x)
    name = a.values()
    result, o = _target(who, a, out, a.shape, name=name)
    oname = o.values()
    if oname not in _dtypes.WIDER[name]:
        raise TypeError(f"{who}: out is {oname} and the input {name}; out must be "
                        f"{' or '.join(_dtypes.WIDER[name])}")
    exact(oname)
    _native.quantize(a.ptr, name, o.ptr, oname, a.n, format, rounding, overflow, seed, stream, generator, offset,
                     scale_exponent, a.stream, a.device)
    return _done(result)


def encode(x, out, bits, format, rounding, overflow, seed, stream, generator, offset, scale_exponent):
    who = "cpd.encode"
    a = _require(who, x)
    name = a.values()
    width = 1 if bits <= 8 else (2 if bits <= 16 else 4)
    result, o = _target(who, a, out, a.shape, code_bytes=width)
    _native.encode(a.ptr, name, o.ptr, o.codes(), a.n, format, rounding, overflow, seed, stream, generator, offset,
                   scale_exponent, a.stream, a.device)
    return _done(result)


def decode(codes, out, name, exact, format, scale_exponent):
    who = "cpd.decode"
    a = _require(who, codes)
    width = a.codes()
    result, o = _target(who, a, out, a.shape, name=name)
    oname = o.values()
    exact(oname)
    _native.decode(a.ptr, width, o.ptr, oname, a.n, format, scale_exponent, a.stream, a.device)
    return _done(result)


def amax(who, x):
    """max|x| of a GPU array, as a Python float (NaN when x holds one)."""
    a = _require(who, x)
    return _native.amax(a.ptr, a.values(), a.n, a.stream, a.device)
