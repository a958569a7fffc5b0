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
docs/python.md. fixed_point_quantize is cpd.fixed_point_quantize (QPyTorch's nearest is
nearest_even, its nearbyint); block_quantize follows QPyTorch's CPU kernel step by step (the
float32 addition of 6 * 2^e, the rounding of wl bits half up or stochastic, the clip to the
block's exponent), with the block maximum taken of |x| for every dim.
"""

import sys as _sys
import types as _types

import torch as _torch

import cpd as _cpd_pkg
from . import _fakequant as _fq

__all__ = ["Number", "FloatingPoint", "FixedPoint", "BlockFloatingPoint", "float_quantize", "fixed_point_quantize",
           "block_quantize", "quantizer", "Quantizer", "OptimLP"]

_ROUNDINGS = ("stochastic", "nearest")


def _int(who, name, v, lo, hi):
    return _cpd_pkg._int(who, name, v, lo, hi)


class Number:
    """A number format of QPyTorch: FloatingPoint, FixedPoint or BlockFloatingPoint."""


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
    """QPyTorch's FixedPoint(wl, fl, clamp=True, symmetric=False): wl bits, two's complement,
    fl of them after the binary point (cpd.fixed_point_quantize's)."""

    def __init__(self, wl, fl, clamp=True, symmetric=False):
        self.wl = _int("cpd.qtorch.FixedPoint", "wl", wl, 2, 64)
        self.fl = _int("cpd.qtorch.FixedPoint", "fl", fl, -2**31, 2**31 - 1)
        self.clamp, self.symmetric = bool(clamp), bool(symmetric)

    def __str__(self):
        return f"FixedPoint (wl={self.wl:d}, fl={self.fl:d})"

    __repr__ = __str__


class BlockFloatingPoint(Number):
    """QPyTorch's BlockFloatingPoint(wl, dim=-1): wl bits per value (sign included) under one
    exponent per block; the blocks are the slices of dimension dim (-1: the whole tensor)."""

    def __init__(self, wl, dim=-1):
        self.wl = _int("cpd.qtorch.BlockFloatingPoint", "wl", wl, 2, 23)
        self.dim = _int("cpd.qtorch.BlockFloatingPoint", "dim", dim, -1, 2**31 - 1)

    def __str__(self):
        return f"BlockFloatingPoint (wl={self.wl:d}, dim={self.dim:d})"

    __repr__ = __str__


def _mode(who, rounding):
    _cpd_pkg._check_str(who, "rounding", rounding)
    if rounding not in _ROUNDINGS:
        raise ValueError(f"{who}: rounding '{rounding}' is not one of stochastic, nearest (QPyTorch's modes)")
    return rounding


class _FixedRounding:
    """fixed_point_quantize as a callable (x, seed, stream) -> tensor; with_mask also returns
    where the rounded value was clamped (QPyTorch's clamping_grad_zero)."""

    def __init__(self, who, wl, fl, clamp, symmetric, rounding):
        self.number = FixedPoint(wl, fl, clamp, symmetric)
        self.mode = "nearest_even" if _mode(who, rounding) == "nearest" else "stochastic"

    def __call__(self, x, seed=None, stream=0, clamp=None):
        n = self.number
        return _cpd_pkg.fixed_point_quantize(x, n.wl, n.fl, n.clamp if clamp is None else clamp, n.symmetric,
                                             self.mode, seed=seed, stream=stream)

    def with_mask(self, x, seed, stream):
        y = self(x, seed, stream, clamp=False)  # the same random bits: the value before the clamp
        n = self.number
        hi = float((2 ** (n.wl - 1) - 1) * 2.0 ** -n.fl)
        lo = -hi if n.symmetric else -(2.0 ** (n.wl - 1 - n.fl))
        mask = (y > hi) | (y < lo)
        return self(x, seed, stream, clamp=True), mask


class _BlockRounding:
    """QPyTorch's block_quantize as a callable (x, seed, stream) -> tensor."""

    def __init__(self, who, wl, dim, rounding):
        self.number = BlockFloatingPoint(wl, dim)
        self.mode = "nearest_away" if _mode(who, rounding) == "nearest" else "stochastic"
        self.who = who

    def __call__(self, x, seed=None, stream=0):
        if x.dtype != _torch.float32:
            raise TypeError(f"{self.who}: QPyTorch's block floating point takes float32 tensors, not {x.dtype}")
        wl, dim = self.number.wl, self.number.dim
        if dim != -1 and dim >= x.dim():
            raise ValueError(f"{self.who}: dim {dim} is not a dimension of a {x.dim()}-d tensor")
        finite = _torch.isfinite(x)
        a = _torch.where(finite, x, _torch.zeros_like(x)).abs()
        if dim == -1 or x.dim() == 0:
            amax = a.amax() if a.numel() else a.new_zeros(())
        else:
            others = [d for d in range(x.dim()) if d != dim]
            amax = a.amax(dim=others, keepdim=True) if others else a
        # the block's exponent e = floor(log2 amax); x / 2^e in float32 (exact: x in float64,
        # then narrowed, which rounds only values far below the rounding position)
        e = _torch.frexp(amax.double())[1].double() - 1
        e = _torch.where(amax > 0, e, _torch.zeros_like(e))
        xs = (x.double() * _torch.exp2(-e)).float()
        y = xs + 6.0  # QPyTorch's x + 6 * 2^e in float32: its first rounding, to nearest even
        y = _cpd_pkg.quantize(y, f"e8m{wl}", self.mode, seed=seed, stream=stream)  # wl bits of y in [4, 8]
        q = y - 6.0
        top = 2.0 - 2.0 ** (2 - wl)  # the largest magnitude with the block's exponent
        q = _torch.where(q.abs() >= 2.0, _torch.full_like(q, top).copysign_(q), q)
        out = (q.double() * _torch.exp2(e)).float()
        out = _torch.where(amax > 0, out, _torch.zeros_like(out))
        return _torch.where(finite, out, x)


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
    """QPyTorch's fixed_point_quantize: x (a float32 or float64 tensor) rounded to wl-bit
    fixed point with fl fraction bits, "nearest" (ties to even, as QPyTorch's nearbyint) or
    "stochastic" (the next key of cpd.manual_seed's sequence); clamped to the range unless
    clamp=False; symmetric drops the lowest value."""
    who = "cpd.qtorch.fixed_point_quantize"
    if not isinstance(x, _torch.Tensor):
        raise TypeError(f"{who}: x must be a torch.Tensor, not {type(x).__name__}")
    return _FixedRounding(who, wl, fl, clamp, symmetric, rounding)(x)


def block_quantize(x, wl, dim=-1, rounding="stochastic"):
    """QPyTorch's block_quantize: x (a float32 tensor) in block floating point of wl bits,
    one block per slice of dimension dim (-1: one block), "nearest" (QPyTorch's: half up
    after its float32 rebase) or "stochastic". NaN and inf stay; the block's maximum is
    that of its finite |x|."""
    who = "cpd.qtorch.block_quantize"
    if not isinstance(x, _torch.Tensor):
        raise TypeError(f"{who}: x must be a torch.Tensor, not {type(x).__name__}")
    return _BlockRounding(who, wl, dim, rounding)(x)


def _rounding_of(who, number, rounding, which):
    if number is None:
        return None
    if isinstance(number, FloatingPoint):
        return _FloatRounding(who, number.exp, number.man, rounding)
    if isinstance(number, FixedPoint):
        return _FixedRounding(who, number.wl, number.fl, number.clamp, number.symmetric, rounding)
    if isinstance(number, BlockFloatingPoint):
        return _BlockRounding(who, number.wl, number.dim, rounding)
    raise TypeError(f"{who}: {which}_number must be None or a cpd.qtorch.FloatingPoint, FixedPoint or "
                    f"BlockFloatingPoint, not {type(number).__name__}")


class _MaskedRoundSTE(_torch.autograd.Function):
    """QPyTorch's clamping_grad_zero: forward rounds to fixed point and remembers where the
    value was clamped; backward rounds the gradient (after the hooks) and zeroes it there.
    Without a backward number the gradient passes as it is (as QPyTorch)."""

    @staticmethod
    def forward(ctx, x, fwd, bwd, seed, stream):  # pylint: disable=arguments-differ
        if fwd is None:
            out, mask = x.view_as(x), None
        else:
            out, mask = fwd.with_mask(x, seed, stream)
        ctx.cpd_backward = (bwd, seed, stream, mask)
        return out

    @staticmethod
    def backward(ctx, grad):  # pylint: disable=arguments-differ
        bwd, seed, stream, mask = ctx.cpd_backward
        if bwd is None:
            return grad, None, None, None, None
        grad = bwd(grad, seed, stream | _fq.BACKWARD_STREAM)
        if mask is not None:
            grad = grad.masked_fill(mask, 0)
        return grad, None, None, None, None


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

    def __init__(self, fwd, bwd, seed, stream, masked=False):
        self.fwd, self.bwd, self.seed, self.stream = fwd, bwd, seed, stream
        self.function = _MaskedRoundSTE if masked else _fq.RoundSTE
        self.calls = 0

    def __call__(self, x):
        stream = _fq.call_stream(self.stream, self.calls)
        self.calls += 1
        return self.function.apply(x, self.fwd, self.bwd, self.seed, stream)


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
        if not isinstance(forward_number, FixedPoint):
            raise ValueError(f"{who}: clamping_grad_zero=True takes a FixedPoint forward_number (as QPyTorch), not "
                             f"{type(forward_number).__name__}")
        if not forward_number.clamp:
            raise ValueError(f"{who}: clamping_grad_zero=True needs a FixedPoint with clamp=True (as QPyTorch)")
    hooks = list(backward_hooks)
    if bwd is not None and hooks:
        bwd = _Hooked(hooks, bwd)
    return _QuantizeFunction(fwd, bwd, _cpd_pkg._seed_state["seed"], _fq.next_instance_stream(who),
                             masked=bool(clamping_grad_zero))


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
