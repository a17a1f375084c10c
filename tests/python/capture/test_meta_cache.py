"""Meta results reused while tracing (capture/meta_cache.cpp): an op seen again with arguments
of the same metadata rebuilds its result from the first call, and everything downstream
(views, in-place writes through them, grad flags, dtypes) stays as eager has it."""

import pytest
import torch
import torch.nn.functional as F
from helpers import check

import torchlite


def hits():
    return torchlite._C.meta_cache_hits()


def test_repeated_layers_reuse_meta_results():
    w = torch.randn(16, 8)
    b = torch.randn(16)

    # NOTE: ops that capture/fast_meta.cpp infers itself (linear, relu, layer_norm) never
    # reach the cache; these still run torch's meta kernels.
    def fn(x, y):
        a = torch.cumsum(torch.matmul(x, w.t()), -1).roll(1, 0)
        c = torch.cumsum(torch.matmul(y, w.t()), -1).roll(1, 0)
        return a + c + b

    before = hits()
    check(fn, torch.randn(2, 5, 8), torch.randn(2, 5, 8))
    assert hits() - before >= 3  # the second matmul, cumsum and roll


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_views_of_arguments_alias_like_eager(dtype):
    def fn(x, y):
        xt, yt = x.t(), y.t()  # the second is rebuilt as a view of y
        xt.mul_(2)
        yt.add_(1)
        xs, ys = x.split(3, dim=1), y.split(3, dim=1)
        ys[1].mul_(3)
        return xt.sum(0), yt[1], xs[0] * 2, ys[0] + ys[1]

    check(fn, torch.randn(4, 6, dtype=dtype), torch.randn(4, 6, dtype=dtype))


def test_views_of_results_the_op_made():
    w = torch.randn(6, 4)

    def fn(x, y):
        a = F.linear(x, w)  # on 3-d input a view of a 2-d matmul result
        c = F.linear(y, w)
        c.add_(1)
        return a.view(-1), c.view(-1), c.transpose(0, 1).contiguous()

    check(fn, torch.randn(2, 3, 4), torch.randn(2, 3, 4))


def test_same_op_under_another_grad_mode_still_needs_grad():
    w = torch.randn(4, 4, requires_grad=True)

    def fn(x):
        with torch.no_grad():
            a = x @ w
        b = x @ w
        return a, b

    compiled = torchlite.compile(fn)
    a, b = compiled(torch.randn(3, 4))
    assert not a.requires_grad and b.requires_grad
    b.sum().backward()
    assert w.grad is not None


def test_default_dtype_is_part_of_the_key():
    def f32(x):
        return x * 1.5

    def f64(x):
        return x * 1.5

    x = torch.arange(6)
    torchlite.reset()
    assert torchlite.compile(f32)(x).dtype == torch.float32
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = torchlite.compile(f64)(x)
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, x * 1.5)
    finally:
        torch.set_default_dtype(old)


def test_tuple_results_and_dtype_views():
    def fn(x, y):
        m1, v1 = torch.var_mean(x, dim=1)
        m2, v2 = torch.var_mean(y, dim=1)
        c1, c2 = x.chunk(2), y.chunk(2)
        return m1 + m2, v1 * v2, c1[1] - c2[0], x.view(torch.int32), y.view(torch.int32)

    check(fn, torch.randn(4, 6), torch.randn(4, 6))


def test_reset_forgets_meta_results():
    def fn(x, y):
        return torch.softmax(x, -1) + torch.softmax(y, -1)

    check(fn, torch.randn(3, 5), torch.randn(3, 5))
    before = hits()
    torchlite.reset()
    torchlite.compile(lambda x: torch.softmax(x, -1))(torch.randn(3, 5))
    assert hits() == before  # the first softmax after a reset runs its meta kernel


def test_rebuilt_trace_values_alias_like_the_first():
    w = torch.randn(6, 4)
    seen = {}

    def backend(gm, example_inputs):
        seen["nodes"] = {n.name: n.meta.get("example_value") for n in gm.graph.nodes}
        seen["ops"] = [n for n in gm.graph.nodes if n.op != "placeholder"]
        return gm.forward

    def fn(x, y):
        # NOTE: cumsum still runs torch's meta kernel (linear is inferred by fast_meta.cpp)
        return x.t(), y.t(), y[1:], torch.cumsum(x @ w.t(), 0), torch.cumsum(y @ w.t(), 0)

    torchlite.reset()
    before = hits()
    torchlite.compile(fn, backend=backend)(torch.randn(2, 3, 4)[0], torch.randn(3, 4))
    assert hits() - before >= 2
    vals = [seen["nodes"][k] for k in ("t", "t_1", "getitem", "cumsum", "cumsum_1")]
    x_val, y_val = (v for k, v in seen["nodes"].items() if k in ("x", "y"))
    xt, yt, ysl, lx, ly = vals
    for view, base in ((xt, x_val), (yt, y_val), (ysl, y_val)):
        assert view._is_view() and view._base is base
    assert ysl.storage_offset() == 4 and yt.stride() == (1, 4)
    # a fresh tensor each, never one shared with the first call
    assert lx._base is None and ly._base is None and lx is not ly
