"""scaled_dot_product_attention with a floating attn_mask (an additive bias: T5's position bias,
ALiBi, relative position biases, a padding mask made additive) that torch would run on its
float32 math path is two batched products around one generated scale + bias + softmax kernel
(passes/attention_products.h), as torch.compile writes it. By default only on CUDA, for the calls
torch._fused_sdp_choice sends to the math path (the question is asked at compile time with
tensors of the call's layouts: runs_math below); these tests rewrite every call on the CPU
(config.decompose_attention = True) and check the rewritten graph (no SDPA, no torch softmax
or add: they run in a generated kernel) and its values against float64. Calls with dropout,
is_causal, a boolean mask or grad, and returned results, keep torch's SDPA."""

import pytest
import torch
import torch.nn.functional as F
from helpers import aten_ops, nvrtc_missing
from test_merge_duplicates import t5_inputs, t5_like

import torchlite
from torchlite import _C, config

needs_cpu_kernels = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

SDPA_OPS = (
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_attention_math",
)


def sdpa(q, k, v, mask, scale=None):
    """Attention whose heads are then merged, as models do (a returned SDPA result keeps
    torch's call: see test_a_returned_result_keeps_torchs_call)."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out.transpose(1, 2).flatten(2)


def exact(q, k, v, mask, scale=None):
    """The attention in float64 (a masked-out row throughout gives zeros, as torch's does)."""
    q, k, v, mask = (t.double() for t in (q, k, v, mask))
    s = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale) + mask
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return (p @ v).transpose(1, 2).flatten(2)


def heads(b, h, lq, lk, d, dtype, permuted=True):
    """q, k, v as a linear's output viewed per head (b, h, l, d) on a (b, l, h, d) layout."""

    def one(n):
        t = torch.randn(b, n, h, d, dtype=dtype)
        return t.transpose(1, 2) if permuted else t.transpose(1, 2).contiguous()

    return one(lq), one(lk), one(lk)


def compiled_run(fn, *args):
    torchlite.reset()
    torchlite.reset_counters()
    compiled = torchlite.compile(fn)
    out = compiled(*args)
    out2 = compiled(*args)
    torch.testing.assert_close(out, out2, atol=0, rtol=0)
    return compiled, out


@pytest.fixture
def on_every_device(monkeypatch):
    monkeypatch.setattr(config, "decompose_attention", True)


def tolerance(dtype):
    return {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}[dtype]


@needs_cpu_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "mask_shape",
    [(2, 3, 8, 12), (1, 3, 8, 12), (2, 1, 1, 12), (8, 12), (3, 1, 12), (1, 1, 8, 1)],
    ids=["full", "per-head", "padding", "2d", "3d-heads", "per-query"],
)
def test_biased_attention_is_products_around_one_softmax_kernel(dtype, mask_shape, on_every_device):
    q, k, v = heads(2, 3, 8, 12, 16, dtype)
    mask = torch.randn(mask_shape, dtype=dtype)
    compiled, out = compiled_run(sdpa, q, k, v, mask)
    assert torchlite.counters()["attentions_decomposed"] == 1
    ops = aten_ops(compiled, q, k, v, mask)
    assert sum(ops[o] for o in SDPA_OPS) == 0, ops
    # scale, bias and softmax run in generated code: torch runs the two products only
    assert ops["aten::_safe_softmax"] + ops["aten::softmax"] + ops["aten::add"] == 0, ops
    assert ops["aten::bmm"] == 2, ops
    assert out.dtype == dtype and out.shape == (2, 8, 48)
    assert out.stride() == sdpa(q, k, v, mask).stride()
    tol = tolerance(dtype)
    torch.testing.assert_close(out.double(), exact(q, k, v, mask), atol=tol, rtol=tol)


@needs_cpu_kernels
@pytest.mark.parametrize("scale", [None, 1.0, 0.3])
@pytest.mark.parametrize("permuted", [True, False])
def test_scale_and_layouts(scale, permuted, on_every_device):
    q, k, v = heads(2, 2, 5, 7, 8, torch.float32, permuted)
    mask = torch.randn(1, 2, 5, 7)
    _, out = compiled_run(lambda q, k, v, m: sdpa(q, k, v, m, scale), q, k, v, mask)
    assert torchlite.counters()["attentions_decomposed"] == 1
    assert out.stride() == sdpa(q, k, v, mask, scale).stride()
    torch.testing.assert_close(out.double(), exact(q, k, v, mask, scale), atol=1e-5, rtol=1e-5)


@needs_cpu_kernels
def test_a_row_masked_throughout_gives_zeros_as_eager(on_every_device):
    q, k, v = heads(1, 2, 4, 6, 8, torch.float32)
    mask = torch.zeros(1, 1, 4, 6)
    mask[..., 1, :] = float("-inf")
    mask[..., 2, :3] = float("-inf")
    _, out = compiled_run(sdpa, q, k, v, mask)
    assert torchlite.counters()["attentions_decomposed"] == 1
    assert not out.isnan().any()
    assert (out[:, 1] == 0).all()
    torch.testing.assert_close(out, sdpa(q, k, v, mask))


@needs_cpu_kernels
def test_float32_mask_with_bfloat16_inputs(on_every_device):
    q, k, v = heads(2, 2, 8, 8, 8, torch.bfloat16)
    mask = torch.randn(2, 1, 8, 8)
    _, out = compiled_run(sdpa, q, k, v, mask)
    assert torchlite.counters()["attentions_decomposed"] == 1 and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), exact(q, k, v, mask), atol=3e-2, rtol=3e-2)


@needs_cpu_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_t5_layers_match_float64(dtype, on_every_device):
    args = t5_inputs(2, 16, 32, layers=3, dtype=dtype)
    _, out = compiled_run(t5_like, *args)
    assert torchlite.counters()["attentions_decomposed"] == 3
    ref = t5_like(*(a.double() if a.is_floating_point() else a for a in args))
    eager_err = (t5_like(*args).double() - ref).abs().max()
    assert (out.double() - ref).abs().max() <= max(4 * eager_err, tolerance(dtype))


@needs_cpu_kernels
def test_a_returned_result_keeps_torchs_call(on_every_device):
    q, k, v = heads(2, 3, 8, 12, 16, torch.float32)
    for mask in (torch.randn(2, 3, 8, 12), torch.randn(3, 1, 12)):
        returned = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        _, out = compiled_run(returned, q, k, v, mask)
        assert torchlite.counters()["attentions_decomposed"] == 0
        ref = returned(q, k, v, mask)
        assert out.stride() == ref.stride()
        torch.testing.assert_close(out, ref)


def _keeps_sdpa(fn, *args):
    compiled, out = compiled_run(fn, *args)
    assert torchlite.counters()["attentions_decomposed"] == 0
    ops = aten_ops(compiled, *args)
    assert sum(ops[o] for o in SDPA_OPS) >= 1, ops
    return out


@needs_cpu_kernels
def test_calls_it_does_not_handle_keep_torchs_sdpa(on_every_device):
    q, k, v = heads(2, 2, 6, 6, 8, torch.float32)
    mask = torch.randn(2, 1, 6, 6)
    boolean = mask > 0
    boolean[..., 0] = True
    out = _keeps_sdpa(lambda q, k, v, m: sdpa(q, k, v, m), q, k, v, boolean)
    torch.testing.assert_close(out, sdpa(q, k, v, boolean))
    out = _keeps_sdpa(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v
    )
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    # an input that needs grad (a training graph): torch's call and its backward
    qg = q.clone().requires_grad_()
    out = _keeps_sdpa(lambda q, k, v, m: sdpa(q, k, v, m), qg, k, v, mask)
    torch.testing.assert_close(out, sdpa(qg, k, v, mask))


@needs_cpu_kernels
def test_off_by_default_on_the_cpu_and_when_turned_off(monkeypatch):
    q, k, v = heads(2, 2, 6, 6, 8, torch.float32)
    mask = torch.randn(2, 1, 6, 6)
    assert config.decompose_attention is None
    torch.testing.assert_close(_keeps_sdpa(sdpa, q, k, v, mask), sdpa(q, k, v, mask))
    monkeypatch.setattr(config, "decompose_attention", False)
    torch.testing.assert_close(_keeps_sdpa(sdpa, q, k, v, mask), sdpa(q, k, v, mask))


@needs_cpu_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_safe_softmax_is_one_generated_kernel(dtype):
    x = torch.randn(4, 3, 10, dtype=dtype)
    x[1, 2] = float("-inf")
    x[2, 0, :4] = float("-inf")
    fn = lambda x: torch._safe_softmax(x * 2.0, -1, dtype=torch.float32)
    compiled, out = compiled_run(fn, x)
    assert aten_ops(compiled, x)["aten::_safe_softmax"] == 0
    assert (out[1, 2] == 0).all() and not out.isnan().any()
    torch.testing.assert_close(out, fn(x))


@pytest.mark.parametrize(
    "mask_shape", [(2, 3, 8, 12), (3, 1, 12), (2, 1, 1, 12)], ids=["4d", "3d", "padding"]
)
@pytest.mark.parametrize("offset", [False, True])
def test_runs_math_answers_as_torch_for_the_real_tensors(mask_shape, offset):
    from torchlite import _attention_mask

    qkv = torch.randn(2, 8, 3, 3, 16).permute(2, 0, 3, 1, 4)  # (3, b, h, l, d), as models split
    q, k, v = qkv.unbind(0) if offset else heads(2, 3, 8, 8, 16, torch.float32)
    mask = torch.randn(mask_shape[:-1] + (8,))
    expected = torch._fused_sdp_choice(q, k, v, mask) == 0
    metas = (t.to("meta") if t.storage_offset() == 0 else _meta_view(t) for t in (q, k, v, mask))
    assert _attention_mask.runs_math(*metas, torch.device("cpu")) == expected


def _meta_view(t):
    base = torch.empty(t.untyped_storage().nbytes() // t.element_size(), device="meta")
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


@pytest.mark.skipif(bool(nvrtc_missing()), reason="NVRTC not loadable")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_softmax_kernel_compiles_for_cuda(dtype, on_every_device):
    q, k, v = heads(2, 3, 8, 300, 16, dtype)  # rows long enough for a warp reduction
    mask = torch.randn(1, 3, 8, 300, dtype=dtype)
    g = torchlite.explain(sdpa)(q, k, v, mask).graphs[0]
    kernels = _C.cuda_kernel_sources(g, "compute_90")
    assert any("__shfl_xor_sync" in source for _, source, _, _ in kernels)
    for name, _, ptx, _ in kernels:
        assert f".entry {name}(".encode() in ptx


@needs_cpu_kernels
@pytest.mark.parametrize("group_kernels", [False, True])
def test_grouped_head_copies_before_views_of_them(on_every_device, group_kernels):
    # NOTE: k's and v's per-head copies are neighbouring copy kernels, grouped into one launch
    # (passes/group_kernels.h: copies are grouped by default); a view of the first one the memory
    # plan never runs sat between them and was moved before both, ahead of the value it views.
    q, k, v = heads(2, 3, 8, 12, 16, torch.float32)
    mask = torch.randn(2, 3, 8, 12)
    torchlite.reset()
    f = torchlite.compile(sdpa, options={"group_kernels": group_kernels})
    for _ in range(2):
        torch.testing.assert_close(
            f(q, k, v, mask).double(), exact(q, k, v, mask), atol=1e-4, rtol=1e-4
        )
