# SPDX-License-Identifier: MIT
"""Fake quantization inside models (docs/python.md#fake-quantization-inside-models), exported
by cpd.torch: QuantSpec (what one direction rounds to, and how), quantize_ste (the
straight-through estimator as an autograd function) and Quantizer (the nn.Module).

The forward value and the incoming gradient are rounded separately, each by its own
QuantSpec (or not at all: None). Random bits of stochastic rounding: a call with key
(seed, stream) rounds the forward value with the stream `stream` and the gradient with
`stream | 2**63`; a Quantizer's call n uses the stream (instance stream << 32) + n.
"""

import math as _math

import torch as _torch
from torch.autograd.function import once_differentiable as _once_differentiable

import cpd as _cpd_pkg

__all__ = ["QuantSpec", "quantize_ste", "Quantizer"]

#: The bit of the stream that tells the gradient's random bits from the forward value's.
BACKWARD_STREAM = 2**63
_SCALES = ("none", "amax", "mx")
_MX_ELEMENTS = ("e4m3fn", "e5m2", "e3m2finite", "e2m3finite", "e2m1finite")  # (finfo's names)


def next_instance_stream(who):
    """The stream of the next Quantizer (or cpd.qtorch.quantizer) built: 0, 1, 2, ... counted
    from the start of the program or the last cpd.manual_seed."""
    k = next(_cpd_pkg._seed_state["instances"])
    if k >= 2**31:
        raise ValueError(f"{who}: {k} quantizers were made since cpd.manual_seed; their streams end at 2**31")
    return k


def call_stream(instance, calls):
    """The stream of call `calls` of the quantizer with the stream `instance`."""
    return (instance << 32) + calls % 2**32


def _check_choice(who, name, value, choices):
    _cpd_pkg._check_str(who, name, value)
    if value not in choices:
        raise ValueError(f"{who}: {name} '{value}' is not one of " + ", ".join(choices))


class QuantSpec:
    """What one direction (the forward value or the gradient) is rounded to, and how.

    format: any name cpd.quantize takes; rounding: one of cpd.roundings; overflow:
    "infinity" or "saturate" (None: "infinity", as cpd.quantize; "saturate" with scale "mx");
    scale: "none"; "amax", a power of two per tensor and call, 2^(emax - ceil(log2 amax) -
    margin), APS's rule for one worker (cpd.aps(format, 1, margin)); an int k, the fixed
    scale 2^k (x * 2^k rounded, then times 2^-k); or "mx", OCP MX blocks of block_size
    consecutive values (C order) sharing an E8M0 scale chosen by `rule` (cpd.mx_quantize:
    format must be an MX element format, rounding nearest_even or stochastic)."""

    def __init__(self, format, rounding="nearest_even", overflow=None, scale="none", *, block_size=32,
                 rule="floor", margin=0):
        who = "cpd.torch.QuantSpec"
        _cpd_pkg._check_str(who, "format", format)
        info = _cpd_pkg.finfo(format)  # ValueError for a name cpd::format::parse rejects
        _check_choice(who, "rounding", rounding, _cpd_pkg.roundings)
        if isinstance(scale, str):
            _check_choice(who, "scale", scale, _SCALES)
        else:
            scale = _cpd_pkg._int(who, "scale (a fixed power-of-two exponent)", scale, -1100, 1100)
        if overflow is None:
            overflow = "saturate" if scale == "mx" else "infinity"
        _check_choice(who, "overflow", overflow, ("infinity", "saturate"))
        if scale == "mx":
            if info.name not in _MX_ELEMENTS:
                raise ValueError(f"{who}: scale 'mx' takes an OCP MX element format (e4m3fn, e5m2, e3m2fn, e2m3fn, "
                                 f"e2m1fn), not {format}")
            if rounding not in ("nearest_even", "stochastic"):
                raise ValueError(f"{who}: scale 'mx' rounds nearest_even or stochastic, not {rounding}")
            if overflow != "saturate":
                raise ValueError(f"{who}: overflow '{overflow}' with scale 'mx': OCP MX elements saturate")
        _check_choice(who, "rule", rule, ("floor", "ceil", "rceil", "even"))
        self.format, self.rounding, self.overflow, self.scale = format, rounding, overflow, scale
        self.block_size = _cpd_pkg._int(who, "block_size", block_size, 1, 2**32)
        self.rule = rule
        self.margin = _cpd_pkg._int(who, "margin", margin, 0, 64)
        self._emax = info.maxexp - 1

    def scale_exponent(self, x):
        """The k of the scale 2^k that rounding x uses (0 for "mx": its scales are per block)."""
        if isinstance(self.scale, int):
            return self.scale
        if self.scale != "amax" or x.numel() == 0:
            return 0
        amax = float(x.detach().abs().max())
        if amax == 0.0 or not _math.isfinite(amax):
            return 0  # (as APS: no scale for zeros; inf and NaN reach the rounding as they are)
        m, e = _math.frexp(amax)  # amax = m 2^e, m in [0.5, 1)
        return self._emax - (e - 1 if m == 0.5 else e) - self.margin

    def __call__(self, x, seed=None, stream=0):
        """x rounded as this spec says, with the random key (seed, stream) (seed None: the next
        key of cpd.manual_seed's sequence). Same shape, dtype and device as x."""
        seed, stream, g = _cpd_pkg._key(self.rounding, seed, stream, "cpd.torch.QuantSpec")
        if self.scale == "mx":
            return _cpd_pkg.mx_quantize(x, self.format, self.block_size, self.rule, self.rounding, seed=seed,
                                        stream=stream, generator=g)
        return _cpd_pkg.quantize(x, self.format, self.rounding, self.overflow, seed=seed,
                                 scale_exponent=self.scale_exponent(x), stream=stream, generator=g)

    def __eq__(self, other):
        return isinstance(other, QuantSpec) and repr(self) == repr(other)

    def __hash__(self):
        return hash(repr(self))

    def __repr__(self):
        extra = ""
        if self.scale == "mx":
            extra = f", block_size={self.block_size}, rule='{self.rule}'"
        elif self.scale == "amax" and self.margin:
            extra = f", margin={self.margin}"
        return (f"QuantSpec('{self.format}', rounding='{self.rounding}', overflow='{self.overflow}', "
                f"scale={self.scale!r}{extra})")


def as_spec(who, name, value, rounding, overflow, scale):
    """None (that direction is not rounded), a QuantSpec, or a format name made into
    QuantSpec(name, rounding, overflow, scale)."""
    if value is None or isinstance(value, QuantSpec):
        return value
    if isinstance(value, str):
        return QuantSpec(value, rounding, overflow, scale)
    raise TypeError(f"{who}: {name} must be None, a format name or a cpd.torch.QuantSpec, not "
                    f"{type(value).__name__}")


class RoundSTE(_torch.autograd.Function):
    """forward: fwd(x, seed, stream) (or x as it is); backward: bwd(grad, seed, stream |
    BACKWARD_STREAM) (or the gradient as it is). fwd and bwd: callables such as QuantSpec."""

    @staticmethod
    def forward(ctx, x, fwd, bwd, seed, stream):  # pylint: disable=arguments-differ
        ctx.cpd_backward = (bwd, seed, stream)
        return x.view_as(x) if fwd is None else fwd(x, seed, stream)

    @staticmethod
    @_once_differentiable
    def backward(ctx, grad):  # pylint: disable=arguments-differ
        bwd, seed, stream = ctx.cpd_backward
        if bwd is not None:
            grad = bwd(grad, seed, stream | BACKWARD_STREAM)
        return grad, None, None, None, None


def check_seed(who, seed):
    return None if seed is None else _cpd_pkg._int(who, "seed", seed, 0, 2**64 - 1)


def quantize_ste(x, forward=None, backward=None, rounding="nearest_even", overflow=None, scale="none", *, seed=None,
                 stream=0):
    """x rounded to `forward` (None: x as it is), whose gradient is the incoming gradient
    rounded to `backward` (None: as it is): the straight-through estimator. forward and
    backward: a format name (with rounding, overflow and scale as given here) or a QuantSpec.
    Stochastic rounding draws the forward value's bits from (seed, stream) and the gradient's
    from (seed, stream | 2**63); seed None: the next keys of cpd.manual_seed's sequence."""
    who = "cpd.torch.quantize_ste"
    fwd = as_spec(who, "forward", forward, rounding, overflow, scale)
    bwd = as_spec(who, "backward", backward, rounding, overflow, scale)
    if not isinstance(x, _torch.Tensor):
        raise TypeError(f"{who}: x must be a torch.Tensor, not {type(x).__name__}")
    return RoundSTE.apply(x, fwd, bwd, check_seed(who, seed), _cpd_pkg._int(who, "stream", stream, 0, 2**63 - 1))


class Quantizer(_torch.nn.Module):
    """A layer that rounds what passes through it to `forward` and the gradient that comes back
    to `backward` (quantize_ste), each None, a format name or a QuantSpec:

        net = nn.Sequential(nn.Linear(64, 64), Quantizer("e4m3fn", "e5m2", scale="amax"), nn.ReLU())

    Random bits: call n (the attribute `calls`, counted from 0, kept in the state_dict) draws
    from (seed, (stream << 32) + n) forward and that stream | 2**63 backward. seed None: the
    seed of the last cpd.manual_seed (0 without one), read when the layer is built; stream
    None: the number of Quantizers built before this one since the program started or
    cpd.manual_seed."""

    def __init__(self, forward=None, backward=None, rounding="nearest_even", overflow=None, scale="none", *,
                 seed=None, stream=None):
        super().__init__()
        who = "cpd.torch.Quantizer"
        self.forward_spec = as_spec(who, "forward", forward, rounding, overflow, scale)
        self.backward_spec = as_spec(who, "backward", backward, rounding, overflow, scale)
        self.seed = _cpd_pkg._seed_state["seed"] if seed is None else check_seed(who, seed)
        self.stream = next_instance_stream(who) if stream is None else _cpd_pkg._int(who, "stream", stream, 0,
                                                                                      2**31 - 1)
        self.calls = 0

    def forward(self, x):  # pylint: disable=arguments-differ
        stream = call_stream(self.stream, self.calls)
        self.calls += 1
        return quantize_ste(x, self.forward_spec, self.backward_spec, seed=self.seed, stream=stream)

    def get_extra_state(self):
        """The call counter, in the module's state_dict: a model restored from a checkpoint
        goes on with the random bits it would have drawn next."""
        return {"calls": self.calls}

    def set_extra_state(self, state):
        self.calls = _cpd_pkg._int("cpd.torch.Quantizer.load_state_dict", "calls", state["calls"], 0, 2**63)

    def extra_repr(self):
        return f"forward={self.forward_spec}, backward={self.backward_spec}, seed={self.seed}, stream={self.stream}"

