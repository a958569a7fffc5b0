# SPDX-License-Identifier: MIT
"""cpd.qtorch: QPyTorch's calls (qtorch 0.3.0) on cpd, so that a QPyTorch program switches
by changing its imports (docs/python.md#switching-from-qpytorch):

    from qtorch import FloatingPoint            ->  from cpd.qtorch import FloatingPoint
    from qtorch.quant import float_quantize     ->  from cpd.qtorch.quant import float_quantize
    from qtorch.optim import OptimLP            ->  from cpd.qtorch.optim import OptimLP

float_quantize(x, exp, man, rounding) gives QPyTorch's values: exponent bias 2^(exp-1) - 1
with every exponent finite (the largest value is 2^(2^(exp-1)) (2 - 2^-man)), subnormals,
saturation to +-max, nearest rounding with ties away from zero, stochastic rounding with
QPyTorch's probabilities, and QPyTorch's own quirks (a subnormal input is first rounded by
a float32 addition; zero results are +0). It is cpd.quantize to the format
e<exp>m<man>finite (exp < 8) or e8m<man> (exp >= 8) in the modes nearest_away or stochastic,
with those two quirks applied around it. What differs from QPyTorch (NaN stays NaN, the
random bits are cpd's, reproducible; errors are ValueError or TypeError) is listed in
docs/python.md. Fixed point and block floating point (FixedPoint, BlockFloatingPoint,
fixed_point_quantize, block_quantize) are not yet in cpd: they raise NotImplementedError.
"""

import sys as _sys
import types as _types

import torch as _torch

import cpd as _cpd_pkg
from . import _fakequant as _fq

__all__ = ["Number", "FloatingPoint", "FixedPoint", "BlockFloatingPoint", "float_quantize", "fixed_point_quantize",
           "block_quantize", "quantizer", "Quantizer", "OptimLP"]

_NOT_YET = ("{what} is not yet in cpd (fixed point and block floating point are issue 33; see docs/python.md, "
            "Switching from QPyTorch); cpd.qtorch has FloatingPoint, float_quantize, quantizer, Quantizer and OptimLP")
_ROUNDINGS = ("stochastic", "nearest")


def _int(who, name, v, lo, hi):
    return _cpd_pkg._int(who, name, v, lo, hi)


class Number:
    """A number format of QPyTorch (FloatingPoint; FixedPoint and BlockFloatingPoint raise)."""


class FloatingPoint(Number):
    """QPyTorch's FloatingPoint(exp, man): exp in [1, 8] exponent bits, man in [1, 23]
    mantissa bits (float_quantize's values; cpd's format e<exp>m<man>finite, e8m<man> for 8)."""

    def __init__(self, exp, man):
        self.exp = _int("cpd.qtorch.FloatingPoint", "exp", exp, 1, 8)
        self.man = _int("cpd.qtorch.FloatingPoint", "man", man, 1, 23)

    def __str__(self):
        return f"FloatingPoint (exponent={self.exp:d}, mantissa={self.man:d})"

    __repr__ = __str__


class FixedPoint(Number):
    """QPyTorch's FixedPoint: not yet in cpd (NotImplementedError)."""

    def __init__(self, wl, fl, clamp=True, symmetric=False):
        raise NotImplementedError(_NOT_YET.format(what="cpd.qtorch.FixedPoint"))


class BlockFloatingPoint(Number):
    """QPyTorch's BlockFloatingPoint: not yet in cpd (NotImplementedError)."""

    def __init__(self, wl, dim=-1):
        raise NotImplementedError(_NOT_YET.format(what="cpd.qtorch.BlockFloatingPoint"))


class _FloatRounding:
    """QPyTorch's float quantization of (exp, man) in a rounding mode, as a callable
    (x, seed, stream) -> tensor for cpd.torch's straight-through function."""

    def __init__(self, who, exp, man, rounding):
        exp = _int(who, "exp", exp, 1, 31)
        man = _int(who, "man", man, 0, 23)
        _cpd_pkg._check_str(who, "rounding", rounding)
        if rounding not in _ROUNDINGS:
            raise ValueError(f"{who}: rounding '{rounding}' is not one of stochastic, nearest (QPyTorch's modes)")
        if exp >= 8 and man == 0:
            raise ValueError(f"{who}: exp {exp} with man 0 has no cpd format (an exponent-only format with float32's "
                             "range and inf); QPyTorch's FloatingPoint takes man >= 1")
        # exp >= 8: float32's exponent range (QPyTorch clips nothing there); exp > 8 rounds float32's
        # subnormals bit by bit, as e8 does, but keeps -0.
        self.format = f"e{exp}m{man}finite" if exp < 8 else f"e8m{man}"
        self.overflow = "saturate" if exp < 8 else "infinity"
        self.mode = "nearest_away" if rounding == "nearest" else "stochastic"
        self.smallest_normal = 2.0 ** (2 - 2 ** (exp - 1)) if exp < 8 else None
        self.plus_zero = exp <= 8

    def _first_rounding(self, x):
        """QPyTorch's subnormal path, in float32: x + sign(x) 2^emin rounded to float32, then
        rounded to the format and 2^emin taken off; the addition rounds x's bits below
        2^(emin - 23) first (to nearest even), which cpd would round only once."""
        if self.smallest_normal is None or x.dtype != _torch.float32:
            return x
        small = x.abs() < self.smallest_normal
        shift = _torch.full_like(x, self.smallest_normal).copysign_(x)
        return _torch.where(small, (x + shift) - shift, x)

    def __call__(self, x, seed=None, stream=0):
        y = _cpd_pkg.quantize(self._first_rounding(x), self.format, self.mode, self.overflow, seed=seed,
                              stream=stream)
        if self.plus_zero:  # (QPyTorch's subnormal path gives (-2^emin) - (-2^emin) = +0)
            y.masked_fill_(y == 0, 0.0)
        return y


def float_quantize(x, exp, man, rounding="stochastic"):
    """QPyTorch's float_quantize: x (a tensor) rounded to `exp` exponent and `man` mantissa
    bits, "stochastic" or "nearest" (ties away from zero). Stochastic rounding draws the
    next key of cpd.manual_seed's sequence."""
    who = "cpd.qtorch.float_quantize"
    if not isinstance(x, _torch.Tensor):
        raise TypeError(f"{who}: x must be a torch.Tensor, not {type(x).__name__}")
    return _FloatRounding(who, exp, man, rounding)(x)


def fixed_point_quantize(x, wl, fl, clamp=True, symmetric=False, rounding="stochastic"):
    """QPyTorch's fixed_point_quantize: not yet in cpd (NotImplementedError)."""
    raise NotImplementedError(_NOT_YET.format(what="cpd.qtorch.fixed_point_quantize"))


def block_quantize(x, wl, dim=-1, rounding="stochastic"):
    """QPyTorch's block_quantize: not yet in cpd (NotImplementedError)."""
    raise NotImplementedError(_NOT_YET.format(what="cpd.qtorch.block_quantize"))


def _rounding_of(who, number, rounding, which):
    if number is None:
        return None
    if not isinstance(number, FloatingPoint):
        raise TypeError(f"{who}: {which}_number must be None or a cpd.qtorch.FloatingPoint, not "
                        f"{type(number).__name__}")
    return _FloatRounding(who, number.exp, number.man, rounding)


class _Hooked:
    """The backward rounding after QPyTorch's backward_hooks."""

    def __init__(self, hooks, rounding):
        self.hooks, self.rounding = hooks, rounding

    def __call__(self, grad, seed, stream):
        for f in self.hooks:
            grad = f(grad)
        return self.rounding(grad, seed, stream)


class _QuantizeFunction:
    """What quantizer() returns: x -> x rounded forward, its gradient rounded backward. Call n
    draws from (seed, (stream << 32) + n), the gradient from that stream | 2**63, as
    cpd.torch.Quantizer."""

    def __init__(self, fwd, bwd, seed, stream):
        self.fwd, self.bwd, self.seed, self.stream = fwd, bwd, seed, stream
        self.calls = 0

    def __call__(self, x):
        stream = _fq.call_stream(self.stream, self.calls)
        self.calls += 1
        return _fq.RoundSTE.apply(x, self.fwd, self.bwd, self.seed, stream)


def quantizer(forward_number=None, backward_number=None, forward_rounding="stochastic",
              backward_rounding="stochastic", clamping_grad_zero=False, backward_hooks=()):
    """QPyTorch's quantizer: a function that rounds its input to forward_number and the
    gradient to backward_number (None: not rounded), each in its rounding mode; the
    backward_hooks run on the gradient before it is rounded. Its random bits are those of a
    cpd.torch.Quantizer built at this point."""
    who = "cpd.qtorch.quantizer"
    for r in (forward_rounding, backward_rounding):
        _cpd_pkg._check_str(who, "rounding", r)
        if r not in _ROUNDINGS:
            raise ValueError(f"{who}: rounding '{r}' is not one of stochastic, nearest (QPyTorch's modes)")
    fwd = _rounding_of(who, forward_number, forward_rounding, "forward")
    bwd = _rounding_of(who, backward_number, backward_rounding, "backward")
    if clamping_grad_zero and forward_number is not None:
        raise ValueError(f"{who}: clamping_grad_zero=True takes fixed point numbers only (as QPyTorch), and "
                         "cpd.qtorch has no FixedPoint yet")
    hooks = list(backward_hooks)
    if bwd is not None and hooks:
        bwd = _Hooked(hooks, bwd)
    return _QuantizeFunction(fwd, bwd, _cpd_pkg._seed_state["seed"], _fq.next_instance_stream(who))


class Quantizer(_torch.nn.Module):
    """QPyTorch's Quantizer module: forward(x) = quantizer(...)(x)."""

    def __init__(self, forward_number=None, backward_number=None, forward_rounding="stochastic",
                 backward_rounding="stochastic"):
        super().__init__()
        self.quantize = quantizer(forward_number, backward_number, forward_rounding, backward_rounding)

    def forward(self, x):  # pylint: disable=arguments-differ
        return self.quantize(x)


class OptimLP(_torch.optim.Optimizer):
    """QPyTorch's OptimLP: wraps an SGD or Adam optimizer. step() quantizes every gradient
    (times grad_scaling, which stays in the gradient), steps the optimizer on the weights, or
    on the accumulators when acc_quant is given (then the accumulators are acc_quant(result)),
    sets each weight to weight_quant(its new value) and replaces the optimizer's momentum
    buffers (SGD: momentum_buffer; Adam: exp_avg, exp_avg_sq) by momentum_quant(them). Each
    *_quant is a function (quantizer(...), a lambda of float_quantize) or None."""

    def __init__(self, optim, weight_quant=None, grad_scaling=1.0, grad_quant=None, momentum_quant=None,
                 acc_quant=None):
        who = "cpd.qtorch.OptimLP"
        if not isinstance(optim, (_torch.optim.SGD, _torch.optim.Adam)):
            raise TypeError(f"{who}: optim must be a torch.optim.SGD or Adam (as QPyTorch's), not "
                            f"{type(optim).__name__}")
        if not isinstance(grad_scaling, (int, float)) or isinstance(grad_scaling, bool) or not grad_scaling > 0:
            raise ValueError(f"{who}: grad_scaling must be a positive number, not {grad_scaling!r}")
        super().__init__(optim.param_groups, optim.defaults)
        self.param_groups = optim.param_groups
        self.optim = optim
        self.grad_scaling = grad_scaling
        self.weight_quant, self.grad_quant = weight_quant, grad_quant
        self.momentum_quant, self.acc_quant = momentum_quant, acc_quant
        self.momentum_keys = ["momentum_buffer"] if isinstance(optim, _torch.optim.SGD) else ["exp_avg", "exp_avg_sq"]
        if acc_quant is not None:
            self.weight_acc = {p: p.detach().clone() for group in self.param_groups for p in group["params"]}

    def _params(self):
        return [p for group in self.param_groups for p in group["params"]]

    @_torch.no_grad()
    def step(self, closure=None):  # pylint: disable=arguments-differ
        loss = None
        if closure is not None:  # (QPyTorch never calls it)
            with _torch.enable_grad():
                loss = closure()
        if self.grad_quant is not None:
            for p in self._params():
                if p.grad is not None:
                    p.grad.data = self.grad_quant(p.grad.data * self.grad_scaling)
        if self.acc_quant is not None:
            for p in self._params():
                p.data = self.weight_acc[p].data
        self.optim.step()
        if self.acc_quant is not None:
            for p in self._params():
                p.data = self.weight_acc[p].data = self.acc_quant(p.data).data
        if self.weight_quant is not None:
            for p in self._params():
                p.data = self.weight_quant(p.data).data
        if self.momentum_quant is not None:
            self._quantize_momentum()
        return loss

    def _quantize_momentum(self):
        for group in self.param_groups:
            if isinstance(self.optim, _torch.optim.SGD) and group["momentum"] == 0:
                continue
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.optim.state[p]
                for key in self.momentum_keys:
                    state[key] = self.momentum_quant(state[key])

    def state_dict(self):
        return self.optim.state_dict()

    def load_state_dict(self, state_dict):
        self.optim.load_state_dict(state_dict)

    def __repr__(self):
        return f"LP Optimizer: {self.optim!r}"

    def __str__(self):
        return f"LP Optimizer: {self.optim}"


# QPyTorch's module layout: qtorch.quant and qtorch.optim, importable as cpd.qtorch.quant and
# cpd.qtorch.optim (modules made here, as os.path is).
def _submodule(name, names, doc):
    m = _types.ModuleType(f"{__name__}.{name}", doc)
    for n in names:
        setattr(m, n, globals()[n])
    m.__all__ = list(names)
    _sys.modules[m.__name__] = m
    return m


quant = _submodule("quant", ["fixed_point_quantize", "block_quantize", "float_quantize", "quantizer", "Quantizer"],
                   "QPyTorch's qtorch.quant on cpd (see cpd.qtorch).")
optim = _submodule("optim", ["OptimLP"], "QPyTorch's qtorch.optim on cpd (see cpd.qtorch).")
