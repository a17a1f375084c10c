"""CUDA graphs rewritten so torch's fused library kernels run: attention masks broadcast along
their last dimension get one dense copy (else scaled_dot_product_attention takes its unfused
math path), half-precision linears with unaligned output rows are computed padded (else
cuBLAS runs its align-1 kernels) and return the padded rows narrowed, as torch.compile does,
and a boolean mask shared by attention layers is made additive once. Results and dtypes stay
eager's."""

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import torchlite

pytestmark = pytest.mark.cuda


def _aten_ops(fn, *args):
    with profile(activities=[ProfilerActivity.CPU]) as p:
        fn(*args)
        torch.cuda.synchronize()
    return {e.name for e in p.events()}


def _linear_widths(fn, *args):
    """The output widths (weight rows) of the linears `fn` runs."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        fn(*args)
        torch.cuda.synchronize()
    return {e.input_shapes[1][0] for e in p.events() if e.name == "aten::linear"}


def _op_names(fn, *args):
    with profile(activities=[ProfilerActivity.CPU]) as p:
        fn(*args)
        torch.cuda.synchronize()
    return {e.name for e in p.events()}


def _attention(q, k, v, keep):
    # transformers' padding mask: [b, 1, s, 1] expanded over keys (stride 0 there)
    mask = (keep[:, None, :, None] > 0).expand(-1, -1, -1, k.shape[-2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125) * 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("seq", [64, 200])
def test_broadcast_attention_mask_runs_fused_attention(dtype, seq):
    b, h, d = 2, 4, 64
    q, k, v = (torch.randn(b, h, seq, d, device="cuda", dtype=dtype) for _ in range(3))
    keep = torch.ones(b, seq, device="cuda")
    torchlite.reset()
    compiled = torchlite.compile(_attention, fullgraph=True)
    with torch.no_grad():
        expected = _attention(q, k, v, keep)
        actual = compiled(q, k, v, keep)
        torch.testing.assert_close(actual, expected, atol=2e-2, rtol=2e-2)
        assert "aten::_scaled_dot_product_attention_math" in _aten_ops(_attention, q, k, v, keep)
        ops = _aten_ops(compiled, q, k, v, keep)
    assert "aten::_scaled_dot_product_attention_math" not in ops, sorted(ops)


def _layers_sharing_a_causal_mask(x, wq, keep):
    # GPT-2's shape of mask: a boolean [b, 1, s, s] (causal and padding) read by every layer
    s = x.shape[-2]
    causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
    mask = causal[None, None] & (keep[:, None, None, :] > 0)
    for _ in range(3):
        q = x @ wq
        x = x + F.scaled_dot_product_attention(q, x, x, attn_mask=mask)
    return x


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_boolean_mask_with_fully_masked_rows_matches_eager(dtype):
    """Rows whose keys are all masked (left padding) must come out as eager's. NOTE: handing
    attention the 0/-inf mask it builds from a boolean one (once for all layers, to save three
    kernels per layer) changed exactly these rows on an H100 (torch 2.11), so boolean masks
    reach attention unchanged."""
    b, h, s, d = 2, 4, 96, 64
    x = torch.randn(b, h, s, d, device="cuda", dtype=dtype)
    wq = torch.randn(d, d, device="cuda", dtype=dtype) / 8
    keep = torch.ones(b, s, device="cuda")
    keep[1, :5] = 0  # rows 0-4 of batch 1: every key they may see is masked
    torchlite.reset()
    compiled = torchlite.compile(_layers_sharing_a_causal_mask, fullgraph=True)
    with torch.no_grad():
        expected = _layers_sharing_a_causal_mask(x, wq, keep)
        actual = compiled(x, wq, keep)
    torch.testing.assert_close(actual, expected, atol=3e-2, rtol=3e-2, equal_nan=True)


def _where_count(fn, *args):
    with profile(activities=[ProfilerActivity.CPU]) as p:
        fn(*args)
        torch.cuda.synchronize()
    return sum(e.name == "aten::where" for e in p.events())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_boolean_mask_shared_by_layers_is_made_additive_once(dtype):
    """The additive mask torch builds in every attention call is built once per run, with the
    fill torch uses (learned from torch), so every value, fully masked rows included, is
    eager's to the bit."""
    b, h, s, d = 2, 4, 96, 64
    x = torch.randn(b, h, s, d, device="cuda", dtype=dtype)
    wq = torch.randn(d, d, device="cuda", dtype=dtype) / 8
    keep = torch.ones(b, s, device="cuda")
    keep[1, :5] = 0
    torchlite.reset()
    compiled = torchlite.compile(_layers_sharing_a_causal_mask, fullgraph=True)
    with torch.no_grad():
        for _ in range(2):
            expected = _layers_sharing_a_causal_mask(x, wq, keep)
            actual = compiled(x, wq, keep)
            assert torch.equal(actual.isnan(), expected.isnan())
            assert torch.equal(actual.nan_to_num(), expected.nan_to_num())
            keep[0, -3:] = 0  # new padding, same compiled graph
        eager_wheres = _where_count(_layers_sharing_a_causal_mask, x, wq, keep)
        compiled_wheres = _where_count(compiled, x, wq, keep)
    assert compiled_wheres < eager_wheres, (compiled_wheres, eager_wheres)


def _project(x, w, b):
    return F.linear(x, w, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(512, 256), (2, 300, 256)])
@pytest.mark.parametrize("bias", [False, True])
def test_unaligned_half_linear_is_padded_and_matches_eager(dtype, shape, bias):
    x = torch.randn(shape, device="cuda", dtype=dtype)
    w = torch.randn(5003, 256, device="cuda", dtype=dtype) / 16
    b = torch.randn(5003, device="cuda", dtype=dtype) if bias else None
    torchlite.reset()
    compiled = torchlite.compile(_project, fullgraph=True)
    with torch.no_grad():
        expected = _project(x, w, b)
        for _ in range(2):
            actual = compiled(x, w, b)
            torch.testing.assert_close(actual, expected, atol=2e-2, rtol=2e-2)
            # rows keep the padded stride, as torch.compile returns them (no copy)
            assert actual.stride()[-1] == 1 and actual.stride()[-2] == 5008
        widths = _linear_widths(compiled, x, w, b)
        ops = _op_names(compiled, x, w, b)
        w.mul_(2)  # the padded weight is rebuilt from the current one on every call
        torch.testing.assert_close(compiled(x, w, b), _project(x, w, b), atol=4e-2, rtol=2e-2)
    if bias:
        assert widths == {5008}, widths  # weight and bias padded to a multiple of 8
    else:  # no weight copy: the product is written into padded rows
        assert "aten::constant_pad_nd" not in ops and "aten::mm" in ops, ops


def _log_probs(x, w):
    return F.linear(x, w).float().log_softmax(-1)


def test_padded_linear_result_feeds_later_kernels():
    # the padded-stride logits are read in place by the kernels after them
    x = torch.randn(300, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(5003, 256, device="cuda", dtype=torch.bfloat16) / 16
    torchlite.reset()
    compiled = torchlite.compile(_log_probs, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w), _log_probs(x, w), atol=5e-2, rtol=2e-2)
        ops = _op_names(compiled, x, w)
    assert "aten::constant_pad_nd" not in ops and "aten::mm" in ops, ops


def test_aligned_or_float_linears_are_left_alone():
    x = torch.randn(512, 256, device="cuda")
    w = torch.randn(5003, 256, device="cuda")
    torchlite.reset()
    compiled = torchlite.compile(_project, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w, None), _project(x, w, None))
        widths = _linear_widths(compiled, x, w, None)
    assert widths == {5003}, widths


def _attention_block(q, k, v):
    b, h, n, d = q.shape
    o = F.scaled_dot_product_attention(q, k, v)
    return o.transpose(1, 2).reshape(b, n, h * d) * 2


@pytest.mark.parametrize("shape", [(2, 4, 128, 64), (3, 12, 197, 64)])
def test_fused_attention_output_is_not_copied(shape):
    """The fused kernels return [B, H, N, D] laid out as [B, N, H, D]: predicted so, the
    `transpose(1, 2).reshape` after attention stays a view (as in eager), with no copy."""
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    torchlite.reset()
    compiled = torchlite.compile(_attention_block, fullgraph=True)
    with torch.no_grad():
        expected = _attention_block(q, k, v)
        actual = compiled(q, k, v)
        torch.testing.assert_close(actual, expected)
        assert actual.stride() == expected.stride()
        ops = _aten_ops(compiled, q, k, v)
    assert "aten::copy_" not in ops, sorted(ops)


class _ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.c2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)

    def forward(self, x):
        y = torch.relu(self.bn(self.c1(x)))
        return torch.nn.functional.silu(self.c2(y) + 1).mean((2, 3))


@pytest.mark.parametrize("setting, expect_nhwc", [(None, True), (False, False)])
def test_half_convolutions_run_channels_last_by_default(monkeypatch, setting, expect_nhwc):
    monkeypatch.setattr(torchlite.config, "channels_last", setting)
    m = _ConvNet().eval().to("cuda", torch.bfloat16)
    x = torch.randn(4, 3, 32, 32, device="cuda", dtype=torch.bfloat16)
    torchlite.reset()
    before = torchlite.counters()["channels_last_convs"]
    compiled = torchlite.compile(m)
    with torch.no_grad():
        expected = m(x)
        actual = compiled(x)
    torch.testing.assert_close(actual, expected, atol=3e-2, rtol=3e-2)
    assert actual.stride() == expected.stride()
    assert (torchlite.counters()["channels_last_convs"] > before) == expect_nhwc
