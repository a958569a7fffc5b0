# SPDX-License-Identifier: MIT
"""Fake quantization inside models: cpd.torch.quantize_ste and cpd.torch.Quantizer (the
forward value and the gradient rounded each by its own spec; random streams), and
cpd.qtorch, QPyTorch's calls, against QPyTorch's expectations: a model of its float kernel
written here from its source (qtorch/quant/quant_cpu: round_bitwise, clip_exponent and the
subnormal path of float_quantize), its own tests (test_clamp's value sets, test_backward's
gradients, test_stochastic's unbiasedness) and OptimLP's step written out."""

import math

import numpy as np
import pytest
import torch

import cpd
import cpd.qtorch as qt
import cpd.torch as ct
from cpd.qtorch.optim import OptimLP
from cpd.qtorch.quant import Quantizer as QQuantizer
from cpd.qtorch.quant import float_quantize, quantizer

RNG = np.random.default_rng(2024)


def same(a, b):
    """Equal float32 bit patterns, any NaN equal to any NaN."""
    a = np.asarray(a, dtype=np.float32).ravel()
    b = np.asarray(b, dtype=np.float32).ravel()
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)))


# --- QPyTorch's float kernel, modelled from its source ---------------------------------------

def qpytorch_float(x, exp, man, rand=None):
    """What QPyTorch 0.3's float_quantize(x, exp, man) computes, element by element, with the
    random integers `rand` (None: "nearest"): the float32 bits t plus half an ulp (or rand's low
    23 - man bits), the low 23 - man bits cleared; a result with an exponent above 2^(exp-1)
    becomes +-(2^(2^(exp-1)) (2 - 2^-man)); an input below 2^emin (emin = 2 - 2^(exp-1)),
    zeros included, is first added to +-2^emin in float32, rounded so, and 2^emin taken off."""
    x = np.asarray(x, dtype=np.float32).ravel()
    mask = (1 << (23 - man)) - 1
    add = np.full(x.shape, 1 << (22 - man), dtype=np.uint64) if rand is None else \
        np.asarray(rand, dtype=np.uint64).ravel() & mask
    min_exp = -((1 << (exp - 1)) - 2)
    max_store = (1 << (exp - 1)) + 127
    max_man = (0x7FFFFF >> (23 - man)) << (23 - man)

    def round_bits(t):
        return ((t + add) & 0xFFFFFFFF) & ~np.uint64(mask)

    t = x.view(np.uint32).astype(np.uint64)
    sign = (t >> 31) << 31
    subnormal = ((t >> 23) & 0xFF).astype(np.int64) - 127 < min_exp
    q = round_bits(t)
    clip = (q != 0) & (((q & 0x7FFFFFFF) >> 23) > max_store)
    q = np.where(clip, sign | (max_store << 23) | max_man, q)
    out = q.astype(np.uint32).view(np.float32).copy()
    if subnormal.any() and 127 + min_exp > 0:
        shift = (np.uint64((127 + min_exp) << 23) | sign).astype(np.uint32).view(np.float32)
        val = (x + shift).astype(np.float32)  # float32 addition, to nearest even
        qs = round_bits(val.view(np.uint32).astype(np.uint64)).astype(np.uint32).view(np.float32)
        out = np.where(subnormal, (qs - shift).astype(np.float32), out)
    return out


def probe_values(exp, man, n=4000):
    """Values that exercise every path: random magnitudes over float32's range and around the
    format's, its midpoints and their float32 neighbours, subnormals of float32 and of the
    format, zeros, infinities, float32's max."""
    emin, emax = 2 - 2 ** (exp - 1), 2 ** (exp - 1)
    lo, hi = max(emin - man - 4, -149), min(emax + 3, 127)
    e = RNG.integers(lo, hi + 1, n)
    m = RNG.uniform(1, 2, n)
    rnd = (np.ldexp(m, e) * RNG.choice([-1, 1], n)).astype(np.float32)
    grid = np.arange(1, 2 ** (man + 2)) / 2.0 ** (man + 1)   # values and midpoints in [0.5, 2)
    if grid.size > 2000:
        grid = np.concatenate([grid[:500], grid[-500:], RNG.choice(grid, 1000)])
    mids = np.concatenate([np.ldexp(grid, k) for k in (emin - 1, emin, emin + 1, 0, emax - 1, emax)])
    mids = mids[(mids > 0) & (mids < 3.4e38)].astype(np.float32)
    near = np.concatenate([mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf))])
    special = np.array([0.0, -0.0, np.inf, -np.inf, 3.4028235e38, -3.4028235e38, 1e-45, -1e-45, 1.1754942e-38,
                        1.0, -1.0, 1.1, 1e6, -1e6], dtype=np.float32)
    v = np.concatenate([rnd, near, -near, special]).astype(np.float32)
    return torch.from_numpy(v)


# (exp, man) pairs: QPyTorch's tests' (2,2), (2,3), (3,2), (6,5), (3,5), (5,2), (6,9); E5M10 (fp16's
# bits), E8M7 (bfloat16's), E8 (float32's range, its subnormals), E9 (wider than float32), E1.
PAIRS = [(2, 2), (2, 3), (3, 2), (6, 5), (3, 5), (5, 2), (6, 9), (5, 10), (4, 3), (8, 7), (8, 1), (9, 6), (1, 3),
         (7, 20)]


@pytest.mark.parametrize("exp,man", PAIRS)
def test_float_quantize_nearest_is_qpytorchs_kernel(exp, man):
    x = probe_values(exp, man)
    got = float_quantize(x, exp, man, "nearest")
    want = qpytorch_float(x.numpy(), exp, man)
    assert same(got, want), [(float(a), float(b), float(c)) for a, b, c in zip(x, got, want) if not same(b, c)][:5]


@pytest.mark.parametrize("exp,man", [(2, 2), (5, 2), (4, 3), (8, 7), (9, 6), (6, 9)])
def test_float_quantize_stochastic_gives_qpytorchs_neighbours(exp, man):
    """Every result is what QPyTorch gives with some random integer: rounded down (rand 0) or
    up (rand all ones) from the same float32 bits, and both occur."""
    x = probe_values(exp, man)
    x = x[torch.isfinite(x)]
    cpd.manual_seed(5)
    got = float_quantize(x, exp, man, "stochastic").numpy()
    down = qpytorch_float(x.numpy(), exp, man, np.zeros(x.numel(), dtype=np.uint64))
    up = qpytorch_float(x.numpy(), exp, man, np.full(x.numel(), 0xFFFFFFFF, dtype=np.uint64))
    is_down, is_up = got.view(np.uint32) == down.view(np.uint32), got.view(np.uint32) == up.view(np.uint32)
    assert (is_down | is_up).all(), x[~(is_down | is_up)][:5]
    assert (is_down & ~is_up).any() and (is_up & ~is_down).any()


def test_float_quantize_stochastic_probability_is_the_distance_in_ulps():
    """QPyTorch rounds up when the low 23 - man bits plus as many random bits carry: with
    probability exactly the distance to the lower neighbour in ulps (here 1/4 and 3/4)."""
    n = 40000
    x = torch.full((n,), 1.0 + 2.0 ** -4)       # E5M2: 1 + ulp/4 (ulp 2^-2)
    y = torch.full((n,), -(1.0 + 3 * 2.0 ** -4))  # -(1 + 3 ulp/4)
    cpd.manual_seed(11)
    up = (float_quantize(x, 5, 2) == 1.25).double().mean().item()
    away = (float_quantize(y, 5, 2) == -1.25).double().mean().item()
    assert abs(up - 0.25) < 0.01 and abs(away - 0.75) < 0.01


@pytest.mark.parametrize("exp,man", [(2, 2), (2, 3), (3, 2)])
@pytest.mark.parametrize("rounding", ["stochastic", "nearest"])
def test_float_quantize_value_set_is_qpytorchs(exp, man, rounding):
    """QPyTorch's test_clamp.test_float: quantizing arange(-30, 30, 0.01) gives exactly the
    values of 2^exp exponent codes (the largest 2^(2^(exp-1)), none kept for inf or NaN) and
    the subnormals below 2^(2 - 2^(exp-1)), each sign, 0 once."""
    max_exp = 2 ** exp // 2
    min_exp = -(max_exp - 2)
    want = set()
    for sign in (1, -1):
        for e in range(2 ** exp):
            for m in range(2 ** man):
                want.add(sign * (2.0 ** (e + min_exp) * m * 2.0 ** -man if e == 0 else
                                 2.0 ** (e + min_exp - 1) * (1 + m * 2.0 ** -man)))
    cpd.manual_seed(3)
    a = torch.from_numpy(np.arange(-30, 30, 0.01).astype(np.float32))
    got = float_quantize(a, exp=exp, man=man, rounding=rounding)
    assert set(got.tolist()) == want


def test_float_quantize_known_values():
    """Values that follow from QPyTorch's kernel (comments: the bits' story)."""
    q = lambda v, e, m: float_quantize(torch.tensor([v], dtype=torch.float32), e, m, "nearest").item()  # noqa: E731
    assert q(1e6, 5, 2) == 114688.0           # saturates at 2^16 * 1.75 (IEEE E5M2 would be inf, its max 57344)
    assert q(70000.0, 5, 2) == 65536.0         # 2^16 is finite here: every exponent code is a number
    assert q(-math.inf, 4, 3) == -480.0        # inf saturates: 2^8 * 1.875
    assert q(1.125, 5, 2) == 1.25              # a tie goes away from zero
    assert q(-1.125, 5, 2) == -1.25
    assert q(1.375, 5, 2) == 1.5
    assert q(2.0 ** -17, 5, 2) == 2.0 ** -16   # subnormal tie, away from zero (smallest subnormal 2^-16)
    assert q(2.0 ** -18, 5, 2) == 0.0
    assert q(3.4028235e38, 8, 7) == math.inf   # exp 8: float32's range; an overflow is inf
    assert q(1e-45, 8, 7) == 0.0             # float32's subnormals round to E8M7's (spacing 2^-133)
    assert q(2.0 ** -130 + 2.0 ** -140, 8, 7) == 2.0 ** -130


def test_float_quantize_rounds_a_subnormal_twice_as_qpytorch_does():
    """Below 2^emin QPyTorch adds 2^emin in float32 first (to nearest even at 2^(emin-23)),
    then rounds that sum: 2^-17 - 2^-40 (just below E5M2's subnormal midpoint 2^-17) becomes
    the midpoint, which goes away from zero to 2^-16. One rounding (cpd.quantize) gives 0."""
    x = torch.tensor([2.0 ** -17 - 2.0 ** -40, -(2.0 ** -17 - 2.0 ** -40)])
    assert float_quantize(x, 5, 2, "nearest").tolist() == [2.0 ** -16, -(2.0 ** -16)]
    assert cpd.quantize(x, "e5m2finite", "nearest_away").tolist() == [0.0, 0.0]


def test_float_quantize_zeros_are_positive_as_in_qpytorch():
    """QPyTorch's subnormal path computes (x - 2^emin) + 2^emin for negative x: a zero result
    is +0. Above E8 (no subnormal path) -0 stays -0."""
    for exp, x in ((5, [-0.0, -1e-30, -1e-44]), (8, [-0.0, -1e-44])):
        r = float_quantize(torch.tensor(x), exp, 2, "nearest")
        assert (r == 0).all() and not torch.signbit(r).any(), (exp, r)
    r = float_quantize(torch.tensor([-0.0, -1e-45]), 9, 2, "nearest")
    assert torch.signbit(r).all() and (r == 0).all()


def test_float_quantize_keeps_nan_where_qpytorch_saturates():
    """The one deliberate difference in values: QPyTorch turns NaN into +-max for exp < 8
    (its clip sees an exponent above the largest); cpd keeps NaN."""
    r = float_quantize(torch.tensor([math.nan, 1.0]), 5, 2, "nearest")
    assert math.isnan(r[0].item()) and r[1].item() == 1.0
    assert qpytorch_float(np.array([np.nan], dtype=np.float32), 5, 2)[0] == 114688.0


def test_float_quantize_stochastic_is_unbiased():
    """QPyTorch's test_stochastic.test_stochastic_float: E6M5, the mean of many stochastic
    roundings of rand(100) is within 1e-6 (mean square) of the input."""
    a = torch.rand(100)
    cpd.manual_seed(1)
    b = float_quantize(a.expand(20000, 100).contiguous(), exp=6, man=5).double().mean(0)
    assert ((a.double() - b) ** 2).mean().item() < 1e-6
    f = quantizer(forward_number=qt.FloatingPoint(exp=6, man=5), forward_rounding="stochastic")
    b = f(a.expand(20000, 100).contiguous()).double().mean(0)
    assert ((a.double() - b) ** 2).mean().item() < 1e-6


def test_float_quantize_stochastic_repeats_after_manual_seed():
    x = torch.randn(1000)
    cpd.manual_seed(42)
    a, b = float_quantize(x, 5, 2), float_quantize(x, 5, 2)
    cpd.manual_seed(42)
    assert torch.equal(float_quantize(x, 5, 2), a) and torch.equal(float_quantize(x, 5, 2), b)
    assert not torch.equal(a, b)


def test_qtorch_quantizer_rounds_each_direction():
    """QPyTorch's test_backward.test_backward_float, and each direction by its own number:
    the gradient of sum(quant(a)) is 1 (representable), and a gradient 1.1 comes back rounded
    to the backward number, not to the forward one."""
    number = qt.FloatingPoint(exp=3, man=5)
    a = torch.linspace(-0.9, 0.9, steps=100, requires_grad=True)
    quant = quantizer(forward_number=number, forward_rounding="nearest", backward_number=number,
                      backward_rounding="nearest")
    quant(a).sum().backward()
    assert torch.equal(a.grad, torch.ones_like(a))

    x = torch.tensor([1.1, 3.3], requires_grad=True)
    q = QQuantizer(qt.FloatingPoint(5, 2), qt.FloatingPoint(5, 1), "nearest", "nearest")
    y = q(x)
    assert y.tolist() == [1.0, 3.5]
    y.backward(torch.tensor([1.1, 3.3]))
    assert x.grad.tolist() == [1.0, 3.0]    # E5M1: 1, 1.5, 2, 3, 4: 1.1 -> 1, 3.3 -> 3

    x = torch.tensor([1.1], requires_grad=True)
    y = quantizer()(x)      # no numbers: both ways as they are
    y.backward(torch.tensor([1.1]))
    assert torch.equal(y, x) and torch.equal(x.grad, torch.tensor([1.1]))


def test_qtorch_backward_hooks_run_before_the_gradient_is_rounded():
    x = torch.tensor([1.0], requires_grad=True)
    f = quantizer(backward_number=qt.FloatingPoint(5, 2), backward_rounding="nearest",
                  backward_hooks=[lambda g: g * 1.3])
    f(x).backward(torch.tensor([1.0]))
    assert x.grad.item() == 1.25     # 1.3 rounded to E5M2


def test_qtorch_argument_errors():
    with pytest.raises(ValueError, match="rounding 'even'"):
        float_quantize(torch.zeros(2), 5, 2, "even")
    with pytest.raises(ValueError, match="exp 9 is outside"):
        qt.FloatingPoint(9, 2)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        float_quantize([1.0], 5, 2)
    with pytest.raises(ValueError, match="clamping_grad_zero"):
        quantizer(qt.FloatingPoint(5, 2), clamping_grad_zero=True)
    with pytest.raises(ValueError, match="clamp=True"):
        quantizer(qt.FixedPoint(8, 4, clamp=False), clamping_grad_zero=True)
    with pytest.raises(ValueError, match="wl 1 is outside"):
        qt.FixedPoint(1, 0)
    with pytest.raises(ValueError, match="wl 24 is outside"):
        qt.BlockFloatingPoint(24)
    with pytest.raises(TypeError, match="float32 tensors"):
        qt.block_quantize(torch.zeros(2, dtype=torch.float64), 8)


def qpytorch_step(params, grads, state, lr, momentum, wq, gq, mq, aq, acc, scaling):
    """QPyTorch's OptimLP.step over SGD, written out: gradients g <- gq(g * scaling); w <- acc
    (when aq); the SGD step (torch's: buf <- momentum buf + g, w <- w - lr buf); acc <- aq(w);
    w <- wq(w); buf <- mq(buf)."""
    for i, p in enumerate(params):
        g = gq(grads[i] * scaling)
        w = acc[i] if aq else p
        buf = g.clone() if state[i] is None else momentum * state[i] + g
        w = w - lr * buf
        if aq:
            acc[i] = w = aq(w)
        params[i] = wq(w)
        state[i] = mq(buf)


def test_optimlp_steps_as_qpytorch():
    torch.manual_seed(0)
    net = torch.nn.Linear(6, 3)
    ref_params = [p.detach().clone() for p in net.parameters()]
    ref_acc = [p.clone() for p in ref_params]
    ref_state = [None, None]
    wq = quantizer(qt.FloatingPoint(5, 2), forward_rounding="nearest")
    gq = lambda g: float_quantize(g, 5, 3, "nearest")   # noqa: E731
    mq = lambda m: float_quantize(m, 6, 4, "nearest")   # noqa: E731
    aq = lambda a: float_quantize(a, 8, 10, "nearest")  # noqa: E731
    opt = OptimLP(torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9), weight_quant=wq, grad_quant=gq,
                  momentum_quant=mq, acc_quant=aq, grad_scaling=4.0)
    for _ in range(3):
        x = torch.randn(8, 6)
        opt.zero_grad()
        net(x).square().sum().backward()
        grads = [p.grad.detach().clone() for p in net.parameters()]
        opt.step()
        qpytorch_step(ref_params, grads, ref_state, 0.05, 0.9, wq, gq, mq, aq, ref_acc, 4.0)
        for p, want in zip(net.parameters(), ref_params):
            assert torch.equal(p.detach(), want)
        for p, want in zip(net.parameters(), ref_state):
            assert torch.equal(opt.optim.state[p]["momentum_buffer"], want)
        for p, want in zip(net.parameters(), ref_acc):   # (QPyTorch's name of the accumulators)
            assert torch.equal(opt.weight_acc[p], want)
        for p, g in zip(net.parameters(), grads):   # the scaled, rounded gradient stays in .grad
            assert torch.equal(p.grad, gq(g * 4.0))
    assert str(opt).startswith("LP Optimizer: SGD")


def test_optimlp_rounds_adams_two_moments():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    mq = lambda m: float_quantize(m, 5, 2, "nearest")   # noqa: E731
    opt = OptimLP(torch.optim.Adam([p], lr=0.1), momentum_quant=mq)
    p.grad = torch.tensor([0.3, -0.7, 1.1])
    opt.step()
    st = opt.optim.state[p]
    assert torch.equal(st["exp_avg"], mq(0.1 * p.grad)) and torch.equal(st["exp_avg_sq"], mq(0.001 * p.grad ** 2))
    with pytest.raises(TypeError, match="torch.optim.SGD or Adam"):
        OptimLP(torch.optim.RMSprop([p]))
    with pytest.raises(ValueError, match="grad_scaling must be a positive number"):
        OptimLP(torch.optim.SGD([p], lr=0.1), grad_scaling=0)


# --- cpd.torch.quantize_ste and Quantizer ----------------------------------------------------

def test_ste_rounds_the_value_forward_and_the_gradient_backward():
    x = (torch.randn(300) * 10).requires_grad_()
    g = torch.randn(300) * 1e-3
    y = ct.quantize_ste(x, "e4m3fn", "e5m2")
    assert torch.equal(y, cpd.quantize(x.detach(), "e4m3fn"))
    y.backward(g)
    assert torch.equal(x.grad, cpd.quantize(g, "e5m2"))   # the gradient rounded, not its forward format


def test_ste_passes_what_it_does_not_round():
    x = torch.randn(50).requires_grad_()
    g = torch.randn(50)
    y = ct.quantize_ste(x, "e2m1fn", None)   # backward None: the gradient straight through
    y.backward(g)
    assert torch.equal(x.grad, g) and not torch.equal(y, x.detach())
    x.grad = None
    y = ct.quantize_ste(x, None, "e4m3fn")   # forward None: the value as it is
    assert torch.equal(y, x.detach())
    y.backward(g)
    assert torch.equal(x.grad, cpd.quantize(g, "e4m3fn"))


def test_ste_gradient_through_a_layer_is_the_rounded_incoming_gradient():
    """In w -> quantize_ste(w) -> (a @ .) the gradient of w is the rounded gradient of the
    product's input, as if rounding were the identity (the straight-through estimator)."""
    torch.manual_seed(1)
    w = torch.randn(4, 3, requires_grad=True)
    a = torch.randn(5, 4)
    (a @ ct.quantize_ste(w, "e4m3fn", "bf16", rounding="nearest_even")).sum().backward()
    assert torch.equal(w.grad, cpd.quantize(a.t() @ torch.ones(5, 3), "bf16"))


def test_spec_options_are_cpds_calls():
    x = torch.randn(2, 64) * 300
    s = ct.QuantSpec("e4m3fn", overflow="saturate", scale=-3)
    assert torch.equal(s(x), cpd.quantize(x, "e4m3fn", overflow="saturate", scale_exponent=-3))
    aps = cpd.aps("e4m3fn", 1)
    for v in (x, x * 1e-6, torch.full((4,), 0.25)):
        k = aps.select(aps.statistic(v)).exponent
        assert ct.QuantSpec("e4m3fn", scale="amax").scale_exponent(v) == k
        assert torch.equal(ct.QuantSpec("e4m3fn", scale="amax")(v), cpd.quantize(v, "e4m3fn", scale_exponent=k))
    assert ct.QuantSpec("e5m2", scale="amax", margin=2).scale_exponent(x) == \
        cpd.aps("e5m2", 1, 2).select(cpd.aps("e5m2", 1).statistic(x)).exponent
    assert ct.QuantSpec("e4m3fn", scale="amax").scale_exponent(torch.zeros(3)) == 0
    mx = ct.QuantSpec("e2m1fn", scale="mx", block_size=16)
    assert torch.equal(mx(x), cpd.mx_quantize(x, "e2m1fn", 16))
    y = ct.quantize_ste(x, "e2m1fn", scale="mx")
    assert torch.equal(y, cpd.mx_quantize(x, "e2m1fn", 32))


def test_spec_errors_name_the_argument_and_value():
    with pytest.raises(ValueError, match="e4m3xx"):
        ct.QuantSpec("e4m3xx")
    with pytest.raises(ValueError, match="rounding 'nearest' is not one of"):
        ct.QuantSpec("e4m3fn", rounding="nearest")
    with pytest.raises(ValueError, match="scale 'aps' is not one of none, amax, mx"):
        ct.QuantSpec("e4m3fn", scale="aps")
    with pytest.raises(ValueError, match="scale 'mx' takes an OCP MX element format.*bf16"):
        ct.QuantSpec("bf16", scale="mx")
    with pytest.raises(TypeError, match="forward must be None, a format name or a cpd.torch.QuantSpec, not int"):
        ct.Quantizer(8)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        ct.quantize_ste(np.zeros(3, dtype=np.float32), "e4m3fn")
    with pytest.raises(ValueError, match="stream -1 is outside"):
        ct.Quantizer("e4m3fn", stream=-1)


def test_quantizer_streams_are_seed_instance_and_call():
    """Call n of Quantizer(seed=s, stream=k) rounds forward with the key (s, k * 2^32 + n) and
    the gradient with (s, (k * 2^32 + n) | 2^63): fresh bits each call, reproducibly."""
    x = torch.randn(500).requires_grad_()
    g = torch.randn(500) * 1e-2
    q = ct.Quantizer("e5m2", "e4m3fn", rounding="stochastic", seed=9, stream=3)
    ys = []
    for n in range(2):
        x.grad = None
        y = q(x)
        y.backward(g)
        st = (3 << 32) + n
        assert torch.equal(y, cpd.quantize(x.detach(), "e5m2", "stochastic", seed=9, stream=st))
        assert torch.equal(x.grad, cpd.quantize(g, "e4m3fn", "stochastic", seed=9, stream=st | 2**63))
        ys.append(y.detach())
    assert not torch.equal(ys[0], ys[1]) and q.calls == 2


def test_quantizers_repeat_after_manual_seed_and_differ_from_each_other():
    x = torch.full((4000,), 1.0625)   # E4M3FN: halfway between 1 and 1.125, up with probability 1/2

    def run():
        cpd.manual_seed(123)
        a, b = ct.Quantizer("e4m3fn", rounding="stochastic"), ct.Quantizer("e4m3fn", rounding="stochastic")
        return [a(x), a(x), b(x)]

    first, again = run(), run()
    assert all(torch.equal(u, v) for u, v in zip(first, again))
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[0], first[2])
    for u, v in ((0, 1), (0, 2), (1, 2)):   # independent decisions: they agree half of the time
        assert abs((first[u] == first[v]).float().mean().item() - 0.5) < 0.05


def test_quantizer_call_count_is_saved_and_restored():
    q = ct.Quantizer("e5m2", rounding="stochastic", seed=1, stream=0)
    x = torch.randn(100)
    q(x)
    state = q.state_dict()
    want = q(x)
    r = ct.Quantizer("e5m2", rounding="stochastic", seed=1, stream=0)
    r.load_state_dict(state)
    assert r.calls == 1 and torch.equal(r(x), want)


def test_a_model_with_quantizers_trains():
    torch.manual_seed(0)
    cpd.manual_seed(0)
    x = torch.randn(256, 8)
    y = (x @ torch.randn(8, 1)).tanh()
    net = torch.nn.Sequential(
        ct.Quantizer("e4m3fn", None, scale="amax"), torch.nn.Linear(8, 32),
        ct.Quantizer("e4m3fn", "e5m2", rounding="nearest_even", scale="amax"), torch.nn.Tanh(),
        torch.nn.Linear(32, 1), ct.Quantizer(None, ct.QuantSpec("e5m2", "stochastic", scale="amax")))
    opt = torch.optim.Adam(net.parameters(), lr=0.02)
    losses = []
    for _ in range(150):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0], (losses[0], losses[-1])
    assert "forward=QuantSpec('e4m3fn'" in repr(net)


# --- on a GPU: the same bits as on the CPU --------------------------------------------------

def _gpu():
    from cpd import _cuda
    return _cuda.available() and torch.cuda.is_available() and _cuda.device_count() > 0


@pytest.mark.skipif(not _gpu(), reason="no CUDA GPU or no cpd._cpd_cuda")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
def test_ste_and_qtorch_on_a_gpu_give_the_cpus_bits(dtype):
    g = np.random.default_rng(7)
    x = torch.from_numpy(g.standard_normal(4099) * 10.0 ** g.uniform(-4, 3, 4099)).to(dtype)
    grad = torch.from_numpy(g.standard_normal(4099) * 10.0 ** g.uniform(-9, 0, 4099)).to(dtype)
    specs = [(ct.QuantSpec("e4m3fn"), ct.QuantSpec("e5m2", "stochastic")),
             (ct.QuantSpec("e5m2", scale="amax"), ct.QuantSpec("e4m3fn", "stochastic", scale="amax", margin=1)),
             (ct.QuantSpec("e2m1fn", "toward_zero", scale=3), None),
             (None, ct.QuantSpec("e3m0", "nearest_away", "saturate"))]
    for fwd, bwd in specs:
        results = []
        for device in ("cpu", "cuda"):
            xd = x.detach().to(device, copy=True).requires_grad_(True)
            y = ct.quantize_ste(xd, fwd, bwd, seed=5, stream=9)
            y.backward(grad.to(device))
            assert y.device.type == device and y.dtype == dtype and xd.grad.dtype == dtype
            results.append((y.detach().cpu().double().numpy(), xd.grad.cpu().double().numpy()))
        for a, b in zip(*results):
            nan = np.isnan(a)
            assert np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint64),
                                                                        b[~nan].view(np.uint64)), (fwd, bwd)
    if dtype == torch.float32:  # cpd.qtorch's float_quantize (QPyTorch's kernel) on the device too
        for rounding in ("nearest", "stochastic"):
            cpd.manual_seed(3)
            a = float_quantize(x, 4, 3, rounding)
            cpd.manual_seed(3)
            b = float_quantize(x.cuda(), 4, 3, rounding)
            assert b.is_cuda and same(a.numpy(), b.cpu().numpy()), rounding


# --- fixed point and block floating point: QPyTorch's CPU kernels restated on float32 bits ---

def _qpytorch_fixed_nearest(x, wl, fl, clamp, symmetric):
    """QPyTorch's fixed_point_quantize_nearest (quant_cpu.cpp, sim_helper.cpp), in numpy:
    a = ldexp(a, fl) in float32; nearbyint(a + 0.5f - 0.5) (a float32 sum, then a double);
    ldexp back; clamp to t_min, t_max (doubles stored in float32)."""
    a = np.ldexp(x.astype(np.float32), fl).astype(np.float32)
    s = (a + np.float32(0.5)).astype(np.float32).astype(np.float64) - 0.5
    v = np.ldexp(np.rint(s), -fl).astype(np.float32)
    if clamp:
        t_min = np.float32(-math.ldexp(1.0, wl - fl - 1))
        t_max = np.float32(-float(t_min) - math.ldexp(1.0, -fl))
        if symmetric:
            t_min = np.float32(float(t_min) + math.ldexp(1.0, -fl))
        v = np.where(v > t_max, t_max, np.where(v < t_min, t_min, v))
    return v


def _fixed_inputs(wl, fl, rng):
    q = 2.0 ** -fl
    top = 2 ** (wl - 1)
    k = np.concatenate([np.arange(-5, 6), [top - 2, top - 1, top, top + 1, -top - 1, -top, -top + 1]]).astype(np.float64)
    ties = np.concatenate([k, k + 0.5, k + 0.25, k - 0.5, k + 0.75]) * q
    rand = rng.uniform(-1.3 * top, 1.3 * top, 500) * q
    x = np.concatenate([ties, rand]).astype(np.float32)
    # QPyTorch's nearest maps odd integers in [2^23, 2^24) to the next even one (its float32
    # a + 0.5f rounds): docs/python.md; those inputs are left out.
    return x[np.abs(np.ldexp(x.astype(np.float64), fl)) < 2.0 ** 23]


@pytest.mark.parametrize("wl,fl", [(2, 0), (4, 2), (8, 4), (8, -3), (12, 20), (16, 8), (24, 10), (25, 3)])
def test_qtorch_fixed_point_nearest_is_qpytorchs(wl, fl):
    rng = np.random.default_rng(wl * 100 + fl)
    x = _fixed_inputs(wl, fl, rng)
    t = torch.from_numpy(x)
    for clamp in (True, False):
        for symmetric in (False, True):
            got = qt.fixed_point_quantize(t, wl, fl, clamp=clamp, symmetric=symmetric, rounding="nearest").numpy()
            want = _qpytorch_fixed_nearest(x, wl, fl, clamp, symmetric)
            bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
            assert bad.size == 0, (wl, fl, clamp, symmetric, x[bad[:5]], got[bad[:5]], want[bad[:5]])


def test_qtorch_fixed_point_stochastic_and_nonfinite():
    cpd.manual_seed(4)
    x = torch.full((40000,), 0.3 / 16 + 1.0)  # 30% of the way from 1 to 1 + 1/16
    y = qt.fixed_point_quantize(x, 8, 4, rounding="stochastic")
    assert set(y.unique().tolist()) == {1.0, 1.0625}
    assert abs((y > 1).float().mean().item() - 0.3) < 0.01
    z = qt.fixed_point_quantize(torch.tensor([math.nan, math.inf, -math.inf, 100.0]), 8, 4, rounding="nearest")
    assert math.isnan(z[0]) and z[1:].tolist() == [7.9375, -8.0, 7.9375]
    w = qt.fixed_point_quantize(torch.tensor([math.inf, 100.03]), 8, 4, clamp=False, rounding="nearest")
    assert w.tolist() == [math.inf, 100.0]


def test_cpd_fixed_point_quantize_float64_stats_and_errors():
    x = np.array([0.3, -0.2, 9.0, -9.0, np.inf, np.nan, 1.25, 0.0])
    y, st = cpd.fixed_point_quantize(x, 4, 1, symmetric=True, stats=True)
    assert y.dtype == np.float64
    assert y[:5].tolist() == [0.5, -0.0, 3.5, -3.5, 3.5] and math.isnan(y[5]) and y[6:].tolist() == [1.0, 0.0]
    assert (st["overflow"], st["saturated"], st["underflow"], st["nan_inputs"], st["inf_inputs"]) == (2, 3, 1, 1, 1)
    big = np.array([2.0 ** 40 + 1.0, 0.1])  # word_bits 53: every double integer below 2^52 is a value
    assert cpd.fixed_point_quantize(big, 53, 0, clamp=False).tolist() == [2.0 ** 40 + 1.0, 0.0]
    with pytest.raises(ValueError, match="word_bits 1 is outside"):
        cpd.fixed_point_quantize(x, 1, 0)
    with pytest.raises(ValueError, match="fraction_bits"):
        cpd.fixed_point_quantize(np.zeros(2, np.float32), 8, 150)
    with pytest.raises(TypeError, match="float32 or float64"):
        cpd.fixed_point_quantize(np.zeros(2, np.float16), 8, 4)


def test_qtorch_clamping_grad_zero_zeroes_the_clamped_gradient():
    f = quantizer(qt.FixedPoint(4, 1), qt.FixedPoint(8, 4), "nearest", "nearest", clamping_grad_zero=True)
    x = torch.tensor([1.0, 5.0, -5.0, -4.0], requires_grad=True)
    y = f(x)
    assert y.tolist() == [1.0, 3.5, -4.0, -4.0]
    y.backward(torch.full((4,), 0.3))
    assert x.grad.tolist() == [0.3125, 0.0, 0.0, 0.3125]  # -4.0 is a value: not clamped


def _bits(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def _qpytorch_block_nearest(x, wl, amax):
    """QPyTorch's block_quantize_helper (quant_cpu.cpp, bit_helper.cpp) in nearest mode, on
    float32 bits, with amax the block maximum of each element."""
    max_exp = (_bits(amax) << np.uint32(1)) >> np.uint32(24) << np.uint32(23)
    base = max_exp.view(np.float32) * np.float32(6)
    target = _bits((x + base).astype(np.float32))
    mask = np.uint32((1 << (23 - wl)) - 1)
    q = (target + np.uint32(1 << (23 - wl - 1))) & ~mask
    quantized = (q.view(np.float32) - base).astype(np.float32)
    qb = _bits(quantized)
    qexp = (qb << np.uint32(1)) >> np.uint32(24) << np.uint32(23)
    man_bits = wl - 2
    max_man = ((np.uint32(0xFFFFFFFF) << np.uint32(9)) >> np.uint32(9) >> np.uint32(23 - man_bits)) << np.uint32(23 - man_bits)
    clipped = (qb >> np.uint32(31) << np.uint32(31)) | max_exp | max_man
    return np.where(qexp > max_exp, clipped, qb).view(np.float32)


@pytest.mark.parametrize("wl", [2, 4, 8, 12, 20])
def test_qtorch_block_quantize_nearest_is_qpytorchs(wl):
    rng = np.random.default_rng(wl)
    x = (rng.standard_normal((6, 50)) * np.exp2(rng.integers(-30, 30, (6, 1)))).astype(np.float32)
    x[2, :10] = [0.5, -0.5, 0.25, 1.5, -1.5, 0.75, 3.0, -3.0, 0.375, 2 ** -20]  # ties of small wl
    x[2, 10] = 4.0  # the block's maximum: a power of two
    x[3, 0] = -x[3].__abs__().max() * 1.001  # a negative maximum
    t = torch.from_numpy(x)
    got0 = qt.block_quantize(t, wl, dim=0, rounding="nearest").numpy()
    want0 = _qpytorch_block_nearest(x, wl, np.abs(x).max(axis=1, keepdims=True) * np.ones_like(x))
    assert np.array_equal(got0.view(np.uint32), want0.view(np.uint32))
    got = qt.block_quantize(t, wl, rounding="nearest").numpy()
    want = _qpytorch_block_nearest(x, wl, np.full_like(x, np.abs(x).max()))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    got1 = qt.block_quantize(t, wl, dim=1, rounding="nearest").numpy()
    want1 = _qpytorch_block_nearest(x, wl, np.abs(x).max(axis=0, keepdims=True) * np.ones_like(x))
    assert np.array_equal(got1.view(np.uint32), want1.view(np.uint32))


def test_qtorch_block_quantize_stochastic_and_nonfinite():
    cpd.manual_seed(7)
    x = torch.tensor([1.0] + [0.3] * 20000)  # block exponent 0, wl 4: spacing 2^(0+2-4) = 0.25
    y = qt.block_quantize(x, 4, rounding="stochastic")
    assert y[0] == 1.0 and set(y[1:].unique().tolist()) == {0.25, 0.5}
    assert abs((y[1:] == 0.5).float().mean().item() - 0.2) < 0.01
    z = qt.block_quantize(torch.tensor([math.nan, -math.inf, 0.3, 1.0]), 4, rounding="nearest")
    assert math.isnan(z[0]) and z[1:].tolist() == [-math.inf, 0.25, 1.0]
    assert qt.block_quantize(torch.zeros(3), 8, rounding="nearest").tolist() == [0.0, 0.0, 0.0]


# --- integers: torch.ao's observers and fake_quantize kernels are the oracle ----------------

def _torch_params(x, bits, symmetric, per_channel=False):
    from torch.ao.quantization import MinMaxObserver, PerChannelMinMaxObserver
    qmin, qmax = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if symmetric else (0, 2 ** bits - 1)
    dtype = torch.qint8 if symmetric else torch.quint8
    if per_channel:
        scheme = torch.per_channel_symmetric if symmetric else torch.per_channel_affine
        obs = PerChannelMinMaxObserver(ch_axis=0, dtype=dtype, qscheme=scheme, quant_min=qmin, quant_max=qmax)
    else:
        scheme = torch.per_tensor_symmetric if symmetric else torch.per_tensor_affine
        obs = MinMaxObserver(dtype=dtype, qscheme=scheme, quant_min=qmin, quant_max=qmax)
    obs(x)
    scale, zp = obs.calculate_qparams()
    return scale, zp, qmin, qmax


@pytest.mark.parametrize("bits,symmetric", [(8, True), (8, False), (4, True), (4, False), (2, True), (3, False)])
def test_int_quantize_per_tensor_is_torchs(bits, symmetric):
    x = torch.randn(3000) * 3
    x[:6] = torch.tensor([0.0, -0.0, 1e-9, -5.0, 5.0, 2.5])
    scale, zp, qmin, qmax = _torch_params(x, bits, symmetric)
    want = torch.fake_quantize_per_tensor_affine(x, float(scale), int(zp), qmin, qmax)
    got, (scales, zps) = cpd.int_quantize(x, bits, symmetric, return_params=True)
    assert scales[0] == np.float32(scale.item()) and zps[0] == int(zp)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))  # bit for bit: zeros are +0


@pytest.mark.parametrize("bits,symmetric", [(8, True), (8, False), (4, True), (4, False)])
def test_int_quantize_per_channel_and_block_are_torchs(bits, symmetric):
    x = torch.randn(5, 7, 11) * torch.tensor([0.01, 1.0, 30.0, 0.5, 2.0]).reshape(5, 1, 1)
    scale, zp, qmin, qmax = _torch_params(x, bits, symmetric, per_channel=True)
    want = torch.fake_quantize_per_channel_affine(x, scale.float(), zp.int(), 0, qmin, qmax)
    got, (scales, zps) = cpd.int_quantize(x, bits, symmetric, axis=0, return_params=True)
    assert np.array_equal(scales, scale.float().numpy()) and np.array_equal(zps, zp.int().numpy())
    assert torch.equal(got, want)
    # axis 2: the channels are the last dimension's
    xt = x.permute(2, 0, 1).contiguous()
    scale2, zp2, _, _ = _torch_params(xt, bits, symmetric, per_channel=True)
    want2 = torch.fake_quantize_per_channel_affine(xt, scale2.float(), zp2.int(), 0, qmin, qmax).permute(1, 2, 0)
    assert torch.equal(cpd.int_quantize(x, bits, symmetric, axis=2), want2)
    # blocks of 16 in C order: torch's per channel over the rows of a (-1, 16) view
    flat = x.reshape(-1)[:384].reshape(-1, 16)
    scale3, zp3, _, _ = _torch_params(flat, bits, symmetric, per_channel=True)
    want3 = torch.fake_quantize_per_channel_affine(flat, scale3.float(), zp3.int(), 0, qmin, qmax)
    assert torch.equal(cpd.int_quantize(x.reshape(-1)[:384], bits, symmetric, block_size=16), want3.reshape(-1))


def test_int_quantize_stochastic_stats_and_errors():
    x = np.full(40001, 0.3, np.float32)
    x[0] = 7.0  # int4 symmetric: scale 7 / 7.5
    y, st = cpd.int_quantize(x, 4, seed=5, rounding="stochastic", stats=True)
    s = np.float32(7.0) / np.float32(7.5)
    assert set(np.unique(y[1:]).tolist()) == {0.0, float(s)}
    assert abs((y[1:] > 0).mean() - 0.3 / float(s)) < 0.01
    assert st["count"] == 40001
    z, st = cpd.int_quantize(np.array([1.0, np.inf, np.nan], np.float32), 8, stats=True)
    top = np.float32(127) * (np.float32(1) / np.float32(127.5))  # 1 / scale is 127.49999 in float32: 127
    assert z[0] == top and z[1] == top and np.isnan(z[2])
    assert (st["saturated"], st["overflow"], st["inf_inputs"], st["nan_inputs"]) == (1, 0, 1, 1)
    _, st = cpd.int_quantize(np.array([1.0, -1.0], np.float32), 8, symmetric=False, stats=True)
    assert (st["saturated"], st["overflow"]) == (0, 0)
    y, st = cpd.int_quantize(np.array([7.5, 1.0, -7.5], np.float32), 4, stats=True)  # int4, scale 7.5 / 7.5 = 1
    assert y.tolist() == [7.0, 1.0, -8.0] and (st["saturated"], st["overflow"]) == (1, 1)  # 7.5 -> 8 -> 7
    with pytest.raises(ValueError, match="bits 1 is outside"):
        cpd.int_quantize(x, 1)
    with pytest.raises(ValueError, match="not both"):
        cpd.int_quantize(x, 8, axis=0, block_size=4)
    with pytest.raises(TypeError, match="float32"):
        cpd.int_quantize(x.astype(np.float64), 8)
