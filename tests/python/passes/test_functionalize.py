"""In-place ops on values the graph made (csrc/passes/functionalize.cpp) become out-of-place
ops that fuse: a ResNet block's `bn -> relu_ -> += -> relu_` is one kernel. Mutations that
the caller or a view can see (inputs, views of intermediates) stay in place. Every case is
compared with eager, inputs after the call included."""

import pytest
import torch
import torch.nn.functional as F

import torchlite

# The passes run where kernels are built: CPU graphs need the LLVM code generator.
needs_cpu_kernels = pytest.mark.skipif(
    not torchlite._C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def run(fn, *args):
    """Compiled vs eager on separate clones: outputs, strides and inputs after the call."""
    torchlite.reset()
    torchlite.reset_counters()
    eager_args = [a.clone() for a in args]
    comp_args = [a.clone() for a in args]
    expected = fn(*eager_args)
    with torch.no_grad():
        actual = torchlite.compile(fn)(*comp_args)
    torch.testing.assert_close(actual, expected)
    for a, e in zip(comp_args, eager_args, strict=True):
        torch.testing.assert_close(a, e)
    outs = actual if isinstance(actual, tuple) else (actual,)
    exps = expected if isinstance(expected, tuple) else (expected,)
    for o, e in zip(outs, exps, strict=True):
        assert o.stride() == e.stride() and o.dtype == e.dtype
    assert torchlite.counters()["graph_breaks"] == 0
    return torchlite.counters()["kernels"]


def block(x, w):
    y = x * w  # an intermediate: its in-place updates are invisible outside
    y = F.relu(y, inplace=True)
    y += x
    y.relu_()
    return y


@needs_cpu_kernels
@pytest.mark.parametrize("shape", [(4, 8), (2, 3, 5, 5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chain_of_inplace_ops_on_an_intermediate_is_one_kernel(shape, dtype):
    x = torch.randn(shape, dtype=dtype)
    w = torch.randn(shape[-1], dtype=dtype)
    assert run(block, x, w) == 1


@needs_cpu_kernels
def test_reads_before_the_mutation_see_the_old_value():
    def fn(x):
        y = x * 2
        before = y + 1
        y.mul_(3)
        after = y - 1
        return before, after, y

    assert run(fn, torch.randn(5, 3)) == 1


def test_mutating_an_input_stays_in_place():
    def fn(x):
        x.add_(1)
        return x * 2

    run(fn, torch.randn(6))


def test_mutating_through_a_view_of_an_intermediate_is_kept():
    def fn(x):
        y = x * 2
        y[0].add_(10)  # the view shares y's storage: y must see the update
        return y + 1

    run(fn, torch.randn(3, 4))


def test_dtype_of_inplace_result_is_kept():
    def fn(x, other):
        y = x * 2  # half
        y += other  # float32 operand: the in-place result stays half
        return y

    run(fn, torch.randn(8, dtype=torch.float16), torch.randn(8))


@needs_cpu_kernels
def test_resnet_basic_block_fuses_relu_and_residual(monkeypatch):
    # NOTE: in the contiguous layout, so no conversion kernel joins the count.
    monkeypatch.setattr(torchlite.config, "channels_last", False)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.act = torch.nn.ReLU(inplace=True)

        def forward(self, x):
            shortcut = x
            y = self.act(self.conv1(x))
            y = self.conv2(y)
            y += shortcut
            return self.act(y)

    m = Block().eval()
    x = torch.randn(2, 8, 6, 6)
    # relu, then (+= shortcut, relu): two kernels; in place they would all run as torch ops.
    assert run(m, x) == 2


def buckets(relative_position):
    # NOTE: T5's relative position buckets: a Python number accumulated with `+=`.
    acc = 0
    acc += (relative_position > 0).to(torch.long) * 16
    scale = 1.5
    scale *= relative_position.abs().float()
    return acc + torch.where(relative_position.abs() < 4, relative_position, 4), scale


@needs_cpu_kernels
def test_augmented_assignment_to_a_python_number_is_an_out_of_place_op_that_fuses():
    pos = torch.arange(12)[None, :] - torch.arange(12)[:, None]
    assert run(buckets, pos) <= 2  # one kernel per output
    graph = torchlite.explain(buckets)(pos).graphs[0]
    externs = torchlite._C.partition_summary(graph)["externs"]
    assert not any(e.startswith(("iadd", "imul")) for e in externs), externs
