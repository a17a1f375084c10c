"""store_in_place: a kernel output copied into a graph input is stored into the input's buffer,
only when the graph promises unaliased inputs and nothing else reads the old value."""

import pytest
import torch
from torch import fx

from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op, without kernels"
)


def compile_fx(fn, examples, unaliased=True):
    gm = fx.symbolic_trace(fn)
    for node, ex in zip([n for n in gm.graph.nodes if n.op == "placeholder"], examples):
        node.meta["val"] = ex
    # meta examples for every other node, from a meta run of the graph
    env = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = node.meta["val"].to("meta")
        elif node.op in ("call_function", "call_method"):
            args = fx.node.map_arg(node.args, lambda a: env[a])
            if node.op == "call_method":
                val = getattr(args[0], node.target)(*args[1:])
            else:
                val = node.target(*args)
            env[node] = val
            node.meta["val"] = val
    graph, extras = _C.graph_from_fx(gm, torch.device("cpu"))
    return _C.FxCompiled(graph, extras, None, "default", inputs_unaliased=unaliased)


def _update(x, y):
    x.copy_(x * 2 + y.sin())
    return ()


@pytest.mark.parametrize("shape", [(7,), (5, 33), (2, 3, 40)])
def test_update_of_an_input_is_stored_into_it(shape):
    x, y = torch.randn(shape), torch.randn(shape)
    expected = x * 2 + y.sin()
    compiled = compile_fx(_update, [x, y])
    assert compiled.kernel_count == 1
    assert compiled.in_place_stores == 1
    ptr = x.data_ptr()
    compiled(x, y)
    torch.testing.assert_close(x, expected)
    assert x.data_ptr() == ptr
    compiled(x, y)  # a second call updates again
    torch.testing.assert_close(x, expected * 2 + y.sin())


def test_without_the_unaliased_promise_the_copy_stays():
    x, y = torch.randn(6, 8), torch.randn(6, 8)
    expected = x * 2 + y.sin()
    compiled = compile_fx(_update, [x, y], unaliased=False)
    assert compiled.in_place_stores == 0
    compiled(x, y)
    torch.testing.assert_close(x, expected)


def test_old_value_read_by_a_reduction_keeps_the_copy():
    def fn(x, y):
        total = x.sum()
        x.copy_(x + y)
        return (total,)

    x, y = torch.randn(16, 8), torch.randn(16, 8)
    expected_sum, expected_x = x.sum(), x + y
    compiled = compile_fx(fn, [x, y])
    assert compiled.in_place_stores == 0
    (total,) = compiled(x, y)
    torch.testing.assert_close(total, expected_sum)
    torch.testing.assert_close(x, expected_x)


def test_input_read_at_other_points_keeps_the_copy():
    def fn(x, y):
        x.copy_(x.flip(0) + y)
        return ()

    x, y = torch.randn(9, 4), torch.randn(9, 4)
    expected = x.flip(0) + y
    compiled = compile_fx(fn, [x, y])
    assert compiled.in_place_stores == 0
    compiled(x, y)
    torch.testing.assert_close(x, expected)


def test_value_also_returned_keeps_the_copy():
    def fn(x, y):
        z = x + y
        x.copy_(z)
        return (z,)

    x, y = torch.randn(4, 5), torch.randn(4, 5)
    expected = x + y
    compiled = compile_fx(fn, [x, y])
    assert compiled.in_place_stores == 0
    (z,) = compiled(x, y)
    torch.testing.assert_close(x, expected)
    torch.testing.assert_close(z, expected)
    x.add_(1)  # z is its own tensor, not x
    torch.testing.assert_close(z, expected)


def test_several_inputs_updated_by_one_kernel():
    def fn(p, m, g):
        m2 = m * 0.9 + g
        p.copy_(p - 0.1 * m2)
        m.copy_(m2)
        return ()

    p, m, g = torch.randn(3, 17), torch.randn(3, 17), torch.randn(3, 17)
    m2 = m * 0.9 + g
    expected_p, expected_m = p - 0.1 * m2, m2
    compiled = compile_fx(fn, [p, m, g])
    assert compiled.kernel_count == 1
    assert compiled.in_place_stores == 2
    compiled(p, m, g)
    torch.testing.assert_close(p, expected_p)
    torch.testing.assert_close(m, expected_m)


def _running_mean(m, x):
    m.copy_(m * 0.9 + x.mean((0, 2)) * 0.1)
    return ()


@pytest.mark.parametrize("shape", [(4, 6, 5), (3, 16, 33)])
def test_per_row_value_of_a_reduction_is_stored_into_the_input(shape):
    # NOTE: batch norm's running mean: read once per channel, after the channel's reduction,
    # by the one lane that stores it (passes/store_in_place.cpp, reads_per_row).
    m, x = torch.randn(shape[1]), torch.randn(shape)
    expected = m * 0.9 + x.mean((0, 2)) * 0.1
    compiled = compile_fx(_running_mean, [m, x])
    assert compiled.kernel_count == 1
    assert compiled.in_place_stores == 1
    ptr = m.data_ptr()
    compiled(m, x)
    torch.testing.assert_close(m, expected)
    assert m.data_ptr() == ptr
    compiled(m, x)
    torch.testing.assert_close(m, expected * 0.9 + x.mean((0, 2)) * 0.1)


def test_input_read_inside_the_reduction_keeps_the_copy():
    def fn(m, x):
        m.copy_(m + (x - m).square().sum(0))
        return ()

    m, x = torch.randn(7), torch.randn(12, 7)
    expected = m + (x - m).square().sum(0)
    compiled = compile_fx(fn, [m, x])
    assert compiled.in_place_stores == 0
    compiled(m, x)
    torch.testing.assert_close(m, expected)
