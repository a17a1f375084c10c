"""The compiled backward runs in autograd's order: a value it needs that reads no gradient (a
forward value recomputed from saved ones, a view or cast of a saved value) is made just before
its first reader, not at the backward's start. In the joint graph's order every recomputation
came first: each layer's was made before the first gradient and held through the backward of
every later layer (GPT-2 8x512 on an H100: 36 blocks of 48 MB, three a layer, live at the
backward's peak). Memory is counted by torch's profiler (byte counts, not timings) on tensors
below the size torchlite's CPU buffer pool serves (runtime/buffer_pool.h), so every allocation
goes through torch's allocator."""

import pytest
import torch
from train_check import allocation_events, compiled_backward_used, in_compiled_backward

import torchlite


class _Stack(torch.nn.Module):
    """Layers whose backward reads a value the forward does not store: `u = cat([h, h])`,
    the input of the second product, is recomputed in backward from the product h (half its
    bytes, stored by the forward anyway) for that product's weight gradient."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.ins = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.outs = torch.nn.ModuleList(torch.nn.Linear(2 * width, width) for _ in range(depth))

    def forward(self, x):
        for a, b in zip(self.ins, self.outs, strict=True):
            h = a(x)
            x = torch.tanh(b(torch.cat([h, h], -1)))
        return x.square().mean()


def _backward_peak(compiled, x) -> int:
    """Bytes allocated during the compiled backward above what was allocated when it started,
    at their most."""
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        loss = compiled(x)
        assert compiled_backward_used(loss)
        loss.backward()
        del loss
    events = allocation_events(prof)
    inside = [n for n in events if in_compiled_backward(n)]
    first, last = inside[0].start_time_ns, inside[-1].start_time_ns
    now = peak = 0
    for n in events:
        if first <= n.start_time_ns <= last:
            now += n.extra_fields.alloc_size
            peak = max(peak, now)
    return peak


@pytest.mark.parametrize("depth", [6, 12])
def test_recomputed_values_are_made_beside_their_use(depth):
    torch.manual_seed(0)
    width, rows = 64, 512
    model = _Stack(width, depth)
    x = torch.randn(rows, width)
    model(x).backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)

    torchlite.reset()
    compiled = torchlite.compile(model)
    for _ in range(2):  # NOTE: the first call compiles; its allocations are not the step's
        compiled(x).backward()
        model.zero_grad(set_to_none=True)
    peak = _backward_peak(compiled, x)
    # NOTE: one layer's backward holds its recomputed u (rows x 2 width) and the gradients
    # flowing through it (rows x width, a few): 2 u's bytes above the start. Made at the
    # backward's start, every layer's u lived at once (4.1 u at depth 6, 7.1 u at depth 12).
    u_bytes = rows * 2 * width * 4
    assert peak < 3 * u_bytes, (peak / u_bytes, depth)
    for p, g in zip(model.parameters(), eager_grads, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
def test_recomputed_values_are_made_beside_their_use_on_cuda():
    torch.manual_seed(0)
    width, rows, depth = 64, 512, 12
    model = _Stack(width, depth).cuda()
    x = torch.randn(rows, width, device="cuda")
    model(x).backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)

    torchlite.reset()
    compiled = torchlite.compile(model)
    for _ in range(2):
        compiled(x).backward()
        model.zero_grad(set_to_none=True)
    loss = compiled(x)
    assert compiled_backward_used(loss)
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - start
    # NOTE: as on the CPU, plus the parameters' gradients, which stay (made at the backward's
    # start, every layer's u lived at once: 7 u above the start at this depth).
    u_bytes = rows * 2 * width * 4
    grad_bytes = sum(p.numel() * 4 for p in model.parameters())
    assert peak < 3 * u_bytes + grad_bytes, (peak / u_bytes, grad_bytes / u_bytes)
    for p, g in zip(model.parameters(), eager_grads, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5)
