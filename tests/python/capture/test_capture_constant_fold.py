"""Tensors computed from Python constants alone (capture/constant_fold.h): where eager reads one
as a number (a size of view/new_zeros/as_strided as Longformer's `torch.div(seq_len, w,
rounding_mode="trunc")`, `.item()`, `int()`, a branch), the trace reads the same number and
keeps one graph. Each case checks values against eager, also at other sizes, and that a write
into such a tensor is never answered from a stale value."""

import pytest
import torch
from helpers import check

import torchlite


def _graphs_and_breaks(fn, *args):
    report = torchlite.explain(fn)(*args)
    return report.graph_count, report.graph_break_count


def _chunk(h, w):
    # Longformer's _chunk / _sliding_chunks_query_key_matmul, size arithmetic as written there
    n = torch.div(h.size(1), w * 2, rounding_mode="trunc")
    h = h.view(h.size(0), n, w * 2, h.size(2))
    size = list(h.size())
    size[1] = size[1] * 2 - 1
    stride = list(h.stride())
    stride[1] = stride[1] // 2
    chunks = h.as_strided(size=size, stride=stride)
    count = torch.div(h.size(1) * w * 2, w, rounding_mode="trunc") - 1
    scores = h.new_zeros((h.size(0), count + 1, w, w * 2 + 1))
    return chunks * 2, scores + 1


@pytest.mark.parametrize("seq", [16, 32])
def test_torch_div_of_sizes_used_as_a_size_is_one_graph(seq):
    x = torch.randn(2, seq, 4)
    assert _graphs_and_breaks(_chunk, x, 4) == (1, 0)
    check(_chunk, x, 4)


def test_folded_size_follows_the_input_size_on_later_calls():
    compiled = torchlite.compile(_chunk)
    for seq in (16, 32, 48, 16, 64):
        x = torch.randn(2, seq, 4)
        for got, want in zip(compiled(x, 4), _chunk(x, 4)):
            torch.testing.assert_close(got, want)


def test_slice_bounds_from_zero_dim_tensors_of_constants():
    def fn(x):
        return x[5 - torch.tensor(3) : 5 + torch.tensor(3), :] * 2

    x = torch.randn(10, 4)
    torch.testing.assert_close(torchlite.compile(fn)(x), fn(x))
    assert _graphs_and_breaks(fn, x) == (1, 0)


def test_item_int_and_branch_on_a_tensor_of_constants():
    def fn(x):
        k = torch.tensor([1, 2, 3]).sum()
        y = x * k.item() + int(k)
        if k > 5:
            y = y - 1
        return y

    x = torch.randn(3)
    assert _graphs_and_breaks(fn, x) == (1, 0)
    check(fn, x)


def test_write_into_a_folded_tensor_is_not_read_back_stale():
    def fn(x):
        t = torch.arange(4)
        v = t[1:]
        v.add_(x.sum().long().clamp(0, 3))  # NOTE: traced data: t's values are unknown now
        return x[: int(t[1])] * 2, t

    for x in (torch.ones(4), torch.zeros(4), torch.full((4,), 0.5)):
        got, want = torchlite.compile(fn)(x), fn(x)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)


def test_write_of_a_constant_into_a_folded_view_is_seen():
    def fn(x):
        t = torch.zeros(3, dtype=torch.long)
        t[1:].fill_(2)
        return x.view(int(t[1]), -1) + 1

    x = torch.randn(6)
    torch.testing.assert_close(torchlite.compile(fn)(x), fn(x))


def test_random_draws_are_not_folded():
    def fn(x):
        n = torch.randint(1, 4, (1,))
        return x[: int(n)] + 1, n

    torch.manual_seed(0)
    want = fn(torch.arange(6.0))
    torch.manual_seed(0)
    got = torchlite.compile(fn)(torch.arange(6.0))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    "op",
    [
        lambda x: x.view(torch.tensor([2, 3])),
        lambda x: x.reshape((torch.tensor([2, 3]),)),
        lambda x: x.new_zeros(torch.tensor([2, 3])),
    ],
    ids=["view", "reshape", "new_zeros"],
)
def test_folded_tensor_of_several_numbers_as_a_size_raises_like_eager(op):
    x = torch.randn(6)
    with pytest.raises(TypeError) as eager:
        op(x)
    with pytest.raises(TypeError) as compiled:
        torchlite.compile(op)(x)
    assert type(compiled.value) is type(eager.value)
