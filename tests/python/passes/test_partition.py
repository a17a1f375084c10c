"""Lowering and fusion decisions on captured graphs, through _C.partition_summary."""

import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C


def summary(fn, *args):
    graph = torchlite.explain(fn)(*args).graphs[0]
    return _C.partition_summary(graph)


def test_six_op_pointwise_chain_is_one_kernel():
    def fn(x, y):
        return F.gelu((torch.sin(x) + y).relu() * 2 - 1, approximate="tanh")

    s = summary(fn, torch.randn(8, 16), torch.randn(16))
    assert s["kernel_count"] == 1
    assert s["externs"] == []
    assert len(s["members"][0]) == 6
    assert "in1 : f32 strides=[0,1]" in s["kernels"][0]  # y broadcast over rows


def test_softmax_and_log_softmax_are_one_kernel_each():
    s = summary(lambda x: torch.softmax(x, -1) + F.log_softmax(x, dim=-1), torch.randn(4, 32))
    assert s["kernel_count"] == 1
    assert s["kernels"][0].count("reduce_max") == 1  # the max is shared
    assert "kernel k0_add[4,32] reduce=1:" in s["kernels"][0]


def test_layer_norm_is_one_kernel():
    ln = torch.nn.LayerNorm(32)
    s = summary(lambda x: ln(x), torch.randn(2, 5, 32))
    assert s["kernel_count"] == 1
    assert s["externs"] == []


def test_sum_with_pointwise_epilogue_fuses():
    s = summary(lambda x: (x.sum(-1) * 2).sigmoid(), torch.randn(8, 16))
    assert s["kernel_count"] == 1
    assert "out0 : f32 strides=[1,0]" in s["kernels"][0]


def test_matmul_is_extern_and_splits_groups():
    s = summary(
        lambda x, w: torch.relu(torch.sin(x) @ w) + 1, torch.randn(8, 16), torch.randn(16, 4)
    )
    assert s["kernel_count"] == 2
    assert s["extern_ops"] == ["operator.matmul"]
    assert s["order"] == ["kernel 0", "matmul", "kernel 1"]


def test_in_place_op_is_a_barrier():
    def fn(x):
        a = x * 2
        x.add_(1)
        return a + x * 3

    s = summary(fn, torch.randn(8))
    assert s["order"] == ["kernel 0", "add_", "kernel 1"]


def test_views_fold_into_strides():
    s = summary(lambda x: x.t().unsqueeze(0) * 2 + x.permute(1, 0), torch.randn(4, 6))
    assert s["kernel_count"] == 1
    assert "in0 : f32 strides=[1,6]" in s["kernels"][0]


def test_half_is_computed_in_float():
    s = summary(lambda x: (x * 2).relu(), torch.randn(8, dtype=torch.float16))
    k = s["kernels"][0]
    assert "f16 = load(in0)" in k and "f32 = cast(%0)" in k and "out0 : f16" in k


def test_unsupported_ops_are_extern():
    s = summary(lambda x: torch.cumsum(x, 0).exp(), torch.randn(8))
    assert s["extern_ops"] == ["torch.cumsum"]
    assert s["kernel_count"] == 1


def test_values_nothing_reads_are_not_computed():
    # transformers' mask functions take batch and head indices they never use
    def fn(x):
        batch = torch.arange(1)[:, None, None, None]
        unused = (x * 2).exp()[None]
        return x + 1, batch.numel() + unused.numel()

    x = torch.randn(4, 8)
    s = summary(fn, x)
    assert s["kernel_count"] == 1 and s["externs"] == [], s
    assert s["members"] == [["add"]], s["members"]
    torchlite.reset()
    got, n = torchlite.compile(fn)(x)
    torch.testing.assert_close(got, x + 1)
    assert n == 33
