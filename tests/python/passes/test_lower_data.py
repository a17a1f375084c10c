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
