"""Views (csrc/passes/lower_view.cpp): slicing, select, split pieces and reshapes fold into
the consuming kernel's loads; alone, or when the user can observe the alias, they stay torch
views."""

import torch

import torchlite
from torchlite import _C


def summary(fn, *args):
    graph = torchlite.explain(fn)(*args).graphs[0]
    return _C.partition_summary(graph)


def compiled(fn, *args):
    torchlite.reset()
    torchlite.reset_counters()
    out = torchlite.compile(fn)(*args)
    if not _C.has_llvm:  # no CPU code generator in this build: count the planned kernels
        # NOTE: explain() runs fn again: give it copies, fn may mutate its inputs.
        copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        return out, summary(fn, *copies)["kernel_count"]
    return out, torchlite.counters()["kernels"]


def test_slice_then_pointwise_is_one_kernel_reading_at_an_offset():
    x = torch.randn(6, 8)
    s = summary(lambda x: x[1:5:2, 2:] * 2, x)
    assert s["kernel_count"] == 1 and s["externs"] == []
    assert "in0 : f32 strides=[16,1] offset=10" in s["kernels"][0]


def test_select_with_negative_index_and_none_ellipsis_fold():
    x = torch.randn(4, 5, 6)
    fn = lambda x: x[-1, None, ..., 2].sin() + x.select(2, -2)[0]
    s = summary(fn, x)
    assert s["kernel_count"] == 1  # a view of a view: the inner one stays a torch view
    out, kernels = compiled(fn, x)
    assert kernels == 1
    torch.testing.assert_close(out, fn(x))


def test_split_chunk_unbind_pieces_fold_into_their_consumers():
    x = torch.randn(6, 8)

    def fn(x):
        a, b = x.split([3, 5], dim=1)
        c, d = torch.chunk(x, 2)
        e = x.unbind(0)[4]
        return a.sum(1) + b.amax(1), c * d, e + 1

    out, kernels = compiled(fn, x)
    for o, e in zip(out, fn(x)):
        torch.testing.assert_close(o, e)
        assert o.stride() == e.stride()
    assert kernels == 4  # one per consumer: pieces fold into them


def test_reshape_of_non_contiguous_view_reads_through_view_strides():
    x = torch.randn(6, 8)
    fn = lambda x: x[:, ::2].reshape(6, 2, 2) + 1  # still a view: no copy
    s = summary(fn, x)
    assert s["kernel_count"] == 1 and "in0 : f32 strides=[8,4,2]" in s["kernels"][0]
    out, _ = compiled(fn, x)
    torch.testing.assert_close(out, fn(x))


def test_reshape_that_copies_is_a_kernel_with_eager_strides():
    x = torch.randn(6, 8)
    fn = lambda x: x.t().reshape(48)
    out, kernels = compiled(fn, x)
    assert kernels == 1
    assert torch.equal(out, fn(x)) and out.stride() == (1,)


def test_view_returned_to_the_user_stays_an_alias():
    x = torch.randn(6, 8)

    def fn(x):
        v = x[1:3]
        return v, v * 2

    (v, w), _ = compiled(fn, x)
    assert v.data_ptr() == x[1:3].data_ptr()
    torch.testing.assert_close(w, x[1:3] * 2)


def test_view_mutated_later_still_writes_through_to_the_base():
    def fn(x):
        v = x[0]
        y = v * 2
        v.add_(1)
        return y + v

    x = torch.randn(3, 4)
    ref = x.clone()
    out, _ = compiled(fn, x)
    expected = fn(ref)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x, ref)


def test_eval_dropout_is_the_identity_kernels_fuse_across():
    ln = torch.nn.LayerNorm(64)
    drop = torch.nn.Dropout(0.1).eval()

    def fn(x):
        h = drop(x * 2)
        return ln(h) + h, torch.nn.functional.dropout(x, p=0.5, training=False)

    x = torch.randn(4, 64)
    s = summary(fn, x)
    assert s["kernel_count"] == 1 and len(s["members"][0]) == 4, s["members"]
    (y, same), _ = compiled(fn, x)
    torch.testing.assert_close(y, ln(x * 2) + x * 2)
    # eval dropout returns its input itself: still the same storage when returned
    assert same.data_ptr() == x.data_ptr() and torch.equal(same, x)


def test_training_dropout_stays_torchs():
    def fn(x):
        return torch.nn.functional.dropout(x * 2, p=0.5, training=True) + 1

    s = summary(fn, torch.randn(4, 64))
    assert any("dropout" in e for e in s["extern_ops"]), s["extern_ops"]
