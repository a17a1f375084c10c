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


# torch's modules pass `inplace` positionally (nn.Hardswish: `F.hardswish(input, self.inplace)`).
POSITIONAL_INPLACE_ACTIVATIONS = {
    "hardswish": lambda: torch.nn.Hardswish(inplace=True),
    "hardsigmoid": lambda: torch.nn.Hardsigmoid(inplace=True),
    "leaky_relu": lambda: torch.nn.LeakyReLU(0.1, inplace=True),
    "elu": lambda: torch.nn.ELU(0.5, inplace=True),
    "celu": lambda: torch.nn.CELU(0.7, inplace=True),
    "selu": lambda: torch.nn.SELU(inplace=True),
    "hardtanh": lambda: torch.nn.Hardtanh(-0.5, 0.7, inplace=True),
    "relu6": lambda: torch.nn.ReLU6(inplace=True),
}


@needs_cpu_kernels
@pytest.mark.parametrize("name", sorted(POSITIONAL_INPLACE_ACTIVATIONS))
@pytest.mark.parametrize(
    "shape,dtype",
    [((4, 8), torch.float32), ((2, 3, 5, 5), torch.bfloat16), ((3, 7), torch.float64)],
)
def test_module_activation_with_positional_inplace_fuses(name, shape, dtype):
    """An in-place activation module on an intermediate is an out-of-place op fused with its
    producer and consumers (one kernel), and reads after it see the activated value; before,
    the positional flag kept it an in-place torch call between two kernels."""
    act = POSITIONAL_INPLACE_ACTIVATIONS[name]()

    def fn(x, w):
        y = x * w
        act(y)  # the result is y itself
        return y + x

    x = torch.randn(shape, dtype=dtype) * 3
    w = torch.randn(shape[-1], dtype=dtype)
    assert run(fn, x, w) == 1
    graph = torchlite.explain(fn)(x, w).graphs[0]
    assert not torchlite._C.partition_summary(graph)["externs"]


@needs_cpu_kernels
def test_mobilenet_conv_bn_hardswish_block_is_one_kernel_after_each_conv(monkeypatch):
    """mobilenetv3's conv -> bn -> Hardswish(inplace) -> depthwise conv -> bn -> Hardswish ->
    residual: one kernel after each convolution, and only the convolutions are torch calls."""
    monkeypatch.setattr(torchlite.config, "channels_last", False)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pw = torch.nn.Conv2d(8, 16, 1, bias=False)
            self.bn1 = torch.nn.BatchNorm2d(16)
            self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
            self.bn2 = torch.nn.BatchNorm2d(16)
            self.act = torch.nn.Hardswish(inplace=True)
            self.proj = torch.nn.Conv2d(16, 8, 1)

        def forward(self, x):
            y = self.act(self.bn1(self.pw(x)))
            y = self.act(self.bn2(self.dw(y)))
            return self.proj(y) + x

    m = Block().eval()
    for bn in (m.bn1, m.bn2):
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2)
    for shape in [(2, 8, 6, 6), (1, 8, 9, 5)]:
        x = torch.randn(shape)
        assert run(m, x) == 3
        with torch.no_grad():
            graph = torchlite.explain(m)(x).graphs[0]
        ops = torchlite._C.partition_summary(graph)["extern_ops"]
        assert all("conv2d" in op for op in ops), ops


@pytest.mark.parametrize("name", ["hardswish", "leaky_relu", "relu6"])
def test_module_activation_with_positional_inplace_on_an_input_writes_it(name):
    """The positional flag is an effect on the caller's tensor: the input is activated in place
    and later reads see it, as in eager (before, the write was lost for the later read)."""
    act = POSITIONAL_INPLACE_ACTIVATIONS[name]()

    def fn(x):
        act(x)
        return x * 2

    for shape in [(4, 8), (2, 3, 5, 5)]:
        run(fn, torch.randn(shape) * 3)


@pytest.mark.parametrize("name", ["hardswish", "leaky_relu", "hardtanh"])
def test_module_activation_with_positional_inplace_on_a_view_stays_in_place(name):
    """On a view of an intermediate the write stays a torch call in place (no rewrite), and the
    later read of the whole intermediate sees it: the positional flag makes the call a barrier."""
    act = POSITIONAL_INPLACE_ACTIVATIONS[name]()

    def fn(x, w):
        y = x * w
        act(y[:, :3])
        return y + 1

    run(fn, torch.randn(4, 8) * 3, torch.randn(8))
