"""Calls of one op on the same operands with equal constants are computed once
(passes/merge_duplicates.h): T5 rebuilds its float attention mask, `where(mask, position_bias,
min)`, in every layer from values all layers share; after the pass one kernel builds it for all.
Never where it could be seen: values the graph returns keep their own tensors, graphs that
write a tensor in place merge nothing, random draws are never merged, and calls that differ in
a constant stay apart. Every compiled result is checked against eager."""

import collections

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import torchlite
from torchlite import _C, config

needs_cpu_kernels = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def stored_values(fn, *args):
    """Values the generated kernels of compiled `fn` write to memory."""
    torchlite.reset()
    kernels = _C.partition_summary(torchlite.explain(fn)(*args).graphs[0])["kernels"]
    return sum(line.lstrip().startswith("out") for k in kernels for line in k.splitlines())


def merged_and_matches(fn, *args, calls=2):
    """fn compiled from fresh caches: its results match eager's on `calls` calls; returns how
    many calls the compile merged."""
    torchlite.reset()
    torchlite.reset_counters()
    compiled = torchlite.compile(fn)
    for _ in range(calls):
        torch.testing.assert_close(compiled(*args), fn(*args))
    assert torchlite.counters()["graph_breaks"] == 0
    return torchlite.counters()["duplicates_merged"]


# T5's layers (transformers sdpa_attention.create_position_bias_mask): each builds the same
# float mask from the padding mask and the position bias the first layer computed.
def t5_like(x, w, bias, pad, layers=3, heads=2):
    b, t, c = x.shape
    big = torch.finfo(x.dtype).min
    for i in range(layers):
        q, k, v = F.linear(x, w[i]).view(b, t, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
        mask = torch.where(pad[:, None, None, :], bias, big).contiguous()
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + o.transpose(1, 2).reshape(b, t, c)
    return x


def t5_inputs(b, t, c, layers=3, heads=2, dtype=torch.float32):
    x = torch.randn(b, t, c, dtype=dtype)
    w = torch.randn(layers, 3 * c, c, dtype=dtype) / c**0.5
    bias = torch.randn(1, heads, t, t, dtype=dtype)
    pad = torch.ones(b, t, dtype=torch.bool)
    pad[0, t // 2 :] = False
    return x, w, bias, pad


@needs_cpu_kernels
@pytest.mark.parametrize("b,t,c", [(2, 16, 32), (3, 7, 12)])
def test_t5_masks_are_built_once_for_all_layers(b, t, c, monkeypatch):
    args = t5_inputs(b, t, c)
    assert merged_and_matches(t5_like, *args) >= 2  # the second and third layers' masks
    merged = stored_values(t5_like, *args)
    monkeypatch.setattr(config, "merge_duplicates", False)
    assert merged_and_matches(t5_like, *args) == 0
    assert stored_values(t5_like, *args) == merged + 2  # a [B, H, T, T] mask per layer


def test_t5_masks_in_bfloat16_match_eager():
    args = t5_inputs(2, 8, 16, dtype=torch.bfloat16)
    torchlite.reset()
    compiled = torchlite.compile(t5_like)
    for _ in range(2):
        torch.testing.assert_close(compiled(*args), t5_like(*args), atol=2e-2, rtol=2e-2)


def test_returned_duplicates_stay_separate_tensors():
    def f(x):
        return x * 2, x * 2, (x * 2).t()

    x = torch.randn(4, 5)
    torchlite.reset()
    a, b, c = torchlite.compile(f)(x)
    torch.testing.assert_close(a, x * 2)
    assert a.data_ptr() != b.data_ptr() and c.data_ptr() not in (a.data_ptr(), b.data_ptr())
    a.add_(1)  # eager's outputs share nothing: neither do these
    torch.testing.assert_close(b, x * 2)
    torch.testing.assert_close(c, (x * 2).t())


def test_an_in_place_write_between_two_calls_keeps_them_apart():
    def f(x, y):
        a = y * 2
        y.add_(1)
        b = y * 2
        return x + a + b

    x, y = torch.randn(8), torch.randn(8)
    torchlite.reset()
    torchlite.reset_counters()
    got = torchlite.compile(f)(x, y.clone())
    torch.testing.assert_close(got, f(x, y.clone()))
    assert torchlite.counters()["duplicates_merged"] == 0


def test_random_draws_are_never_merged():
    def f(x):
        return x + torch.rand_like(x) + torch.rand_like(x) - torch.rand_like(x)

    x = torch.zeros(4096)
    torchlite.reset()
    out = torchlite.compile(f)(x)
    # three independent uniform draws: not 2r - r = r, whose values would all lie in [0, 1)
    assert out.min() < -0.1 or out.max() > 1.1
    assert out.std() > 0.35  # var of u1 + u2 - u3 is 3/12: std 0.5 (one draw: 0.29)


def test_training_rrelu_draws_are_never_merged():
    def f(x):
        return F.rrelu(x, training=True) - F.rrelu(x, training=True)

    x = -torch.ones(4096)  # negative: each call scales by its own uniform draw
    torchlite.reset()
    out = torchlite.compile(f)(x)
    assert (out != 0).float().mean() > 0.9


def test_calls_that_differ_in_a_constant_or_operand_stay_apart():
    def f(x, y):
        return (x * 2) + (x * 3) + (y * 2) + torch.clamp(x, min=0) * torch.clamp(x, max=0)

    x, y = torch.randn(16), torch.randn(16)
    assert merged_and_matches(f, x, y) == 0


def test_integer_and_float_constants_are_not_one_constant():
    def f(x):
        return torch.full_like(x, 1) + torch.full_like(x, 1.5), torch.div(x, 2) + torch.div(x, 2.0)

    x = torch.arange(8)
    # NOTE: 2 and 2.0 give the same values here, but the pass compares constants by type too
    assert merged_and_matches(f, x) == 0


@needs_cpu_kernels
def test_chains_of_duplicates_merge_whole():
    def f(x, m):
        outs = []
        for i in range(4):
            mask = (m[:, None, :] & m[:, :, None]).float().mul(-1e4).unsqueeze(1)
            outs.append(torch.softmax(x[i] + mask, -1))
        return torch.stack(outs).sum(0)

    x, m = torch.randn(4, 2, 3, 6, 6), torch.rand(2, 6) > 0.3
    merged = merged_and_matches(f, x, m)
    assert merged >= 3 * 5  # every op of layers 2-4's masks: and, views, float, mul, unsqueeze


def test_aten_ops_of_a_t5_like_model_drop():
    def ops(fn, *args):
        with profile(activities=[ProfilerActivity.CPU]) as p:
            fn(*args)
        return collections.Counter(e.name for e in p.events() if e.name.startswith("aten::"))

    args = t5_inputs(2, 8, 16)
    torchlite.reset()
    compiled = torchlite.compile(t5_like)
    compiled(*args)
    counts = ops(compiled, *args)
    # the three attentions run; no layout copy of their results (their CPU layout is predicted)
    assert counts["aten::scaled_dot_product_attention"] == 3
    assert counts["aten::copy_"] == 0, counts
