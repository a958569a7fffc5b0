# SPDX-License-Identifier: MIT
"""ResNet-18 for 28x28 grey images, and the gradients of W data-parallel workers for
cpd.torch.EmulatedWorkers, computed in one pass for all W or in W passes
(examples/torch/resnet_fmnist.py trains with them; docs/results.md, "ResNet-18").

- ResNet18: torchvision's resnet18 written out (BasicBlock, [2, 2, 2, 2], widths 64 to
  512, its initialization) with the small-image stem: conv1 3x3, stride 1, padding 1 on one
  channel, no max-pool.
- BatchedWorkers(net, W, format, scaler, ...): every step, one forward and backward pass
  gives each of the W workers the gradient of its own shard (BatchNorm over its own shard),
  and cpd.torch.EmulatedWorkers exchanges them (ReplicatedResNet, ShardReplay).
- SequentialWorkers(net, W, format, scaler, ...): EmulatedWorkers runs the model on each
  shard in turn, as it does for any model.
Both keep worker 0's BatchNorm running statistics (torch DDP's default) and give, in exact
arithmetic, the same gradients; with W = 1 they give plain training's bits.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: conv3x3-BN-ReLU-conv3x3-BN, plus the identity or a
    1x1-conv-BN downsample, then ReLU."""

    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision.models.resnet18's layers and initialization, for 28x28 grey images: conv1
    3x3 stride 1 on one channel and no max-pool (the CIFAR adaptation). width 64 is
    torchvision's; 11 172 810 parameters in 62 tensors for 10 classes."""

    def __init__(self, width=64, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        planes, layers = width, []
        for i in range(4):
            out = width << i
            layers.append(nn.Sequential(BasicBlock(planes, out, 1 if i == 0 else 2), BasicBlock(out, out, 1)))
            planes = out
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(planes, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def blocks(self):
        return [b for layer in (self.layer1, self.layer2, self.layer3, self.layer4) for b in layer]

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        for b in self.blocks():
            h = b(h)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def batch_norms(net):
    return [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]


# --- the W workers' gradients in one pass ---------------------------------------------------

class ReplicatedResNet:
    """W copies of a ResNet18 evaluated in one pass on W shards: the shards lie side by side
    along the channels (batch b, channels W*C: worker w's channels are w*C .. w*C+C-1), every
    convolution has groups=W and weights (W*Cout, Cin, k, k) replicated from the model's,
    BatchNorm normalizes W*C channels (each worker over its own shard), the classifier is a
    batched product. Each worker keeps its own running statistics (running[bn], W*C values);
    sync_running_stats() copies worker 0's into the model."""

    def __init__(self, net, workers, channels_last=False):
        self.net, self.w, self.channels_last = net, workers, channels_last
        self.params = list(net.parameters())
        self.running = {m: (m.running_mean.repeat(workers), m.running_var.repeat(workers)) for m in batch_norms(net)}

    def worker_gradients(self, x, y):
        """x (W*b, 1, H, W'), y (W*b,), worker-major. Returns (the W losses, a (W,) tensor;
        grads[w][t], worker w's gradient of the model's parameter t)."""
        w, b = self.w, len(x) // self.w
        reps = {p: p.detach().expand(w, *p.shape).contiguous().requires_grad_() for p in self.params}
        h = x.reshape(w, b, *x.shape[2:]).transpose(0, 1)  # (b, W, H, W'): worker w's image is channel w
        h = h.contiguous(memory_format=torch.channels_last if self.channels_last else torch.contiguous_format)
        logits = self._forward(reps, h)
        if w == 1:  # (the model's own loss, so that one worker gives the bits of plain training)
            losses = F.cross_entropy(logits[0], y).unsqueeze(0)
        else:
            losses = F.cross_entropy(logits.reshape(w * b, -1), y, reduction="none").view(w, b).mean(1)
        losses.sum().backward()
        grads = [[reps[p].grad[r] for p in self.params] for r in range(w)]
        return losses.detach(), grads

    def sync_running_stats(self):
        for m, (mean, var) in self.running.items():
            c = m.running_mean.numel()
            m.running_mean.copy_(mean[:c])
            m.running_var.copy_(var[:c])

    def _conv(self, conv, r, h):
        weight = r[conv.weight]
        return F.conv2d(h, weight.view(-1, *weight.shape[2:]), None, conv.stride, conv.padding, conv.dilation,
                        self.w)

    def _bn(self, bn, r, h):
        mean, var = self.running[bn]
        return F.batch_norm(h, mean, var, r[bn.weight].view(-1), r[bn.bias].view(-1), True, bn.momentum, bn.eps)

    def _block(self, blk, r, h):
        out = F.relu(self._bn(blk.bn1, r, self._conv(blk.conv1, r, h)))
        out = self._bn(blk.bn2, r, self._conv(blk.conv2, r, out))
        identity = h if blk.downsample is None else self._bn(blk.downsample[1], r,
                                                             self._conv(blk.downsample[0], r, h))
        return F.relu(out + identity)

    def _forward(self, r, h):
        net = self.net
        h = F.relu(self._bn(net.bn1, r, self._conv(net.conv1, r, h)))
        for blk in net.blocks():
            h = self._block(blk, r, h)
        feats = torch.flatten(F.adaptive_avg_pool2d(h, 1), 1)
        feats = feats.view(len(feats), self.w, -1).transpose(0, 1)  # (W, b, C)
        weight, bias = r[net.fc.weight], r[net.fc.bias]
        if self.w == 1:
            return F.linear(feats[0], weight[0], bias[0]).unsqueeze(0)
        return torch.baddbmm(bias.unsqueeze(1), feats, weight.transpose(1, 2))


class _Inject(torch.autograd.Function):
    """A loss whose backward gives the parameters the gradients it was handed (times the
    incoming gradient, which loss.backward() makes 1: exact)."""

    @staticmethod
    def forward(ctx, loss, grads, *params):
        ctx.grads = grads
        return loss.clone()

    @staticmethod
    def backward(ctx, seed):
        try:  # one launch for all tensors where torch has it (2.1 on)
            grads = torch._foreach_mul(list(ctx.grads), seed)
        except (TypeError, RuntimeError):
            grads = [g * seed for g in ctx.grads]
        return (None, None) + tuple(grads)


class ShardReplay(nn.Module):
    """What EmulatedWorkers runs in batched mode in place of the model: its parameters are
    the model's, and its call on shard w returns worker w's loss, whose backward gives worker
    w's gradient, both computed beforehand by ReplicatedResNet (load). It checks that the
    shards come in order, as views of the batch (EmulatedWorkers' tensor_split)."""

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.batch, self.losses, self.grads, self.next = None, None, None, 0

    def load(self, batch, losses, grads):
        self.batch, self.losses, self.grads, self.next = batch, losses, grads, 0

    def forward(self, x):
        w, n = self.next, len(self.batch) // len(self.grads)
        self.next += 1
        if w >= len(self.grads) or len(x) != n or x.data_ptr() != self.batch[w * n:(w + 1) * n].data_ptr():
            raise RuntimeError("EmulatedWorkers did not hand the model its shards in order as views of the batch "
                               "(torch.tensor_split), which BatchedWorkers needs; SequentialWorkers does without")
        return _Inject.apply(self.losses[w], self.grads[w], *self.net.parameters())

    @staticmethod
    def loss(out, _targets):
        return out


class Worker0RunningStats:
    """Sequential mode: of the W shard forwards of one step, keeps only the first's update of
    the BatchNorm running statistics (worker 0's, as torch DDP keeps them by default)."""

    def __init__(self, net):
        self.buffers = [t for m in batch_norms(net) for t in (m.running_mean, m.running_var, m.num_batches_tracked)]
        self.calls, self.saved = None, None
        net.register_forward_hook(self._hook)

    def _hook(self, _module, _inputs, _output):
        if self.calls == 0:
            self.saved = [t.clone() for t in self.buffers]
        if self.calls is not None:
            self.calls += 1

    def step(self, fn):
        self.calls, self.saved = 0, None
        try:
            return fn()
        finally:
            self.calls = None
            for t, s in zip(self.buffers, self.saved or []):
                t.copy_(s)


# --- one training step of the W workers, either way ----------------------------------------

class BatchedWorkers:
    """W workers whose gradients come from one pass (ReplicatedResNet) and are exchanged by a
    cpd.torch.EmulatedWorkers(ShardReplay(net), workers, format, scaler=scaler, **options)."""

    def __init__(self, net, workers, format="fp32", scaler="aps", channels_last=False, **options):
        import cpd.torch as ct
        self.rep = ReplicatedResNet(net, workers, channels_last)
        self.replay = ShardReplay(net)
        self.workers = ct.EmulatedWorkers(self.replay, workers, format, scaler=scaler, **options)

    def step(self, x, y):
        """Sets every parameter's .grad to the exchanged mean of the workers' gradients of the
        batch (x, y); returns the mean of their losses."""
        losses, grads = self.rep.worker_gradients(x, y)
        self.replay.load(x, losses, grads)
        return self.workers.backward(ShardReplay.loss, x, y)

    def before_eval(self):
        self.rep.sync_running_stats()


class SequentialWorkers:
    """W workers as cpd.torch.EmulatedWorkers(net, ...) computes them: the model on each shard
    in turn; the running statistics stay worker 0's."""

    def __init__(self, net, workers, format="fp32", scaler="aps", **options):
        import cpd.torch as ct
        self.workers = ct.EmulatedWorkers(net, workers, format, scaler=scaler, **options)
        self.keep = Worker0RunningStats(net)
        self.loss_fn = nn.CrossEntropyLoss()

    def step(self, x, y):
        return self.keep.step(lambda: self.workers.backward(self.loss_fn, x, y))

    def before_eval(self):
        pass


TRAINERS = {"batched": BatchedWorkers, "sequential": SequentialWorkers}
