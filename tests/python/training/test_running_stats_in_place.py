"""A compiled training forward writes the inputs it mutates (batch norm's running mean and
variance, num_batches_tracked, any buffer updated in place) straight into them, as eager's
kernels do: no clone of the old value, no copy of the new one back, running statistics and
version counters as eager leaves them, and nothing recomputed in backward from such an input's
new value."""

import collections
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from train_check import compiled_backward_used

import torchlite
from torchlite import _C

# NOTE: without LLVM (the GPU machine's build) CPU graphs run op by op: every write is a copy.
needs_cpu_kernels = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)
_DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


class _ConvBn(nn.Module):
    def __init__(self, **bn):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8, **bn)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8, **bn)

    def forward(self, x):
        y = self.bn1(self.conv1(x)).relu()
        return self.bn2(self.conv2(y)).relu() + y


class _Bn1d(nn.Module):
    def __init__(self, **bn):
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.bn = nn.BatchNorm1d(8, **bn)

    def forward(self, x):
        return self.bn(self.fc(x)).tanh()


class _Bn1dSequence(nn.Module):
    def __init__(self, **bn):
        super().__init__()
        self.conv = nn.Conv1d(3, 8, 3)
        self.bn = nn.BatchNorm1d(8, **bn)

    def forward(self, x):
        return self.bn(self.conv(x)).sigmoid()


class _Bn3d(nn.Module):
    def __init__(self, **bn):
        super().__init__()
        self.conv = nn.Conv3d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm3d(4, **bn)

    def forward(self, x):
        return self.bn(self.conv(x)).relu()


_NETS = {
    "bn2d": (_ConvBn, (2, 3, 8, 8)),
    "bn1d": (_Bn1d, (5, 6)),
    "bn1d_seq": (_Bn1dSequence, (3, 3, 10)),
    "bn3d": (_Bn3d, (2, 2, 4, 5, 5)),
}

_SETTINGS = {
    "default": {},
    "cumulative": {"momentum": None},
    "no_affine": {"affine": False},
    "no_stats": {"track_running_stats": False},
}


def _buffers(m: nn.Module) -> dict:
    return {k: (b.detach().clone(), b._version) for k, b in m.named_buffers()}


def _steps(model, shape, device, *, channels_last=False, steps=3):
    gen = torch.Generator().manual_seed(1)
    outs = []
    for _ in range(steps):
        x = torch.randn(shape, generator=gen).to(device)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        out = model(x)
        out.square().mean().backward()
        outs.append(out)
    return outs


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("setting", list(_SETTINGS))
@pytest.mark.parametrize("net", list(_NETS))
def test_running_stats_and_versions_match_eager_after_three_steps(net, setting, device):
    cls, shape = _NETS[net]
    torch.manual_seed(0)
    eager = cls(**_SETTINGS[setting]).to(device).train()
    model = copy.deepcopy(eager)
    compiled = torchlite.compile(model)
    start, start_eager = _buffers(model), _buffers(eager)  # NOTE: deepcopy may bump versions
    outs = _steps(compiled, shape, device)
    ref = _steps(eager, shape, device)
    assert all(compiled_backward_used(o) for o in outs)
    for o, r in zip(outs, ref, strict=True):
        torch.testing.assert_close(o, r)
    mine, theirs = _buffers(model), _buffers(eager)
    assert mine.keys() == theirs.keys()
    for k, (value, version) in mine.items():
        torch.testing.assert_close(value, theirs[k][0], msg=lambda m, k=k: f"{k}: {m}")
        mine_bumps, eager_bumps = version - start[k][1], theirs[k][1] - start_eager[k][1]
        assert mine_bumps == eager_bumps, f"{k}: version +{mine_bumps}, eager +{eager_bumps}"
    for (k, p), r in zip(model.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, r.grad, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("device", _DEVICES)
def test_channels_last_and_eval_mode_match_eager(device):
    torch.manual_seed(0)
    eager = _ConvBn().to(device).train().to(memory_format=torch.channels_last)
    model = copy.deepcopy(eager)
    compiled = torchlite.compile(model)
    start = [b._version for b in model.buffers()], [b._version for b in eager.buffers()]
    outs = _steps(compiled, (2, 3, 8, 8), device, channels_last=True)
    ref = _steps(eager, (2, 3, 8, 8), device, channels_last=True)
    for o, r in zip(outs, ref, strict=True):
        torch.testing.assert_close(o, r)
    model.eval()
    eager.eval()
    outs = _steps(compiled, (2, 3, 8, 8), device, channels_last=True)
    ref = _steps(eager, (2, 3, 8, 8), device, channels_last=True)
    for o, r in zip(outs, ref, strict=True):
        torch.testing.assert_close(o, r)
    buffers = zip(model.named_buffers(), eager.buffers(), *start, strict=True)
    for (k, b), r, b0, r0 in buffers:
        torch.testing.assert_close(b, r, msg=lambda m, k=k: f"{k}: {m}")
        assert b._version - b0 == r._version - r0, k


def _copies(fn) -> int:
    """aten copy_/clone/copy calls (nested ones included) while fn runs, under the profiler."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    counts = collections.Counter(e.name for e in prof.events())
    return counts["aten::copy_"] + counts["aten::clone"] + counts["aten::copy"]


@needs_cpu_kernels
def test_a_training_step_makes_no_more_copies_than_eager():
    # NOTE: the compiled forward used to clone each running statistic (functional aten.copy),
    # copy the new value into the clone, then into the buffer: 7 copies a batch norm a step.
    torch.manual_seed(0)
    eager = _ConvBn().train()
    model = copy.deepcopy(eager)
    compiled = torchlite.compile(model)
    x, g = torch.randn(2, 3, 8, 8), torch.randn(2, 8, 8, 8)
    for _ in range(2):
        compiled(x).mul(g).sum().backward()
        eager(x).mul(g).sum().backward()

    # NOTE: a loss whose gradient is dense: an expanded one (`.sum()`'s) is made contiguous for
    # the compiled backward, a copy that is the backward's, not the forward's.
    def step(m):
        return lambda: m(x).mul(g).sum().backward()

    mine, theirs = _copies(step(compiled)), _copies(step(eager))
    assert compiled_backward_used(compiled(x))
    assert mine <= theirs, f"compiled step: {mine} copies, eager: {theirs}"
    forward = _copies(lambda: compiled(x))
    assert forward <= _copies(lambda: eager(x)), f"compiled forward: {forward} copies"


class _BufferThenProduct(nn.Module):
    """A buffer updated in place before the graph reads it in a value backward needs."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(4))
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x):
        self.scale.add_(1)
        return ((x * self.w).sin() * (self.scale * 2).exp()).sum()


def test_backward_recomputes_nothing_from_an_input_the_forward_mutated():
    # NOTE: the partitioner recomputed `(scale * 2).exp()` in backward from the buffer, which
    # by then held the new value: the gradient was off by the update (exp(2) here).
    torch.manual_seed(0)
    eager = _BufferThenProduct()
    model = copy.deepcopy(eager)
    compiled = torchlite.compile(model)
    start = model.scale._version, eager.scale._version  # NOTE: deepcopy may bump one
    for _ in range(2):
        x = torch.randn(4)
        loss = compiled(x)
        loss.backward()
        eager(x).backward()
        assert compiled_backward_used(loss)
    torch.testing.assert_close(model.w.grad, eager.w.grad)
    torch.testing.assert_close(model.scale, eager.scale)
    assert model.scale._version - start[0] == eager.scale._version - start[1] == 2


class _BnThenIndex(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)
        self.bn = nn.BatchNorm1d(6)

    def forward(self, x, idx):
        return self.bn(self.fc(x))[:, idx].sum()


# NOTE: cpu_kernels=False runs CPU graphs op by op, as a build without LLVM (the GPU machine's) does:
# there the forward's running statistics are written after its last op, so the frame reruns it
# eagerly (nothing lasting was written), which updates them once and raises eager's error.
@pytest.mark.parametrize("cpu_kernels", [True, False], ids=["kernels", "op_by_op"])
def test_a_forward_that_raises_updates_running_stats_once_as_eager(monkeypatch, cpu_kernels):
    # NOTE: eager updates the statistics of the batch norms before the failing op; the frame
    # reruns a compiled forward that failed before writing any input eagerly, so they are
    # updated once, not twice.
    monkeypatch.setattr(torchlite.config, "cpu_kernels", cpu_kernels and _C.has_llvm)
    torchlite.reset()
    torch.manual_seed(0)
    eager = _BnThenIndex()
    model = copy.deepcopy(eager)
    compiled = torchlite.compile(model)
    x = torch.randn(5, 4)
    good = torch.tensor([0, 5])
    compiled(x, good).backward()
    eager(x, good).backward()
    bad = torch.tensor([0, 6])
    with pytest.raises((IndexError, RuntimeError)) as mine:
        compiled(x, bad)
    with pytest.raises((IndexError, RuntimeError)) as theirs:
        eager(x, bad)
    assert mine.type is theirs.type
    for (k, b), r in zip(model.named_buffers(), eager.buffers(), strict=True):
        torch.testing.assert_close(b, r, msg=lambda m, k=k: f"{k}: {m}")


_LOG = []


class _DropoutIndexThenBn(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)
        self.bn = nn.BatchNorm1d(6)

    def forward(self, x, idx):
        _LOG.append("forward")
        h = F.dropout(self.fc(x), 0.25, training=True)
        return self.bn(h[idx]).sum()


@needs_cpu_kernels
def test_a_lookup_failing_after_a_dropout_matches_eager_with_its_generator_state():
    # NOTE: the dropout's mask (aten::bernoulli.p) is a draw the frame undoes, not a lasting
    # effect: the compiled forward failed before writing the statistics, so the frame puts the
    # generator back and reruns eagerly (eager's error, log entry, generator state and
    # statistics). Before, the overload name hid the draw: the failure propagated with the
    # generator advanced by the compiled draws.
    torch.manual_seed(0)
    eager = _DropoutIndexThenBn()
    model = copy.deepcopy(eager)
    compiled = torchlite.compile(model)
    x = torch.randn(5, 4)
    compiled(x, torch.tensor([0, 4])).backward()
    eager(x, torch.tensor([0, 4])).backward()
    seen = []
    for f, m in ((compiled, model), (eager, eager)):
        before = [b.clone() for b in m.buffers()]
        _LOG.clear()
        torch.manual_seed(1)
        with pytest.raises(IndexError):
            f(x, torch.tensor([0, 7]))
        seen.append((list(_LOG), torch.get_rng_state()))
        # NOTE: the lookup fails before the batch norm: its statistics stay (the masks, and so
        # the statistics of the first step, differ from eager's by design)
        for b, was in zip(m.buffers(), before, strict=True):
            torch.testing.assert_close(b, was)
    assert seen[0][0] == seen[1][0] == ["forward"]
    assert torch.equal(seen[0][1], seen[1][1])
