"""Data movement that copies (csrc/passes/lower_data.cpp): contiguous/clone, flip, repeat,
roll, constant pad and cat/stack are kernels whose values and
output strides equal eager's, and fuse with their neighbours where the IR allows."""

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C


def summary(fn, *args):
    graph = torchlite.explain(fn)(*args).graphs[0]
    return _C.partition_summary(graph)


def check(fn, *args, kernels=None):
    torchlite.reset()
    torchlite.reset_counters()
    expected = fn(*args)
    out = torchlite.compile(fn)(*args)
    assert torch.equal(out, expected)
    assert out.stride() == expected.stride() or out.numel() <= 1
    if kernels is not None:
        assert torchlite.counters()["kernels"] == kernels
    assert torchlite.counters()["graph_breaks"] == 0


X = torch.randn(6, 8)
IDX = torch.tensor([3, 0, 5, 1])

CASES = {
    "contiguous_of_transpose": (lambda x: x.t().contiguous(), (X,)),
    "clone_keeps_transposed_strides": (lambda x: x.t().clone(), (X,)),
    "clone_channels_last": (
        lambda x: x.clone(memory_format=torch.channels_last),
        (torch.randn(2, 3, 4, 5),),
    ),
    "flip": (lambda x: x.flip(0, -1), (X,)),
    "repeat": (lambda x: x.repeat(2, 1, 3), (X,)),
    "roll_dims": (lambda x: torch.roll(x, (1, -3), (0, 1)), (X,)),
    "roll_flat": (lambda x: x.roll(5), (X,)),
    "pad_constant": (lambda x: F.pad(x, (1, 2, 0, 3), value=1.5), (X,)),
    "pad_negative": (lambda x: F.pad(x, (-1, 2)), (X,)),
    "cat_rows": (lambda x: torch.cat([x, x[:2] * 3]), (X,)),
    "cat_ints_promote": (lambda a: torch.cat([a, a.int()], 0), (IDX,)),
    "cat_skips_empty": (lambda x: torch.cat([x, torch.zeros(0)], 0), (X,)),
    "stack": (lambda x: torch.stack([x + 1, x * 2], 1), (X,)),
    "bool_cat": (lambda x: torch.cat([x > 0, x < 0], 1), (X,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_data_movement_matches_eager(name):
    fn, args = CASES[name]
    check(fn, *args)
    assert summary(fn, *args)["kernel_count"] >= 1


def test_zero_size_input_runs_in_torch():
    check(lambda x: torch.cat([x, x]).flip(0), torch.randn(0, 3))


def test_slice_plus_pointwise_is_one_kernel():
    s = summary(lambda x: x[:, 1:].exp() + 1, X)
    assert s["kernel_count"] == 1 and s["externs"] == []


def test_stack_of_two_pointwise_results_is_one_kernel():
    s = summary(lambda x, y: torch.stack([x.sin(), y * 2]) + 1, X, X)
    assert s["kernel_count"] == 1 and s["externs"] == []


def test_cat_of_two_pointwise_results_is_one_kernel():
    # cat's parts are loaded at shifted (clamped) coordinates, so their producers compute in
    # the cat's kernel (reading their inputs through gathers), and so does the cat's consumer.
    s = summary(lambda x, y: torch.cat([x.sin(), y * 2], 1) + 1, X, X)
    assert s["kernel_count"] == 1 and s["externs"] == []


def test_contiguous_of_contiguous_input_is_an_alias():
    x = torch.randn(4, 4)
    torchlite.reset()
    out = torchlite.compile(lambda x: x.contiguous())(x)
    assert out.data_ptr() == x.data_ptr()


def test_embedding_with_max_norm_stays_in_torch():
    w = torch.randn(5, 3)
    i = torch.tensor([0, 4, 4])
    check(lambda i, w: F.embedding(i, w, max_norm=1.0), i, w.clone())


INDEXING = {
    "index_select": lambda x, i: x.index_select(1, i) * 2,
    "gather": lambda x, i: torch.gather(x, 1, i.expand(6, 4)) * 2,
    "embedding": lambda x, i: F.embedding(i.view(2, 2), x) * 2,
}


@pytest.mark.parametrize("name", sorted(INDEXING))
def test_indexing_ops_stay_in_torch_and_raise_like_eager(name):
    # On the CPU a kernel cannot raise IndexError for an out-of-range index: these stay extern.
    fn = INDEXING[name]
    check(fn, X, IDX)
    assert any(name in e for e in summary(fn, X, IDX)["externs"])
    bad = torch.tensor([3, 0, 50, 1])
    with pytest.raises((IndexError, RuntimeError)) as eager_err:
        fn(X, bad)
    torchlite.reset()
    with pytest.raises(type(eager_err.value)):
        torchlite.compile(fn)(X, bad)


# The max_pool2d tests count kernels run: CPU kernels need a build with LLVM.
needs_cpu_kernels = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def _nan_at_corner(x):
    x = x.clone()
    x.view(-1)[0] = float("nan")
    return x


@needs_cpu_kernels
@pytest.mark.parametrize(
    "shape,dtype,channels_last",
    [
        ((2, 8, 16, 16), torch.float32, False),
        ((2, 8, 15, 17), torch.float32, True),
        ((3, 9, 9), torch.float64, False),
        ((1, 4, 9, 9), torch.bfloat16, True),
    ],
)
def test_max_pool2d_is_a_kernel_after_its_producer(shape, dtype, channels_last):
    """The window maximum reads its producer (relu) from memory: two kernels; padding counts as
    -inf and a NaN in a window wins, as in torch."""
    x = _nan_at_corner(torch.randn(shape, dtype=dtype))
    if channels_last:
        x = x.to(memory_format=torch.channels_last)

    def fn(x):
        return F.max_pool2d(torch.relu(x * 2), 3, 2, 1)

    torchlite.reset()
    torchlite.reset_counters()
    out, expected = torchlite.compile(fn)(x), fn(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0, equal_nan=True)
    assert out.stride() == expected.stride()
    assert torchlite.counters()["kernels"] == 2


@needs_cpu_kernels
@pytest.mark.parametrize(
    "kwargs",
    [
        {"kernel_size": 2},
        {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0), "dilation": (1, 2)},
        {"kernel_size": 3, "stride": 2, "ceil_mode": True},
    ],
)
def test_max_pool2d_window_shapes(kwargs):
    check(lambda x: F.max_pool2d(x + 1, **kwargs), torch.randn(2, 3, 11, 10), kernels=2)


@needs_cpu_kernels
def test_max_pool2d_with_indices_stays_extern():
    def fn(x):
        values, indices = F.max_pool2d(x + 1, 2, return_indices=True)
        return values * 2, indices

    check(lambda x: fn(x)[0], torch.randn(2, 3, 8, 8), kernels=2)


def _extern_ops(fn, *args):
    return summary(fn, *args)["extern_ops"]


def _assert_pool_close(out, expected):
    # NOTE: the window sum may add in another order than torch's kernel.
    tol = {torch.bfloat16: 1e-2, torch.float16: 1e-3}.get(expected.dtype)
    torch.testing.assert_close(out, expected, rtol=tol, atol=tol)
    assert out.stride() == expected.stride()


@needs_cpu_kernels
@pytest.mark.parametrize(
    "shape,dtype,channels_last",
    [
        ((2, 8, 16, 16), torch.float32, False),
        ((2, 8, 15, 17), torch.float32, True),
        ((3, 9, 9), torch.float64, False),
        ((1, 4, 9, 9), torch.bfloat16, True),
    ],
)
def test_avg_pool2d_fuses_with_its_consumer(shape, dtype, channels_last):
    """poolformer's token mixer, `x + (pool(y) - y) * s` of a normalised y: the pool is no extern
    call but part of one kernel with the subtraction and the residual, after y's kernel (two
    kernels, two launches a call)."""
    x = torch.randn(shape, dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)

    def fn(x):
        y = torch.tanh(x * 2)
        return x + (F.avg_pool2d(y, 3, 1, 1, count_include_pad=False) - y) * 0.5

    assert not [op for op in _extern_ops(fn, x) if "pool" in op]
    torchlite.reset()
    torchlite.reset_counters()
    compiled = torchlite.compile(fn)
    _assert_pool_close(compiled(x), fn(x))
    assert torchlite.counters()["kernels"] == 2
    torchlite.reset_counters()
    x2 = torch.randn_like(x)
    _assert_pool_close(compiled(x2), fn(x2))
    assert torchlite.counters()["kernel_launches"] == 2


@needs_cpu_kernels
@pytest.mark.parametrize(
    "kwargs",
    [
        {"kernel_size": 2},
        {"kernel_size": 3, "stride": 1, "padding": 1},
        {"kernel_size": 3, "stride": 1, "padding": 1, "count_include_pad": False},
        {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0)},
        {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
        {
            "kernel_size": 3,
            "stride": 2,
            "padding": 1,
            "ceil_mode": True,
            "count_include_pad": False,
        },
        {"kernel_size": 2, "stride": 2, "ceil_mode": True},
        {"kernel_size": 3, "stride": 2, "padding": 1, "divisor_override": 5},
        {"kernel_size": 5, "stride": 3, "ceil_mode": True},
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_avg_pool2d_window_shapes(kwargs, dtype):
    """Every window form torch's divisor rule distinguishes (padding counted or not, ceil_mode
    windows running past the padding, an override), on odd sizes: one kernel with the pool's
    producer read from memory, values as eager's."""
    x = torch.randn(2, 3, 11, 10, dtype=dtype)

    def fn(x):
        return F.avg_pool2d(x + 1, **kwargs) * 2

    assert "avg_pool2d" not in " ".join(_extern_ops(fn, x))
    torchlite.reset()
    torchlite.reset_counters()
    _assert_pool_close(torchlite.compile(fn)(x), fn(x))
    assert torchlite.counters()["kernels"] == 2
    assert torchlite.counters()["graph_breaks"] == 0


@needs_cpu_kernels
def test_avg_pool2d_module_and_inception_branches_are_one_kernel():
    """nn.AvgPool2d and an inception-style cat of a pooled branch with a pointwise one: the pool
    fuses into the cat's kernel."""
    pool = torch.nn.AvgPool2d(3, stride=1, padding=1)

    def fn(x):
        return torch.cat([pool(x), torch.relu(x)], 1)

    for shape in [(2, 4, 7, 7), (1, 6, 12, 5)]:
        x = torch.randn(shape)
        assert not _extern_ops(fn, x)
        torchlite.reset()
        torchlite.reset_counters()
        _assert_pool_close(torchlite.compile(fn)(x), fn(x))
        assert torchlite.counters()["kernels"] == 1


@needs_cpu_kernels
def test_avg_pool2d_large_windows_stay_extern():
    """A window over 64 elements (a 9x9 pool) keeps torch's kernel."""

    def fn(x):
        return F.avg_pool2d(x + 1, 9) * 2

    x = torch.randn(2, 3, 18, 18)
    assert "avg_pool2d" in " ".join(_extern_ops(fn, x))
    check(fn, x)


ADAPTIVE_SIZES = [1, (1, 1), 2, (3, 5), (7, None), (4, 4), (11, 10), (6, 1)]


@needs_cpu_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("size", ADAPTIVE_SIZES, ids=str)
def test_adaptive_avg_pool2d_is_a_kernel_with_its_neighbours(size, channels_last, dtype):
    """Output 1x1 is a mean over H, W (a reduction); other sizes gather torch's windows (rows
    floor(i*H/OH) to ceil((i+1)*H/OH), uneven here: 11x10 inputs). Either way no extern call:
    the mean's producer and consumer join its kernel; a window's consumer joins its kernel, its
    producer is stored once (as avg_pool2d's: a window is not recomputed per output)."""
    x = torch.randn(2, 3, 11, 10, dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)

    def fn(x):
        return F.adaptive_avg_pool2d(torch.tanh(x) + 1, size) * 2

    assert "pool" not in " ".join(_extern_ops(fn, x))
    torchlite.reset()
    torchlite.reset_counters()
    _assert_pool_close(torchlite.compile(fn)(x), fn(x))
    assert torchlite.counters()["kernels"] == (1 if size in (1, (1, 1)) else 2)
    assert torchlite.counters()["graph_breaks"] == 0


@needs_cpu_kernels
@pytest.mark.parametrize("shape", [(2, 16, 7, 7), (3, 8, 1, 1), (5, 9, 4), (1, 12, 13, 3)])
def test_adaptive_avg_pool2d_head_and_module(shape):
    """A classifier head (SiLU, global pool, flatten, linear) and nn.AdaptiveAvgPool2d, 3-D
    inputs and 1x1 inputs: values as eager's, the pool in a kernel."""
    pool = torch.nn.AdaptiveAvgPool2d(1)
    w = torch.randn(10, shape[-3])

    def head(x):
        return pool(F.silu(x)).flatten(1) @ w.t() if x.dim() == 4 else pool(F.silu(x)) * 2

    for cl in [False, True] if len(shape) == 4 else [False]:
        x = torch.randn(shape)
        if cl:
            x = x.to(memory_format=torch.channels_last)
        assert "pool" not in " ".join(_extern_ops(head, x))
        torchlite.reset()
        torch.testing.assert_close(torchlite.compile(head)(x), head(x))


@needs_cpu_kernels
def test_adaptive_avg_pool2d_large_windows_stay_extern():
    """A window over 64 elements (64x64 pooled to 4x4: 16x16 windows) keeps torch's kernel."""

    def fn(x):
        return F.adaptive_avg_pool2d(x + 1, 4) * 2

    x = torch.randn(1, 2, 64, 64)
    assert "adaptive_avg_pool2d" in " ".join(_extern_ops(fn, x))
    check(fn, x)


def _append_to_empty_cache(qkv):
    # a KV cache's first step: cat([torch.tensor([]), k]) of a split piece, viewed per head
    _, k, _ = qkv.split(8, dim=2)
    k = k.view(2, 5, 2, 4).transpose(1, 2)
    return torch.cat([torch.tensor([]), k], dim=-2)


def test_cat_onto_an_empty_tensor_is_a_copy_its_views_fuse_into():
    x = torch.randn(2, 5, 24)
    check(_append_to_empty_cache, x)
    s = summary(_append_to_empty_cache, x)
    assert "view" not in s["extern_ops"] and "transpose" not in s["extern_ops"], s["extern_ops"]
    assert s["kernel_count"] == 1
