# SPDX-License-Identifier: MIT
"""The exchange on CUDA tensors (docs/python.md, "CUDA"): cpd.torch's hook and all_reduce,
cpd.torch.EmulatedWorkers and cpd.simulate_allreduce keep a CUDA bucket on its device. Every
value is summed by cpd::cuda::rank_exchange (the library's rank schedule with its element
backend, kernels on the tensors' current stream; cpd._cpd_cuda binds it with pointers and
the stream as integers), whose messages are slices of one CUDA uint8 tensor: a transport
moves them with torch.distributed (packed codes, never float32), W emulated ranks with
device copies. The statistics are max|x| on the device (one wait per call), their statistic
and its combine and select those of the host (cpd::exchange_scales): the host's bits."""

import numpy as _np

from . import _cuda

_native = _cuda._native  # pylint: disable=protected-access  (None without the CUDA module)

#: The algorithms the device runs: the rank schedule's, and sequential (all_gather's sums).
DEVICE_ALGORITHMS = {"ring": "ring", "pipelined_ring": "pipelined_ring", "two_step": "two_step",
                      "all_gather": "all_gather", "sequential": "all_gather"}


def takes(tensor, algorithm="ring"):
    """Whether the exchange of this tensor runs on its device: a CUDA tensor, the CUDA module
    built, and an algorithm with a rank schedule (halving_doubling has none)."""
    return (_native is not None and tensor.device.type == "cuda" and algorithm in DEVICE_ALGORITHMS)


def _stream(device):
    import torch
    return torch.cuda.current_stream(device).cuda_stream


def amaxes(pieces):
    """max|x| of every float32 CUDA tensor of `pieces` (contiguous; one device) as a float32
    array, NaN where one holds NaN: one launch each, one wait."""
    if not pieces:
        return _np.empty(0, _np.float32)
    dev = pieces[0].device
    got = _native.amaxes([p.data_ptr() for p in pieces], [p.numel() for p in pieces], _stream(dev), dev.index)
    return _np.asarray(got, dtype=_np.float32)


def statistic_inputs(flat, sizes):
    """(values, counts) for cpd::exchange_scales from the tensors held back to back in the CUDA
    tensor flat: [max|x|] for each (a statistic depends on max|x| alone)."""
    pieces, at = [], 0
    for n in sizes:
        pieces.append(flat[at:at + n])
        at += n
    return amaxes(pieces), [1] * len(sizes)


class Exchange:
    """One rank's side of an exchange of the float32 tensors held back to back in the CUDA
    tensor flat, into out (cpd::cuda::rank_exchange): the messages are slices of self.area."""

    def __init__(self, o, sizes, scales, world, rank, flat, out):
        import torch
        self.out = out
        self._x = _native.make_exchange(
            o["format"], o["rounding"], o["algorithm"], list(sizes), [s.exponent for s in scales],
            [s.nonfinite for s in scales], o["seed"], list(o["streams"]), o["generator"], world, rank,
            bool(o["kahan"]), bool(o["mean"]), flat.data_ptr(), out.data_ptr(), flat.device.index)
        self.area = torch.empty(self._x.area_bytes(), dtype=torch.uint8, device=flat.device)
        self._x.start(self.area.data_ptr(), self.area.numel(), _stream(flat.device))

    def steps(self):
        return self._x.steps()

    def send_to(self, step):
        return self._x.send_to(step)

    def recv_from(self, step):
        return self._x.recv_from(step)

    def send(self, step):
        at, n = self._x.send(step)
        return self.area[at:at + n]

    def recv(self, step):
        at, n = self._x.recv(step)
        return self.area[at:at + n]

    def complete(self, step):
        self._x.complete(step)

    def out_nonfinite(self):
        import torch
        return int((~torch.isfinite(self.out)).sum())


def emulate(grads, outs, o, scales):
    """W ranks in this process on one device (cpd::cuda::run_in_process): grads[r][t] is worker
    r's tensor t (contiguous float32 CUDA tensors), outs[t] receives tensor t's result, with the
    options o (format, rounding, algorithm, kahan, mean, seed, generator, streams) and each tensor's scale."""
    import torch
    w, dev = len(grads), outs[0].device
    e = _native.make_emulation(o["format"], o["rounding"], DEVICE_ALGORITHMS[o["algorithm"]], w,
                               [g.data_ptr() for ws in grads for g in ws], [t.data_ptr() for t in outs],
                               [t.numel() for t in outs], [s.exponent for s in scales],
                               [s.nonfinite for s in scales], o["seed"], list(o["streams"]), o["generator"],
                               bool(o["kahan"]), bool(o["mean"]), dev.index)
    area = torch.empty(e.area_bytes(), dtype=torch.uint8, device=dev)
    e.run(area.data_ptr(), area.numel(), _stream(dev))


def worker_scales(scaler, grads):
    """Each tensor's scale for W workers in this process: scaler.select of the statistics of
    grads[r][t] combined over r in rank order (the simulation's), from max|x| on the device."""
    w, count = len(grads), len(grads[0])
    a = amaxes([g for ws in grads for g in ws])
    scales = []
    for t in range(count):
        st = scaler.identity
        for r in range(w):
            st = scaler.combine(st, scaler.statistic(a[r * count + t:r * count + t + 1]))
        scales.append(scaler.select(st))
    return scales


def count_nonfinite(tensors):
    """The inf and NaN values of a list of CUDA tensors (one wait)."""
    import torch
    if not tensors:
        return 0
    return int(torch.stack([(~torch.isfinite(t)).sum() for t in tensors]).sum())


def _same_bits(a, b):
    """Whether two float32 tensors hold the same values (NaN matching NaN)."""
    import torch
    return bool(((a.view(torch.int32) == b.view(torch.int32)) | (torch.isnan(a) & torch.isnan(b))).all())


def _wide_inputs(who, tensors, name, format, rounding, scale, seed, stream, generator):
    """The workers' float32 values on the device, as the host's simulation takes them: float16
    and bfloat16 widened (exact); float64 rounded to the format from the double with the
    simulation's own scale and random bits (worker r: stream + 8 r), then made float32."""
    import torch
    if name != "float64":
        return [x.float().contiguous() for x in tensors]
    out = []
    for r, x in enumerate(tensors):
        q = _cuda.quantize(x.contiguous(), None, lambda _name: None, format, rounding, "infinity", seed,
                           (stream + 8 * r) % 2**64, generator, 0, scale.exponent)
        wide = q.float()
        if not bool(((wide.double() == q) | torch.isnan(q)).all()):
            raise ValueError(f"{who}: worker {r}'s values rounded to {format} (scale 2^{scale.exponent}) are not all "
                             "float32 values (beyond float32's range); the simulation sums float32 values")
        out.append(wide)
    return out


def simulate(who, tensors, name, format, sc, o, out):
    """cpd.simulate_allreduce of W CUDA tensors of dtype `name` (torch, one device, one shape) on
    their device with the cpd.Scaler sc and the options o (algorithm, rounding, kahan, mean,
    seed, stream, generator): each worker's statistic from max|x| on the device, combined in rank order,
    the scale, then W device ranks of one exchange in this process. Returns (the sum in the
    inputs' dtype, or in out, a CUDA tensor of a dtype that holds it), info)."""
    import torch
    st = sc.identity
    for x in tensors:
        st = sc.combine(st, sc.statistic(x))
    scale = sc.select(st)
    wide = _wide_inputs(who, tensors, name, format, o["rounding"], scale, o["seed"], o["stream"], o["generator"])
    res = torch.empty(wide[0].shape, dtype=torch.float32, device=wide[0].device)
    emulate([[w.reshape(-1)] for w in wide], [res.reshape(-1)],
            dict(o, format=format, streams=[o["stream"]]), [scale])
    info = {"scale": scale, "nonfinite_out": count_nonfinite([res])}
    target = out.dtype if out is not None else tensors[0].dtype
    done = res if target == torch.float32 else res.to(target)
    if target != torch.float32 and not _same_bits(done.float(), res):
        t = str(target).replace("torch.", "")
        raise ValueError(f"{who}: the sum has values that are not {t} values (the format {format} and the scale "
                         f"2^{scale.exponent} give values beyond {t}'s precision or range); pass out= of float32")
    if out is None:
        return done, info
    out.copy_(done)
    return out, info
