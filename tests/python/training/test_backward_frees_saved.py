"""The compiled backward frees each saved value after its last reader, as eager's autograd frees
a node's saved tensors once that node ran: held to the end of the one compiled backward, every
saved activation lived beside every gradient it made (GPT-2 8x512 on an H100: peak 7103 MB
against torch.compile's 4750). Memory is counted by torch's profiler, which sees every CPU
allocation torch makes (byte counts, not timings); the tensors stay below the size torchlite's
CPU buffer pool serves (runtime/buffer_pool.h), so all of them go through torch's allocator."""

import pytest
import torch
from train_check import allocation_events, compiled_backward_used, in_compiled_backward

import torchlite


class _Deep(torch.nn.Module):
    """A wide first layer under a stack of narrow tanh layers, each of which saves its
    activations for backward; backward runs the narrow layers' part first."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, 8 * width)
        self.down = torch.nn.Linear(8 * width, width)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        h = self.down(torch.nn.functional.gelu(self.up(x)))
        for layer in self.layers:
            h = torch.tanh(layer(h)) * h.sigmoid()
        return h.square().mean()


@pytest.mark.parametrize("depth", [4, 12])
def test_saved_values_are_freed_before_the_backward_ends(depth):
    torch.manual_seed(0)
    model = _Deep(32, depth)
    x = torch.randn(512, 32)
    model(x).backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    torchlite.reset()
    compiled = torchlite.compile(model)
    for _ in range(2):  # NOTE: the first call compiles; its allocations are not the step's
        compiled(x).backward()
        model.zero_grad(set_to_none=True)
    # NOTE: the profiler reports the frees of blocks allocated while it runs: the forward, which
    # allocates the saved values, runs under it too.
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        loss = compiled(x)
        assert compiled_backward_used(loss)
        saved = {t.untyped_storage().data_ptr() for t in loss.grad_fn.saved_tensors} - params
        loss.backward()
        del loss
    events = allocation_events(prof)
    backward = [
        n.start_time_ns for n in events if n.extra_fields.alloc_size > 0 and in_compiled_backward(n)
    ]
    first, last = min(backward), max(backward)
    freed_early = {
        n.extra_fields.ptr
        for n in events
        if n.extra_fields.alloc_size < 0 and first <= n.start_time_ns < last
    }
    # NOTE: each narrow layer's saved values are read by its part of the backward only, and
    # the wide layer's gradients come last: held to the end of the compiled backward, none of
    # them was freed before its last allocation (all of them lived beside every gradient).
    assert len(saved) > depth
    assert len(saved & freed_early) >= len(saved) // 2, (len(saved & freed_early), len(saved))
    for p, g in zip(model.parameters(), eager_grads, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-6)


def test_retained_graph_keeps_the_saved_values_for_a_second_backward():
    torch.manual_seed(0)
    model = _Deep(16, 3)
    x = torch.randn(64, 16)
    torchlite.reset()
    loss = torchlite.compile(model)(x)
    assert compiled_backward_used(loss)
    loss.backward(retain_graph=True)
    first = [p.grad.clone() for p in model.parameters()]
    loss.backward()
    for p, g in zip(model.parameters(), first, strict=True):
        torch.testing.assert_close(p.grad, 2 * g)
    with pytest.raises(RuntimeError, match="second time|freed"):
        loss.backward()
