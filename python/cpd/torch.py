# SPDX-License-Identifier: MIT
"""cpd.torch: low-precision gradient exchange for PyTorch (docs/python.md).

- comm_hook(format, scaler="aps", algorithm="ring", ...): a DistributedDataParallel
  communication hook that sums every gradient bucket in `format` over the process group
  (gloo, or NCCL where torch has CUDA), with APS per parameter tensor, and gives the bits
  of cpd::simulate_allreduce (and of cpd::mpi::allreduce_plan) for the same inputs.
- all_reduce(tensors, format, ...): the same exchange of a list of tensors, without DDP.
- scaler="mx32" or "nvfp4" (all_reduce, comm_hook): a scale per block instead of one per
  tensor (OCP MX's power of two per 32 values; NVFP4's E4M3 per 16 and an fp32 per tensor),
  the steps and bits of cpd::mpi::block_scaled_plan and cpd.simulate_block_scaled_allreduce:
  the block codes (one byte a block; NVFP4 first the tensor's amax) combined by MAX over the
  ranks, each rank's values scaled block by block, summed nearest-even (saturating), the sum
  scaled back. They run on the host (a CUDA bucket goes through host copies).
- codec="int:4:32" (all_reduce, comm_hook; any cpd::make_codec name, with format and scaler
  None): a gradient codec, the steps and bits of cpd::mpi::codec_allreduce and
  cpd.simulate_codec_allreduce: each rank encodes each tensor (stochastic codecs with the
  stream tensor_stream * W + rank), one all_gather moves the payloads, and every rank decodes
  all of them and sums them in float in rank order. On the host, as the block rules.
- EmulatedWorkers: W workers in one process (CPD's emulate_node): the batch is split into
  W shards, each shard's gradient is one worker's, and the W gradients are summed as
  cpd.simulate_allreduce sums them, so that one machine can study 64 workers.
- quantize_ste(x, forward, backward, ...), Quantizer(forward, backward, ...), QuantSpec: fake
  quantization inside models: the forward value and the gradient rounded each to its own
  format, mode, scale and random stream (the straight-through estimator; cpd/_fakequant.py).

On CUDA tensors (with the CUDA module cpd._cpd_cuda) the whole exchange stays on the device
(cpd/_torch_cuda.py: cpd::cuda::rank_exchange): statistics, scaling, encoding, the packed
codes moved by torch.distributed as CUDA uint8 tensors (NCCL; gloo through host copies of
the codes), decode-add-round, Kahan; the bits of the CPU path.

Stochastic rounding draws the random bits of tensor `position` of bucket `bucket` at step
`step` from the key (seed, tensor_stream(step, bucket, position, W)); the simulation of the
same tensor with that seed and stream gives the same bits.

rotation=B (all_reduce, comm_hook, emulate_allreduce; CPU tensors): a random Hadamard rotation
in blocks of B values (cpd.hadamard, keyed by (seed, ROTATION_STREAM), as cpd-train --rotate
keys it) of every worker's tensors before the statistics and the quantization, and of the sum
back once (cpd::allreduce_options::rotation: docs/scaling.md).

Before any value moves, the ranks check that they agree on the call (format, scaler,
algorithm, rounding, kahan, mean, seed, rotation, codec, tensor sizes, streams) with one all_reduce of a few
int64: a disagreement raises MismatchError on every rank; a rank that never arrives raises
AgreementError on the others after `timeout`.
"""

import collections as _collections
import datetime as _datetime
import functools as _functools
import hashlib as _hashlib
import time as _time

import numpy as _np
import torch as _torch
import torch.distributed as _dist

import cpd as _cpd_pkg
from . import _cpd
from . import _torch_cuda as _device
from ._fakequant import QuantSpec, Quantizer, quantize_ste

__all__ = ["comm_hook", "CommHook", "all_reduce", "EmulatedWorkers", "tensor_stream", "emulate_allreduce",
           "MismatchError", "AgreementError", "BlockScale", "QuantSpec", "quantize_ste", "Quantizer"]

_HOOK_ALGORITHMS = _cpd.rank_algorithms  # (cpd::rank_algorithms: ring, pipelined_ring, two_step, all_gather)
ROTATION_STREAM = 0x0207A7E  # the random stream of the rotation's signs (cpd-train --rotate's)
_HOOK_ROUNDINGS = ("nearest_even", "stochastic")
_SCALERS = ("aps", "none")
_BLOCK_RULES = tuple(_cpd_pkg.block_rules)  # ("mx32", "nvfp4": a scale per block, cpd.torch.BlockScale)
_ALL_SCALERS = _SCALERS + _BLOCK_RULES


class BlockScale(_collections.namedtuple("BlockScale", "nonfinite tensor_scale codes")):
    """What an exchange with block scales (scaler="mx32" or "nvfp4") did to one tensor:
    nonfinite (some rank's block held inf or NaN: the result holds NaN there), tensor_scale
    (NVFP4's shared fp32 scale s; 0 for MX) and codes (every block's combined scale code, a
    uint8 array: OCP MX's E8M0 exponent, NVFP4's E4M3 scale; 0xFF: inf or NaN in the block)."""


class MismatchError(RuntimeError):
    """The ranks of one collective call passed different formats, options or tensor sizes.
    Raised on every rank alike, before any value moved (as cpd::mpi::mismatch_error); the
    message names every field that differs: "the ranks disagree on the format (from e4m3fn
    to e5m2), total elements (from 100 to 101)". The process group stays usable."""


class AgreementError(RuntimeError):
    """The agreement check that starts every collective call did not complete: some rank of the
    group did not make the same call within the timeout (it failed or exited before, or is in
    another collective), or the group failed. The process group is not usable after it."""


def tensor_stream(step, bucket, position, world_size):
    """The stream of the random bits of tensor `position` of bucket `bucket` at `step`
    (spaced by 8 W^2, the streams one allreduce of W workers uses: docs/reduction.md)."""
    who = "cpd.torch.tensor_stream"
    step, bucket, position = (_cpd_pkg._int(who, n, v, -2**63, 2**63)
                              for n, v in (("step", step), ("bucket", bucket), ("position", position)))
    world_size = _cpd_pkg._int(who, "world_size", world_size, 1, 2**31 - 1)
    if not (0 <= position < 1024 and 0 <= bucket < 1024 and 0 <= step < 2**24):
        raise ValueError(f"cpd.torch.tensor_stream: step {step}, bucket {bucket}, position {position} out of range "
                         "(step < 2**24, bucket and position < 1024)")
    return ((step << 20) + (bucket << 10) + position) * 8 * world_size * world_size


def _check_options(who, format, scaler, algorithm, rounding, kahan, algorithms=_HOOK_ALGORITHMS, scalers=_ALL_SCALERS):
    if not isinstance(format, str):
        raise TypeError(f"{who}: format must be a string, not {type(format).__name__}")
    f = _cpd_pkg.finfo(format)  # ValueError for a name cpd::format::parse rejects
    if f.name not in _cpd_pkg.exchange_formats():
        raise ValueError(f"{who}: format {format} ({f.name}) is not compiled into the exchange; use one of "
                         + ", ".join(_cpd_pkg.exchange_formats()))
    if scaler not in scalers and scaler is not None:
        raise ValueError(f"{who}: scaler {scaler!r} is not one of " + ", ".join(scalers))
    if algorithm not in algorithms:
        raise ValueError(f"{who}: algorithm {algorithm!r} is not one of " + ", ".join(algorithms))
    if rounding not in _HOOK_ROUNDINGS:
        raise ValueError(f"{who}: rounding {rounding!r} is not one of " + ", ".join(_HOOK_ROUNDINGS))
    if scaler in _BLOCK_RULES and rounding != "nearest_even":
        raise ValueError(f"{who}: the block rule {scaler} rounds nearest_even (its elements saturate), not "
                         f"{rounding}")


def _codec(who, codec, format, scaler, rounding, kahan):
    """None without a codec; else the codec's name (cpd::make_codec's; ValueError for a name it
    rejects), after checking that format, scaler, rounding and kahan are left as a codec needs."""
    if codec is None:
        return None
    if not isinstance(codec, str):
        raise TypeError(f"{who}: codec must be a string (a cpd::make_codec name), not {type(codec).__name__}")
    if format not in (None, "fp32") or scaler not in (None, "none") or rounding != "nearest_even" or kahan:
        raise ValueError(f"{who}: a codec ({codec}) scales and rounds by itself: leave format, scaler, "
                         "rounding and kahan at None/fp32, none, nearest_even and False")
    return _cpd.Codec(codec).name


def _rotation(who, rotation):
    """0 or None (no rotation), or a power-of-two block of 2 .. 65536 values."""
    if rotation is None:
        return 0
    block = _cpd_pkg._int(who, "rotation", rotation, 0, 65536)
    if block == 1 or block & (block - 1):
        raise ValueError(f"{who}: rotation must be 0 (none) or a power of two from 2 to 65536, not {block}")
    return block


def _rotate(flat, sizes, block, seed, generator, inverse):
    """Each tensor of the float32 CPU tensor `flat` (sizes back to back) rotated in blocks of
    `block` (cpd.hadamard keyed by (seed, ROTATION_STREAM)), into a new tensor."""
    out = _torch.empty_like(flat)
    src, dst = flat.numpy(), out.numpy()
    at = 0
    for n in sizes:
        _cpd_pkg.hadamard(src[at:at + n], block, seed, inverse, out=dst[at:at + n], stream=ROTATION_STREAM,
                          generator=generator)
        at += n
    return out


def _timeout(who, timeout):
    """None (the process group's own timeout) or a positive number of seconds or timedelta."""
    if timeout is None:
        return None
    if isinstance(timeout, _datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float, _np.integer, _np.floating)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(f"{who}: timeout must be None, seconds or a datetime.timedelta, not {type(timeout).__name__}")
    if not 0 < seconds < 1e9:
        raise ValueError(f"{who}: timeout {timeout!r} must be a positive number of seconds")
    return _datetime.timedelta(seconds=seconds)


def _digest(values):
    data = _np.asarray(list(values), dtype=_np.uint64).tobytes()
    return int.from_bytes(_hashlib.blake2b(data, digest_size=8).digest(), "little")


def _digest_text(text):
    return int.from_bytes(_hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _listed(values):
    shown = ", ".join(str(int(v)) for v in values[:8]) + (", ..." if len(values) > 8 else "")
    return shown or "none"


@_functools.lru_cache(maxsize=None)
def _exchange_format(format):
    """(the index of format among the exchange's formats, those formats, whether it has NaN)."""
    formats = tuple(_cpd_pkg.exchange_formats())
    f = _cpd_pkg.finfo(format)
    return formats.index(f.name), formats, f.has_nan


def _agreement(o, sizes):
    """What every rank must pass alike, from the options o and the tensor sizes: (name, value
    in [0, 2**64), how to show it), `how` being None for a number (shown as its range over
    the ranks), the names of a choice (the value is an index), or this rank's value as text
    for a digest (sizes, streams)."""
    index, formats, _ = _exchange_format(o["format"])
    return [("the format", index, formats),
            ("the scaler", _ALL_SCALERS.index(o["scaler"]), _ALL_SCALERS),
            ("the algorithm", _HOOK_ALGORITHMS.index(o["algorithm"]), _HOOK_ALGORITHMS),
            ("the rounding", _HOOK_ROUNDINGS.index(o["rounding"]), _HOOK_ROUNDINGS),
            ("kahan", int(bool(o["kahan"])), None),
            ("mean", int(bool(o["mean"])), None),
            ("the seed", int(o["seed"]), None),
            ("the generator", _cpd_pkg.generators.index(o["generator"]), _cpd_pkg.generators),
            ("the rotation block", int(o.get("rotation", 0)), None),
            ("the codec", _digest_text(o.get("codec") or ""), o.get("codec") or "none"),
            ("the tensor count", len(sizes), None),
            ("total elements", sum(sizes), None),
            ("the sizes", _digest(sizes), _listed(sizes)),
            ("the streams", _digest(o["streams"]), _listed(o["streams"]))]


def _agree(who, fields, transport, timeout):
    """Collective: one all_reduce(MAX) of (v, ~v) per field (v - 2^63 as an int64, whose
    order is v's), after which every rank knows each field's smallest and largest value, and
    raises the same MismatchError naming the fields that differ. Returns the bytes sent."""
    words = []
    for _, v, _ in fields:
        e = int(v) - 2**63
        words += [e, ~e]
    got = transport.all_max(_np.array(words, dtype=_np.int64), who, timeout)
    differ = []
    for i, (name, _, how) in enumerate(fields):
        hi, lo = int(got[2 * i]) + 2**63, ~int(got[2 * i + 1]) + 2**63
        if lo == hi:
            continue
        if how is None:
            differ.append(f"{name} (from {lo} to {hi})")
        elif isinstance(how, tuple):
            differ.append(f"{name} (from {how[lo]} to {how[hi]})")
        else:
            differ.append(f"{name} (this rank: {how})")
    if differ:
        raise MismatchError(f"{who}: the ranks disagree on " + ", ".join(differ))
    return 8 * len(words)


def _global_rank(group, r):
    if group is None or group is _dist.GroupMember.WORLD:
        return r
    return _dist.distributed_c10d._get_global_rank(group, r)


def _wire_device(group, device):
    """Where the messages and statistics of an exchange of tensors on `device` travel: the
    tensors' GPU under NCCL, else the CPU (gloo; a GPU's codes are copied to the host)."""
    if device.type == "cpu" or "nccl" not in str(_dist.get_backend(group)).lower():
        return _torch.device("cpu")
    return device


def _nbytes(a):
    return a.nbytes if isinstance(a, _np.ndarray) else a.numel() * a.element_size()


class _Transport:
    """Moves the exchange's byte messages over a process group as uint8 tensors on the wire
    device (_wire_device): the host exchange's NumPy buffers, or the device exchange's CUDA
    slices, copied there where they live elsewhere."""

    def __init__(self, group, device):
        self.group = group
        self.device = _wire_device(group, device)
        self.rank = _dist.get_rank(group)
        self.world = _dist.get_world_size(group)

    def _on_wire(self, a):
        t = _torch.from_numpy(a) if isinstance(a, _np.ndarray) else a
        return t if t.device == self.device else t.to(self.device)

    def sendrecv(self, to, send, frm, recv):
        """Sends the bytes `send` to rank `to` and receives `recv` from rank `frm` of the group
        (the transport of the rank schedule: nothing else moves the exchange's messages)."""
        reqs = []
        rt = None
        if _nbytes(send):
            reqs.append(_dist.isend(self._on_wire(send), _global_rank(self.group, to), group=self.group))
        if _nbytes(recv):
            rt = self._on_wire(recv)
            reqs.append(_dist.irecv(rt, _global_rank(self.group, frm), group=self.group))
        for q in reqs:
            q.wait()
        if rt is None or rt is recv or (isinstance(recv, _np.ndarray) and rt.device.type == "cpu"):
            return  # (received in place)
        if isinstance(recv, _np.ndarray):
            recv[...] = rt.cpu().numpy()
        else:
            recv.copy_(rt)

    def all_gather(self, a):
        """Every rank's NumPy uint8 array `a` (of one size on every rank) as the rows of a
        (world, size) array, rank by rank."""
        t = self._on_wire(_np.ascontiguousarray(a))
        rows = [_torch.empty_like(t) for _ in range(self.world)]
        _dist.all_gather(rows, t, group=self.group)
        return _np.stack([r.cpu().numpy() for r in rows])

    def all_max(self, values, who=None, timeout=None):
        """The element-wise MAX over the ranks of the numpy array `values`. With `who` (the
        agreement check), a failure or a wait past `timeout` raises AgreementError."""
        t = _torch.from_numpy(_np.ascontiguousarray(values))
        if self.device.type != "cpu":
            t = t.to(self.device)
        work = _dist.all_reduce(t, op=_dist.ReduceOp.MAX, group=self.group, async_op=True)
        if who is None:
            work.wait()
        else:
            self._bounded_wait(who, work, timeout)
        return t.cpu().numpy()

    def _bounded_wait(self, who, work, timeout):
        try:
            if timeout is None:
                work.wait()  # (bounded by the process group's own timeout)
            elif self.device.type == "cpu":
                work.wait(timeout=timeout)
            else:  # (NCCL's wait returns before the work is done: poll it)
                deadline = _time.monotonic() + timeout.total_seconds()
                while not work.is_completed():
                    if _time.monotonic() > deadline:
                        raise RuntimeError("Operation timed out!")
                    _time.sleep(1e-4)
                work.wait()
        except RuntimeError as e:
            bound = "the process group's timeout" if timeout is None else f"{timeout.total_seconds():g} s"
            raise AgreementError(
                f"{who}: the agreement check of the {self.world} ranks did not complete within {bound} ({e}); "
                "some rank did not make this call (it failed or exited before, or is in another collective). "
                "The process group cannot be used after this") from e


class _HostSteps:
    """The steps of one rank's side on the host (cpd._cpd's Exchange or BlockExchange x, loaded):
    the messages are NumPy views of its buffers."""

    def __init__(self, x):
        self._x = x
        self.steps, self.send_to, self.recv_from, self.complete = x.steps, x.send_to, x.recv_from, x.complete

    def send(self, step):
        return _np.frombuffer(self._x.send(step), dtype=_np.uint8)

    def recv(self, step):
        return _np.frombuffer(self._x.recv(step), dtype=_np.uint8)

    def out_nonfinite(self):
        return self._x.out_nonfinite


def _HostExchange(o, sizes, scales, world, rank, flat, out):
    """One rank's side on the host (cpd::rank_exchange, bound by cpd._cpd), loaded with flat."""
    x = _cpd.make_exchange(o["format"], o["rounding"], o["algorithm"], list(sizes), [s.exponent for s in scales],
                           [s.nonfinite for s in scales], o["seed"], list(o["streams"]), o["generator"], world, rank,
                           bool(o["kahan"]), bool(o["mean"]), out.numpy())
    x.load(flat.numpy())
    return _HostSteps(x)


def _exchange(who, flat, sizes, out, o, transport, timeout, agreed=False, stats=None):
    """The exchange of the tensors held back to back in the float32 tensor `flat` into `out`
    (on the CPU, or on a GPU: the device exchange, cpd/_torch_cuda.py), with the options o
    (format, scaler, algorithm, rounding, kahan, mean, seed, generator, streams, rotation), after the ranks
    agreed on them (agreed: they have); returns (scales, statistics bytes, payload bytes sent, nonfinite
    values in out). A block rule (mx32, nvfp4; CPU tensors) gives a BlockScale per tensor and, with
    a dict `stats`, adds to it what rounding this rank's scaled values did."""
    w, r = transport.world, transport.rank
    sb = 0
    if w > 1 and not agreed:
        sb += _agree(who, _agreement(o, sizes), transport, timeout)
    block = o.get("rotation", 0)
    if block:  # rotated values in, the rotated sum rotated back (cpd::allreduce_options::rotation)
        rotated_out = _torch.empty_like(out)
        scales, sb2, sent, _ = _exchange(who, _rotate(flat, sizes, block, o["seed"], o["generator"], False), sizes,
                                         rotated_out, dict(o, rotation=0), transport, timeout, agreed=True,
                                         stats=stats)
        out.copy_(_rotate(rotated_out, sizes, block, o["seed"], o["generator"], True))
        return scales, sb + sb2, sent, int((~_torch.isfinite(out)).sum())  # (a NaN fills its rotation block)
    if o.get("codec"):
        return _codec_exchange(flat, sizes, out, o, transport, sb)
    if o["scaler"] in _BLOCK_RULES:
        return _block_exchange(flat, sizes, out, o, transport, sb, stats)
    sc = _cpd.make_scaler(o["scaler"], o["format"], world_size=w)  # aps, or none
    # each tensor's statistic, their MAX over the ranks, the scales: cpd::exchange_scales, as
    # cpd::mpi's (on a GPU from [max|x|], which has x's statistic)
    device = flat.device.type != "cpu"
    values, counts = _device.statistic_inputs(flat, sizes) if device else (flat.numpy(), list(sizes))
    scales = _cpd.exchange_scales(sc, values, counts, transport.all_max if w > 1 else None)
    if w > 1:
        sb += 4 * len(sizes)
    ex = (_device.Exchange if device else _HostExchange)(o, sizes, scales, w, r, flat, out)
    return scales, sb, _run_steps(ex, transport), ex.out_nonfinite()


def _run_steps(ex, transport):
    """The rank schedule of <cpd/exchange/schedule.hpp>, as cpd::mpi runs it, of the exchange
    ex; returns the payload bytes this rank sent."""
    sent = 0
    for step in range(ex.steps()):
        send, recv = ex.send(step), ex.recv(step)
        transport.sendrecv(ex.send_to(step), send, ex.recv_from(step), recv)
        sent += _nbytes(send)
        ex.complete(step)
    return sent


def _codec_exchange(flat, sizes, out, o, transport, sb):
    """_exchange through the codec o["codec"] on CPU tensors: the steps of
    cpd::mpi::codec_allreduce (and the bits of cpd.simulate_codec_allreduce): this rank encodes
    each tensor (the stream tensor_stream * W + rank, as the simulation's worker), one
    all_gather moves every rank's payloads, and every rank decodes them all and sums them in
    float in rank order (a mean: then / W). No scales: returns [] for them."""
    c = _cpd.Codec(o["codec"])
    w = transport.world
    mine = c.encode(flat.numpy(), list(sizes), o["seed"], list(o["streams"]), o["generator"], w, transport.rank)
    rows = transport.all_gather(mine) if w > 1 else mine.reshape(1, -1)
    bad = c.reduce(rows, list(sizes), w, bool(o["mean"]), out.numpy())
    return [], sb, mine.nbytes, bad


def _block_exchange(flat, sizes, out, o, transport, sb, stats):
    """_exchange with the block rule o["scaler"] on CPU tensors: the steps of
    cpd::mpi::block_scaled_plan (and of cpd.simulate_block_scaled_allreduce): NVFP4's tensor
    amax (one float32 a tensor) and the block codes (one byte a block) each combined by one
    all_reduce(MAX), then the values scaled block by block are summed by the rank schedule
    (nearest-even, the elements saturating) and the sum unscaled."""
    w, r = transport.world, transport.rank
    bx = _cpd.make_block_exchange(o["format"], o["scaler"], o["algorithm"], list(sizes), o["seed"], list(o["streams"]),
                                  o["generator"], w, r, bool(o["kahan"]), bool(o["mean"]), out.numpy())
    x = flat.numpy()
    amax = bx.local_amax(x)
    if bx.two_level and w > 1:
        amax = transport.all_max(amax)
        sb += amax.nbytes
    codes = bx.local_codes(x, amax)
    if w > 1 and codes.size:
        codes = transport.all_max(codes)
        sb += codes.nbytes
    bx.load_blocks(x, codes, stats is not None)
    sent = _run_steps(_HostSteps(bx), transport)
    if stats is not None:
        for k, v in bx.scaled_stats().items():
            stats[k] = stats.get(k, 0) + v
    return [BlockScale(*t) for t in bx.results()], sb, sent, bx.out_nonfinite


def all_reduce(tensors, format, scaler="aps", algorithm="ring", rounding="nearest_even", kahan=False, mean=True,
               seed=0, streams=None, group=None, timeout=None, generator=None, rotation=0, codec=None):
    """Sums (mean=True: averages) the float32 tensors of every rank of `group` in `format`, in
    place (CPU tensors, or CUDA tensors of one device: on the device, with the CUDA module),
    tensor by tensor with the chunks, order and roundings of
    cpd::simulate_allreduce(algorithm), all tensors in one message per step. APS takes one
    statistic per tensor (one MAX allreduce of int32 for all of them). streams: the stochastic
    rounding stream of each tensor (default 8 W^2 * index). First the ranks check that they
    agree on every option and size (MismatchError on every rank when not); timeout (seconds or
    a timedelta; None: the group's own) bounds the wait for a rank that does not come
    (AgreementError). rotation=B: every tensor rotated in blocks of B before (the module's
    doc; CPU tensors). scaler="mx32" or "nvfp4": block scales (the module's doc; rounding
    nearest_even), on the host. Returns a dict: scales (a cpd.Scale per tensor; a BlockScale
    with a block rule; none with a codec), statistics_bytes (the agreement check's and the
    statistics', with the block codes) and payload_bytes this rank sent, out_nonfinite.
    codec="int:4:32" (any cpd::make_codec name; then format and scaler None): every rank's
    tensors encoded, the payloads all-gathered, decoded and summed in float in rank order, as
    cpd::mpi::codec_allreduce (the module's doc)."""
    who = "cpd.torch.all_reduce"
    codec = _codec(who, codec, format, scaler, rounding, kahan)
    if codec is not None:
        format, scaler = "fp32", "none"
    _check_options(who, format, scaler, algorithm, rounding, kahan)
    rotation = _rotation(who, rotation)
    timeout = _timeout(who, timeout)
    seed = _cpd_pkg._int(who, "seed", seed, 0, 2**64 - 1)
    generator = _cpd_pkg._generator(who, generator)
    if not _dist.is_initialized():
        raise RuntimeError(f"{who}: torch.distributed is not initialized (init_process_group first)")
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise TypeError(f"{who}: tensors must be a non-empty list of float32 tensors")
    for i, t in enumerate(tensors):
        if not isinstance(t, _torch.Tensor) or t.dtype != _torch.float32:
            raise TypeError(f"{who}: every tensor must be a float32 torch.Tensor")
        if not _cpd_pkg._distinct_elements(t.shape, [4 * st for st in t.stride()], 4):
            raise ValueError(f"{who}: tensor {i} has elements that share memory (shape {tuple(t.shape)}, strides "
                             f"{t.stride()}: expand or as_strided); the result is written into every tensor")
    device = tensors[0].device
    w = _dist.get_world_size(group)
    if streams is None:
        streams = [8 * w * w * i for i in range(len(tensors))]
    if not isinstance(streams, (list, tuple)) or len(streams) != len(tensors):
        raise ValueError(f"{who}: streams must be a list of one stream per tensor ({len(tensors)})")
    streams = [_cpd_pkg._int(who, "a stream", s, 0, 2**64 - 1) for s in streams]
    sizes = [t.numel() for t in tensors]
    if rotation and device.type != "cpu":
        raise ValueError(f"{who}: rotation runs on CPU tensors only (these are on {device})")
    on_host = codec is not None or scaler in _BLOCK_RULES or not _device.takes(tensors[0], algorithm)
    here = _torch.device("cpu") if on_host else device
    flat = _torch.cat([t.detach().reshape(-1).to(here) for t in tensors])
    out = _torch.empty_like(flat)
    o = {"format": format, "scaler": scaler or "none", "algorithm": algorithm, "rounding": rounding, "kahan": kahan,
         "mean": mean, "seed": seed, "generator": generator, "streams": streams, "rotation": rotation, "codec": codec}
    scales, sb, pb, bad = _exchange(who, flat, sizes, out, o, _Transport(group, device), timeout)
    at = 0
    for t, n in zip(tensors, sizes):
        t.copy_(out[at:at + n].view_as(t))
        at += n
    return {"scales": scales, "statistics_bytes": sb, "payload_bytes": pb, "out_nonfinite": bad}


class CommHook:
    """A DDP communication hook: register with ddp_model.register_comm_hook(None, hook).

    Every bucket is averaged over the process group in `format` (see all_reduce); the hook
    counts what it did: steps, values, bytes_sent (payload and statistics), bits_per_value,
    nonfinite_steps (steps where some worker's gradient held inf or NaN: the result holds
    NaN or inf there, and such a step should be skipped, as GradScaler does) and
    out_nonfinite (non-finite values handed back to DDP). With record=True, `records`
    keeps each bucket's (step, bucket index, sizes, streams, scale exponents); with
    diagnostics=True, `stats` sums what rounding this rank's scaled values to the format
    did (count, underflow, overflow, nan_inputs, ...: cpd::value_stats, nearest-even), as
    EmulatedWorkers.stats does for every worker. The hook's name (DDP logs __name__ and
    __qualname__) is cpd_comm_hook_<format>_<algorithm>; a wrapper must carry its own.
    Every bucket starts with all_reduce's agreement check (the bucket's sizes and streams,
    the hook's options): MismatchError on every rank when they differ, AgreementError after
    `timeout` when some rank does not come. rotation=B rotates every gradient tensor in blocks
    of B before the exchange and the sum back (CPU buckets; the module's doc). scaler="mx32" or
    "nvfp4" exchanges with block scales (the module's doc; on the host, CUDA buckets through
    host copies): records then keep each tensor's BlockScale, bytes_sent counts the codes.
    codec="int:4:32" (format and scaler None) exchanges through a gradient codec (the module's
    doc; on the host): no scales or diagnostics; a step is non-finite where the result holds
    inf or NaN."""

    def __init__(self, format, scaler="aps", algorithm="ring", rounding="nearest_even", kahan=False, seed=0,
                 process_group=None, record=False, diagnostics=False, timeout=None, generator=None, rotation=0,
                 codec=None):
        who = "cpd.torch.comm_hook"
        self.generator = _cpd_pkg._generator(who, generator)
        self.codec = _codec(who, codec, format, scaler, rounding, kahan)
        if self.codec is not None:
            format, scaler = "fp32", "none"
        _check_options(who, format, scaler, algorithm, rounding, kahan)
        self.rotation = _rotation(who, rotation)
        self.timeout = _timeout(who, timeout)
        self.diagnostics = bool(diagnostics)
        self.stats = {}
        self.format, self.scaler, self.algorithm = format, scaler or "none", algorithm
        self.rounding, self.kahan, self.seed = rounding, bool(kahan), _cpd_pkg._int(who, "seed", seed, 0, 2**64 - 1)
        self.process_group = process_group
        self.record = record
        what = format if self.codec is None else self.codec
        self.__name__ = self.__qualname__ = f"cpd_comm_hook_{what}_{algorithm}"  # (DDP logs them)
        self.records = []
        self.steps = 0
        self.values = 0
        self.bytes_sent = 0
        self.nonfinite_steps = 0
        self.out_nonfinite = 0
        self._step_nonfinite = False

    @property
    def bits_per_value(self):
        """Bits this rank sent per gradient value (payload and statistics)."""
        return 8.0 * self.bytes_sent / self.values if self.values else 0.0

    def __call__(self, state, bucket):
        buf = bucket.buffer()
        grads = bucket.gradients()
        sizes = [g.numel() for g in grads]
        if sum(sizes) != buf.numel():
            raise RuntimeError("cpd.torch.comm_hook: the bucket's gradients do not fill its buffer "
                               f"({sum(sizes)} of {buf.numel()} values); sparse gradients are not supported")
        if buf.dtype != _torch.float32:
            raise TypeError(f"cpd.torch.comm_hook: the bucket holds {buf.dtype}; the hook sums float32 gradients")
        group = self.process_group
        w = _dist.get_world_size(group)
        index = bucket.index()
        streams = [tensor_stream(self.steps, index, p, w) for p in range(len(sizes))]
        if self.rotation and buf.device.type != "cpu":
            raise ValueError(f"cpd.torch.comm_hook: rotation runs on CPU buckets only (this one is on {buf.device})")
        # a CUDA bucket stays on its device (with the CUDA module; block rules run on the host)
        block = self.scaler in _BLOCK_RULES
        on_host = block or self.codec is not None or not _device.takes(buf, self.algorithm)
        here = _torch.device("cpu") if on_host else buf.device
        flat = buf.detach().to(here).contiguous()
        out = _torch.empty_like(flat)
        o = {"format": self.format, "scaler": self.scaler, "algorithm": self.algorithm, "rounding": self.rounding,
             "kahan": self.kahan, "mean": True, "seed": self.seed, "generator": self.generator,
             "streams": streams, "rotation": self.rotation, "codec": self.codec}
        scales, sb, pb, bad = _exchange("cpd.torch.comm_hook", flat, sizes, out, o, _Transport(group, buf.device),
                                        self.timeout, stats=self.stats if self.diagnostics and block else None)
        if self.record:
            self.records.append({"step": self.steps, "bucket": index, "sizes": sizes, "streams": streams,
                                 "scales": scales if block else [s.exponent for s in scales]})
        if self.diagnostics and not block and self.codec is None:  # (the values quantized: rotated where it rotates)
            x = _rotate(flat, sizes, self.rotation, self.seed, self.generator, False) if self.rotation else flat
            self._count(x.cpu().numpy(), sizes, scales)
        self.values += buf.numel()
        self.bytes_sent += sb + pb
        self.out_nonfinite += bad
        self._step_nonfinite |= any(s.nonfinite for s in scales) or (self.codec is not None and bad > 0)
        if bucket.is_last():
            self.nonfinite_steps += int(self._step_nonfinite)
            self._step_nonfinite = False
            self.steps += 1
        if buf.device.type == "cpu":
            fut = _torch.futures.Future()
            fut.set_result(out)
        else:  # naming the device makes the future record the current stream's work for DDP to wait on
            fut = _torch.futures.Future(devices=[buf.device])
            fut.set_result(out.to(buf.device))
        return fut

    def _count(self, x, sizes, scales):
        """What rounding this rank's scaled values x (a float32 array) to the format did, into
        self.stats (one more pass, on the host)."""
        tmp = _np.empty(max(sizes), dtype=_np.float32)
        at = 0
        for n, sc in zip(sizes, scales):
            counts = _cpd.quantize(x[at:at + n], tmp[:n], "float32", "float32", self.format, "nearest_even",
                                   "infinity", 0, 0, self.generator, 0, sc.exponent, "a", "keep", "format", 1, True)
            for k, v in counts.items():
                self.stats[k] = self.stats.get(k, 0) + v
            at += n


def comm_hook(format, scaler="aps", algorithm="ring", rounding="nearest_even", kahan=False, seed=0,
              process_group=None, record=False, diagnostics=False, timeout=None, generator=None, rotation=0,
              codec=None):
    """A DDP communication hook that exchanges gradients in `format` (see CommHook):

        model = DistributedDataParallel(net)
        model.register_comm_hook(None, cpd.torch.comm_hook("e4m3fn", scaler="aps"))
    """
    return CommHook(format, scaler, algorithm, rounding, kahan, seed, process_group, record, diagnostics, timeout,
                    generator, rotation, codec)


def emulate_allreduce(worker_tensors, format, scaler="aps", algorithm="ring", rounding="nearest_even", kahan=False,
                      mean=True, seed=0, step=0, threads=None, generator=None, rotation=0):
    """worker_tensors[w][t]: tensor t of worker w (W lists of float32 CPU tensors of the
    same shapes). Returns the list of tensors t summed (mean=True: averaged) over the W
    workers by cpd.simulate_allreduce, tensor t with the stream tensor_stream(step, 0, t, W),
    and the list of each tensor's info (scale, nonfinite_out). scaler="mx32" or "nvfp4": by
    cpd.simulate_block_scaled_allreduce (its info: nonfinite, blocks, tensor_scale,
    nonfinite_out). rotation=B: each worker's tensor rotated in blocks of B first, the sum
    rotated back (the module's doc)."""
    who = "cpd.torch.emulate_allreduce"
    _check_options(who, format, scaler, algorithm, rounding, kahan, algorithms=_cpd_pkg.algorithms)
    rotation = _rotation(who, rotation)
    g = _cpd_pkg._generator(who, generator)
    w = len(worker_tensors)
    if w < 1:
        raise ValueError(f"{who}: no workers")
    count = len(worker_tensors[0])
    if any(len(ts) != count for ts in worker_tensors):
        raise ValueError(f"{who}: the workers have different numbers of tensors")
    results, infos = [], []
    for t in range(count):
        xs = [worker_tensors[r][t].detach().contiguous() for r in range(w)]
        if rotation:
            if any(x.device.type != "cpu" for x in xs):
                raise ValueError(f"{who}: rotation runs on CPU tensors only")
            xs = [_rotate(x.reshape(-1), [x.numel()], rotation, seed, g, False).view_as(x) for x in xs]
        stream = tensor_stream(step, t // 1024, t % 1024, w)
        if scaler in _BLOCK_RULES:
            res, info = _cpd_pkg.simulate_block_scaled_allreduce(xs, format, rule=scaler, algorithm=algorithm,
                                                                 kahan=kahan, mean=mean, seed=seed, stream=stream,
                                                                 threads=threads, generator=generator)
        else:
            res, info = _cpd_pkg.simulate_allreduce(xs, format, scaler=scaler or "none", algorithm=algorithm,
                                                    rounding=rounding, kahan=kahan, mean=mean, seed=seed, stream=stream,
                                                    threads=threads, generator=generator)
        if rotation:  # (a NaN fills its rotation block)
            res = _rotate(res.reshape(-1), [res.numel()], rotation, seed, g, True).view_as(res)
            info["nonfinite_out"] = int((~_torch.isfinite(res)).sum())
        results.append(res)
        infos.append(info)
    return results, infos


class EmulatedWorkers:
    """W data-parallel workers inside one process (CPD's emulate_node):

        workers = cpd.torch.EmulatedWorkers(model, 8, "e4m3fn", scaler="aps")
        loss = workers.backward(loss_fn, inputs, targets)   # p.grad = the exchanged mean
        optimizer.step()

    backward splits the batch into W shards (torch.tensor_split along dim 0), computes each
    shard's gradient with the model (worker w's gradient), sums the W gradients tensor by
    tensor as cpd.simulate_allreduce does (mean) and writes the result into every parameter's
    .grad. format=None or "fp32" sums in float32 in the ring's order. scaler="mx32" or "nvfp4"
    exchanges with a scale per block (cpd.simulate_block_scaled_allreduce: OCP MX's power of
    two per 32 values, NVFP4's E4M3 scale per 16 values and a tensor scale; nearest-even);
    codec="int:8:32" (any cpd::make_codec name; then no format, scaler or rounding) exchanges
    through a gradient codec (cpd.simulate_codec_allreduce); rotation=B rotates every
    gradient tensor in blocks of B before the exchange and the sum back (the module's doc).
    Those three run on the host (a GPU model's gradients go through host copies). A model on a GPU sums on
    it (W device ranks in this process, cpd::cuda::rank_exchange, with the CUDA module; every
    algorithm but halving_doubling, which is simulated on the host): the same bits. Counts as
    CommHook: steps, values, nonfinite_steps, out_nonfinite, stats (the scaled quantization's
    underflow/overflow counts of every worker's values; diagnostics=False leaves it empty, the
    default on a GPU, where the counts need a host copy; a codec has none), exchange_seconds (the
    time of the exchanges, not of the W backward passes; on a GPU until the device has done
    them) and bits_per_value (the bits sent per gradient value: the format's, plus the block
    scales' or the codec's payload)."""

    def __init__(self, model, workers, format="fp32", scaler="aps", algorithm="ring", rounding="nearest_even",
                 kahan=False, seed=0, threads=None, diagnostics=None, generator=None, codec=None, rotation=0):
        who = "cpd.torch.EmulatedWorkers"
        self.generator = _cpd_pkg._generator(who, generator)
        workers = _cpd_pkg._int(who, "workers", workers, 1, 2**31 - 1)
        if _codec(who, codec, format, scaler, rounding, kahan) is not None:
            scaler = "none"
        format = format or "fp32"
        _check_options(who, format, scaler, algorithm, rounding, kahan, algorithms=_cpd_pkg.algorithms,
                       scalers=_ALL_SCALERS)
        self.codec, self.rotation = codec, _rotation(who, rotation)
        self._bits = 0 if codec is not None else _cpd_pkg.finfo(format).bits
        self.payload_bits = 0
        self.model, self.workers, self.format = model, workers, format
        self.scaler, self.algorithm, self.rounding = scaler or "none", algorithm, rounding
        self.kahan, self.seed, self.threads = kahan, _cpd_pkg._int(who, "seed", seed, 0, 2**64 - 1), threads
        self.diagnostics = diagnostics
        self.steps = 0
        self.values = 0
        self.nonfinite_steps = 0
        self.out_nonfinite = 0
        self.stats = {}
        self.exchange_seconds = 0.0

    def backward(self, loss_fn, inputs, targets):
        params = [p for p in self.model.parameters() if p.requires_grad]
        if len(inputs) < self.workers:
            raise ValueError(f"cpd.torch.EmulatedWorkers: a batch of {len(inputs)} for {self.workers} workers")
        grads, total = self._worker_gradients(params, loss_fn, inputs, targets)
        start = _time.perf_counter()
        on_host = self.codec is not None or self.rotation or self.scaler in _cpd_pkg.block_rules
        if params and not on_host and _device.takes(grads[0][0], self.algorithm):
            nonfinite = self._exchange_on_device(params, grads)
        else:
            nonfinite = self._exchange_on_host(params, grads)
        self.exchange_seconds += _time.perf_counter() - start
        self.nonfinite_steps += int(nonfinite)
        self.steps += 1
        return total / len(inputs)

    def _worker_gradients(self, params, loss_fn, inputs, targets):
        """grads[w][t]: worker w's gradient of parameter t (its shard of the batch), and the
        summed loss of the shards."""
        xs = _torch.tensor_split(inputs, self.workers)
        ys = _torch.tensor_split(targets, self.workers)
        grads, total = [], 0.0
        for x, y in zip(xs, ys):
            for p in params:
                p.grad = None
            loss = loss_fn(self.model(x), y)
            loss.backward()
            total += float(loss.detach()) * len(x)
            grads.append([p.grad.detach().clone() if p.grad is not None else _torch.zeros_like(p) for p in params])
        return grads, total

    def _streams(self, count):
        return [tensor_stream(self.steps, t // 1024, t % 1024, self.workers) for t in range(count)]

    @property
    def bits_per_value(self):
        """Bits sent per gradient value so far: the format's bits, plus MX's 8 bits per 32
        values or NVFP4's 8 per 16 and 32 per tensor; a codec's payload bytes * 8."""
        return self.payload_bits / self.values if self.values else 0.0

    def _exchange_one(self, xs, stream):
        """One tensor's W host arrays summed (mean) by the chosen exchange: (result, info)."""
        common = {"mean": True, "seed": self.seed, "stream": stream, "threads": self.threads,
                  "generator": self.generator}
        n = xs[0].numel()
        if self.codec is not None:
            res, info = _cpd_pkg.simulate_codec_allreduce(xs, self.codec, **common)
            self.payload_bits += 8 * info["payload_bytes"]
            info["nonfinite"] = info["nonfinite_out"] > 0  # (an inf or NaN comes out as NaN over its block)
            return res, info
        diagnostics = self.diagnostics is not False
        if self.scaler in _cpd_pkg.block_rules:
            res, info = _cpd_pkg.simulate_block_scaled_allreduce(
                xs, self.format, rule=self.scaler, algorithm=self.algorithm, kahan=self.kahan,
                diagnostics=diagnostics, **common)
            self.payload_bits += self._bits * n + 8 * info["blocks"] + (32 if self.scaler == "nvfp4" else 0)
            return res, info
        res, info = _cpd_pkg.simulate_allreduce(
            xs, self.format, scaler=self.scaler, algorithm=self.algorithm, rounding=self.rounding, kahan=self.kahan,
            diagnostics=diagnostics, **common)
        self.payload_bits += self._bits * n
        info["nonfinite"] = info["scale"].nonfinite
        return res, info

    def _exchange_on_host(self, params, grads):
        """The exchange tensor by tensor (on host copies of a GPU's gradients), rotated around
        it with rotation=B."""
        nonfinite = False
        for t, (p, stream) in enumerate(zip(params, self._streams(len(params)))):
            xs_t = [grads[r][t].contiguous().cpu() for r in range(self.workers)]
            if self.rotation:
                xs_t = [_rotate(x.reshape(-1), [x.numel()], self.rotation, self.seed, self.generator, False)
                        for x in xs_t]
            res, info = self._exchange_one(xs_t, stream)
            if self.rotation:  # (a NaN fills its rotation block)
                res = _rotate(res.reshape(-1), [res.numel()], self.rotation, self.seed, self.generator, True)
                info["nonfinite_out"] = int((~_torch.isfinite(res)).sum())
            p.grad = res.view_as(p).to(p.device)
            nonfinite |= info["nonfinite"]
            self.out_nonfinite += info["nonfinite_out"]
            for k, v in info.get("scaled", {}).items():
                self.stats[k] = self.stats.get(k, 0) + v
            self.values += res.numel()
        return nonfinite

    def _exchange_on_device(self, params, grads):
        """W device ranks in this process exchange every tensor at once (cpd._torch_cuda)."""
        grads = [[g.contiguous() for g in ws] for ws in grads]
        outs = [_torch.empty_like(g) for g in grads[0]]
        scaler = _cpd.make_scaler(self.scaler, self.format, world_size=self.workers)
        scales = _device.worker_scales(scaler, grads)
        o = {"format": self.format, "rounding": self.rounding, "algorithm": self.algorithm, "kahan": self.kahan,
             "mean": True, "seed": self.seed, "generator": self.generator, "streams": self._streams(len(params))}
        _device.emulate(grads, outs, o, scales)
        if self.diagnostics:
            for t, sc in enumerate(scales):
                for r in range(self.workers):
                    x = grads[r][t].reshape(-1).cpu().numpy()
                    counts = _cpd.quantize(x, _np.empty_like(x), "float32", "float32", self.format, "nearest_even",
                                           "infinity", 0, 0, self.generator, 0, sc.exponent, "a", "keep", "format", 1, True)
                    for k, v in counts.items():
                        self.stats[k] = self.stats.get(k, 0) + v
        for p, res in zip(params, outs):
            p.grad = res.view_as(p)
            self.values += res.numel()
            self.payload_bits += self._bits * res.numel()
        self.out_nonfinite += _device.count_nonfinite(outs)  # (waits for the device)
        return any(s.nonfinite for s in scales)
