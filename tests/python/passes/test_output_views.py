"""Views of values the compiled graph makes cost no torch calls (passes/memory_plan.cpp): a
kernel output only a chain of views reads is allocated in the last view's layout; a view chain
of a fresh value (a kernel's or a matmul's) is read by kernels at an offset into it, or made by
one as_strided for a torch op; views no one reads are not made. Values, shapes and strides
stay eager's."""

import collections

import pytest
import torch
import torch.nn.functional as F

import torchlite

needs_cpu_kernels = pytest.mark.skipif(
    not torchlite._C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

VIEW_METHODS = ("view", "reshape", "contiguous", "transpose", "flatten", "split")


class _CountViews(torch.overrides.TorchFunctionMode):
    """Counts calls of the view methods on tensors (the runtime calls them by name).

    NOTE: a torch function mode, not wrappers set on torch.Tensor: replacing a Tensor method
    changes what the compiled code must call, so the guards (rightly) recompile. Marked
    transparent: without the mark, a frame called under a mode runs eagerly.
    """

    _torchlite_transparent_mode = True

    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in VIEW_METHODS:
            self.calls[name] += 1
        return func(*args, **(kwargs or {}))


def _norm_then_project(x, w, b):
    # GPT-2's shape: layer norm (a kernel) -> view(-1, d) -> addmm -> view back
    h = F.layer_norm(x, x.shape[-1:]) * 2
    y = torch.addmm(b, h.view(-1, h.shape[-1]), w)
    return y.view(x.shape[0], x.shape[1], -1)


def _heads_merged(x, w):
    # attention output: transpose(1, 2).contiguous() (a kernel) -> reshape -> contiguous -> mm
    y = (x * 2).transpose(1, 2).contiguous()
    y = y.reshape(y.shape[0], y.shape[1], -1).contiguous()
    return y.flatten(0, 1) @ w


def _heads_of_a_projection(x, w):
    # GPT-2's attention inputs: split and per-head views of one matmul's result; q reaches
    # attention as one as_strided of it, k and v are read by kernels at offsets into it
    q, k, v = (x @ w).split(8, dim=-1)
    q, k, v = (t.view(2, 5, 2, 4).transpose(1, 2) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k * 2, v + 1)


def _view_also_returned(x, w):
    h = (x + 1).view(-1, x.shape[-1])
    return h, h @ w


# name: (fn, fresh args, view calls left: those of values no kernel makes)
CASES = {
    "norm_then_project": (
        _norm_then_project,
        lambda: (torch.randn(2, 5, 8), torch.randn(8, 6), torch.randn(6)),
        1,  # the view of addmm's result
    ),
    "heads_of_a_projection": (
        _heads_of_a_projection,
        lambda: (torch.randn(2, 5, 6), torch.randn(6, 24)),
        0,
    ),
    "heads_merged": (_heads_merged, lambda: (torch.randn(2, 3, 5, 4), torch.randn(12, 7)), 0),
    "view_also_returned": (
        _view_also_returned,
        lambda: (torch.randn(3, 4), torch.randn(4, 2)),
        0,
    ),
}


@needs_cpu_kernels
@pytest.mark.parametrize("name", sorted(CASES))
def test_views_of_kernel_outputs_are_not_called_and_match_eager(name):
    fn, make, calls_left = CASES[name]
    args = make()
    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=True)
    compiled(*args)
    counter = _CountViews()
    for _ in range(2):
        args = make()
        with counter:
            expected, actual = fn(*args), compiled(*args)
        for e, a in zip(
            torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(actual)
        ):
            torch.testing.assert_close(a, e)
            assert a.stride() == e.stride()
    eager_calls = sum(counter.calls.values())
    counter.calls.clear()
    with counter:
        compiled(*make())
    assert eager_calls > calls_left
    assert sum(counter.calls.values()) == calls_left, counter.calls


@needs_cpu_kernels
def test_a_view_read_twice_is_still_made():
    def fn(x, w):
        h = (x + 1).view(-1, 4)
        return h @ w, h.sum()

    x, w = torch.randn(2, 2, 4), torch.randn(4, 3)
    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=True)
    out = compiled(x, w)
    torch.testing.assert_close(out, fn(x, w))


@needs_cpu_kernels
def test_a_reshape_that_copies_is_not_folded():
    def fn(x, w):
        return (x + 1).transpose(0, 1).reshape(-1) @ w  # the reshape of a transpose copies

    x, w = torch.randn(3, 4), torch.randn(12)
    torchlite.reset()
    out = torchlite.compile(fn, fullgraph=True)(x, w)
    torch.testing.assert_close(out, fn(x, w))
