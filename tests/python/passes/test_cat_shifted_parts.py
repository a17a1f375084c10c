"""cat loads each part at a shifted, clamped coordinate (csrc/passes/lower_data.cpp `cat`,
AxisMap::shift in csrc/passes/fuse.h): a part's producer computes in the cat's kernel instead
of being stored for a gather. Values equal eager's (forward and gradients), and the kernel
counts show what fused."""

import pytest
import torch
from helpers import close_for_dtype as close
from helpers import one_graph_kernels as run
from llama_block import rotate_half_backward, swiglu_backward

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(q, cos, sin):
    return q * cos + rotate_half(q) * sin


@pytest.mark.parametrize("shape", [(2, 3, 5, 8), (3, 7, 6), (1, 2, 3, 10)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_rotate_half_is_one_kernel(shape, dtype):
    q = torch.randn(shape, dtype=dtype)
    cos, sin = torch.randn(shape[-2:], dtype=dtype), torch.randn(shape[-2:], dtype=dtype)
    out, kernels = run(rope, q, cos, sin)
    close(out, rope(q, cos, sin))
    assert kernels == 1  # the `-x2` part computes in the cat's kernel


def three_parts(x, y):
    return torch.cat([x.sin(), y[:, :3] * 2, x[:, 1:5].exp() + 1], 1) - 1


def rows(x, y):
    return torch.cat([x[:2].cos(), -y, x * y], 0)


def leading(x, y):
    return torch.cat([x.unsqueeze(0) * 3, (x - y).unsqueeze(0).abs()], 0)


def nested(x, y):
    return torch.cat([torch.cat([x.sin(), -y[:, 1:]], 1), x.cos()], 1)


@pytest.mark.parametrize("fn", [three_parts, rows, leading, nested])
@pytest.mark.parametrize("shape", [(5, 7), (3, 9)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cat_of_computed_parts_is_one_kernel(fn, shape, dtype):
    x, y = torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)
    out, kernels = run(fn, x, y)
    close(out, fn(x, y))
    assert kernels == 1


def test_a_node_that_is_two_parts_is_stored_once():
    # the second place reads it from memory, so its producer cannot compute in the cat's kernel
    def fn(x):
        a = x.sin()
        return torch.cat([a, a, x], 1)

    x = torch.randn(4, 5)
    out, kernels = run(fn, x)
    close(out, fn(x))
    assert kernels == 2


def test_a_reduced_part_is_its_own_kernel():
    def fn(x):
        return torch.cat([x.sum(1, keepdim=True), x * 2], 1) + 1

    x = torch.randn(6, 5)
    out, kernels = run(fn, x)
    close(out, fn(x))
    assert kernels == 2


def test_a_part_read_elsewhere_is_stored_unshifted():
    def fn(x, y):
        a = x.exp()
        return torch.cat([y, a], 1), a * 2

    x, y = torch.randn(4, 3), torch.randn(4, 5)
    (c, d), kernels = run(fn, x, y)
    ec, ed = fn(x, y)
    close(c, ec)
    close(d, ed)
    assert kernels <= 2


@pytest.mark.parametrize("dim", [0, 1])
def test_cat_summed_over_its_axis(dim):
    def fn(x, y):
        return torch.cat([x.sin(), y * 2], dim).sum(dim)

    x, y = torch.randn(5, 6), torch.randn(5, 6)
    out, _ = run(fn, x, y)
    close(out, fn(x, y))


@pytest.mark.parametrize("shape", [(2, 3, 5, 8), (2, 7, 6)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_training_gradients_match_and_fuse(shape, dtype):
    q = torch.randn(shape, dtype=dtype)
    cos, sin = torch.randn(shape[-2:], dtype=dtype), torch.randn(shape[-2:], dtype=dtype)

    def loss_and_grad(fn):
        x = q.clone().requires_grad_()
        out = fn(x, cos, sin)
        (g,) = torch.autograd.grad(out.float().square().sum(), x)
        return out, g

    torchlite.reset()
    torchlite.reset_counters()
    out, g = loss_and_grad(torchlite.compile(rope))
    kernels = torchlite.counters()["kernels"]
    eout, eg = loss_and_grad(rope)
    close(out, eout)
    close(g, eg)
    # before parts fused: the forward's `neg` was a kernel of its own (5 in all)
    assert kernels == 4


# A value several parts read at their own places (csrc/passes/fuse.cpp `recomputable`): each
# part computes it at its coordinate instead of a kernel of its own storing it for gathers.


def three_shifts(x, y):
    a = x.exp() * y
    return torch.cat([a[:, 2:], a[:, :2] * 3, -a[:, 1:4]], 1)


@pytest.mark.parametrize("shape", [(2, 3, 5, 8), (3, 7, 6), (1, 2, 3, 10)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_product_both_halves_read_computes_in_the_cat(shape, dtype):
    g = torch.randn(shape, dtype=dtype)
    cos, sin = torch.randn(shape[-2:], dtype=dtype), torch.randn(shape[-2:], dtype=dtype)
    out, kernels = run(rotate_half_backward, g, cos, sin)
    close(out, rotate_half_backward(g, cos, sin))
    assert kernels == 1  # before: g * sin stored by a kernel of its own


@pytest.mark.parametrize("shape", [(2, 5, 12), (3, 14)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_cast_both_halves_read_computes_in_the_cat(shape, dtype):
    gu = torch.randn(shape, dtype=dtype)
    g = torch.randn(*shape[:-1], shape[-1] // 2, dtype=dtype)
    out, kernels = run(swiglu_backward, gu, g)
    close(out, swiglu_backward(gu, g))
    assert kernels == 1  # before: the gate's float copy was stored


@pytest.mark.parametrize("shape", [(4, 6), (3, 9)])
def test_three_parts_of_one_value_compute_in_the_cat(shape):
    x, y = torch.randn(shape), torch.randn(shape)
    out, kernels = run(three_shifts, x, y)
    close(out, three_shifts(x, y))
    assert kernels == 1


def test_a_shared_value_also_read_elsewhere_is_stored():
    # stored for its other reader, so the parts read it from memory
    def fn(x):
        a = x.exp()
        return torch.cat([a[:, 3:], -a[:, :3]], 1), a.sum(0)

    x = torch.randn(5, 6)
    (c, s), kernels = run(fn, x)
    ec, es = fn(x)
    close(c, ec)
    close(s, es)
    assert kernels == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_shared_value_before_a_reduction_matches(dtype):
    def fn(x, w):
        a = x * w
        return torch.cat([a[:, 4:], -a[:, :4]], 1).sum(1) + a.cos().sum(1)

    x, w = torch.randn(6, 10, dtype=dtype), torch.randn(10, dtype=dtype)
    out, _ = run(fn, x, w)
    close(out, fn(x, w))


# A slice of a computed value is a shifted remap (passes/lower_view.cpp `slice_view`): the
# value computes in its reader's kernel, only where the slice reads it.


def inner_slice(x):
    return (x * 2)[:, 3:7].exp()


def two_axis_slice(x):
    return (x + 1)[1:4, 2:5] * 3


def halves(x):
    # NOTE: not chunk(): its tuple is a torch call that reads the value from memory
    m = x.sin() * 2
    return m[:, :5] * m[:, 5:]


@pytest.mark.parametrize("fn", [inner_slice, two_axis_slice, halves])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_slice_of_a_computed_value_is_one_kernel(fn, dtype):
    x = torch.randn(6, 10, dtype=dtype)
    out, kernels = run(fn, x)
    close(out, fn(x))
    assert kernels == 1  # before: the value stored whole, then read through the slice


def test_a_sliced_value_also_read_whole_is_stored_whole():
    # the slice's kernel covers 4 of its 10 columns: storing from there would leave 6 unwritten
    def fn(x, w):
        m = x * w
        return (-m[:, :4]).exp(), m.sum(1)

    x, w = torch.randn(5, 10), torch.randn(10)
    (a, s), _ = run(fn, x, w)
    ea, es = fn(x, w)
    close(a, ea)
    close(s, es)


def test_a_slice_of_a_reduction_is_read_from_memory():
    def fn(x):
        return x.sum(1, keepdim=True).expand(6, 4)[:, 1:3] * x[:, 1:3]

    x = torch.randn(6, 4)
    out, _ = run(fn, x)
    close(out, fn(x))
