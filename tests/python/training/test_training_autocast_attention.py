"""Compiled training under autocast and with attention: dtypes follow autocast in forward and
backward (the joint graph holds autocast's casts; its extern ops are never cast again), SDPA
stays one fused extern op with its own backward op, and graphs that do not fit the joint say why
in explain."""

import pytest
import torch
import torch.nn.functional as F
from test_training_models import MODELS
from test_training_trace import _joint_of
from train_check import compiled_backward_used, train_parity

import torchlite


@pytest.mark.parametrize("name", ["attention", "sdpa", "layernorm_mlp"])
def test_cpu_bf16_autocast_training_steps_match_eager(name):
    torch.manual_seed(0)
    build, make_inputs = MODELS[name]
    out = train_parity(
        build(), make_inputs, optimizer="sgd", autocast=torch.bfloat16, rtol=3e-2, atol=3e-2
    )
    assert compiled_backward_used(out)


def _mixed_matmuls(x, w1, w2):
    # NOTE: a float32 matmul made by a decomposition inside the joint graph (SDPA's math path
    # used to be one) must stay float32 when the compiled forward runs under autocast.
    h = (x @ w1).softmax(-1)
    with torch.autocast("cpu", enabled=False):
        y = h.float() @ w2.float()
    return y.tanh()


def test_autocast_disabled_region_inside_an_autocast_region_keeps_float32():
    args = [torch.randn(6, 8), torch.randn(8, 8), torch.randn(8, 4)]
    for a in args:
        a.requires_grad_()
    ref = [a.detach().clone().requires_grad_() for a in args]
    torchlite.reset()
    with torch.autocast("cpu", torch.bfloat16):
        out = torchlite.compile(_mixed_matmuls)(*args)
        expected = _mixed_matmuls(*ref)
    assert compiled_backward_used(out)
    assert out.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2)
    out.square().sum().backward()
    expected.square().sum().backward()
    for a, r in zip(args, ref, strict=True):
        assert a.grad.dtype == r.grad.dtype
        torch.testing.assert_close(a.grad, r.grad, rtol=5e-2, atol=5e-2)


def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).square()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_is_one_fused_op_with_its_own_backward_op(dtype):
    args = [torch.randn(2, 3, 7, 16, dtype=dtype, requires_grad=True) for _ in range(3)]
    joint = _joint_of(_sdpa, *args)
    assert joint.reason is None
    text = str(joint.graph)
    fused = [line for line in text.splitlines() if "scaled_dot_product" in line]
    # NOTE: the CPU backend torch picks for these inputs, fused with a backward op of its own;
    # never the math path's matmuls in the joint graph.
    assert any("backward" in line for line in fused), text
    assert "bmm" not in text and "softmax" not in text, text


@pytest.mark.parametrize("mask", ["bool", "float", "none"])
def test_sdpa_training_matches_eager(mask):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8, requires_grad=True) for _ in range(3))
    masks = {
        "bool": torch.rand(2, 1, 5, 5) > 0.3,
        "float": torch.randn(2, 1, 5, 5),
        "none": None,
    }
    m = masks[mask]
    if m is not None and m.dtype == torch.bool:
        m[..., 0] = True  # NOTE: no fully masked row (eager gives NaN there)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m).sin()

    ref = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    torchlite.reset()
    out = torchlite.compile(fn)(q, k, v)
    expected = fn(*ref)
    assert compiled_backward_used(out)
    torch.testing.assert_close(out, expected)
    g = torch.randn_like(out)
    out.backward(g)
    expected.backward(g)
    for a, r in zip((q, k, v), ref, strict=True):
        torch.testing.assert_close(a.grad, r.grad)


def _constant_cat(x):
    cache = torch.tensor([], dtype=x.dtype, device=x.device)  # an empty KV cache, as HF's
    return torch.cat([cache, x.exp()], dim=0).sum(0), cache


def test_constant_tensor_made_in_the_graph_keeps_the_compiled_backward():
    x = torch.randn(4, 3, requires_grad=True)
    ref = x.detach().clone().requires_grad_()
    torchlite.reset()
    out, cache = torchlite.compile(_constant_cat)(x)
    expected, _ = _constant_cat(ref)
    assert compiled_backward_used(out)
    assert cache.shape == (0,) and not cache.requires_grad
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(x.grad, ref.grad)


def test_explain_says_how_each_training_graph_runs(monkeypatch):
    x = torch.randn(3, requires_grad=True)
    ex = torchlite.explain(lambda t: (t * 2).sin().sum())(x)
    assert ex.training and all("compiled forward and backward" in t for t in ex.training)
    assert "Training (graphs autograd records):" in str(ex)
    monkeypatch.setattr(torchlite.config, "compiled_backward", False)
    ex = torchlite.explain(lambda t: (t * 2).sin().sum())(x)
    assert ex.training and all("op by op: compiled_backward is off" in t for t in ex.training)
    ex = torchlite.explain(lambda t: (t * 2).sin().sum())(torch.randn(3))
    assert ex.training == []  # nothing autograd records


def _gelu_norm_block(x, w, g, b):
    with torch.autocast("cpu", torch.bfloat16):
        h = F.gelu(x @ w)
    return F.layer_norm(h.float(), (h.shape[-1],), g, b).square()


def test_decompositions_upcasts_are_recorded_as_fusable_casts():
    # NOTE: gelu_backward's and native_layer_norm_backward's decompositions upcast with
    # aten.to.dtype / aten._to_copy; recorded as ATen calls they ran as extern copies (BERT-base
    # bf16 backward: ~100 a step on CUDA), recorded as `.to(dtype)` they fuse.
    args = [torch.randn(8, 16), torch.randn(16, 32), torch.randn(32), torch.randn(32)]
    args = [a.requires_grad_() for a in args]
    joint = _joint_of(_gelu_norm_block, *args)
    assert joint.reason is None
    text = str(joint.graph)
    assert "aten::to." not in text and "aten::_to_copy" not in text, text
    ref = [a.detach().clone().requires_grad_() for a in args]
    torchlite.reset()
    out = torchlite.compile(_gelu_norm_block)(*args)
    expected = _gelu_norm_block(*ref)
    assert compiled_backward_used(out)
    torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2)
    g = torch.randn_like(out)
    out.backward(g)
    expected.backward(g)
    for a, r in zip(args, ref, strict=True):
        torch.testing.assert_close(a.grad, r.grad, rtol=3e-2, atol=3e-2)


def _rotary_block(x, cos, sin, w):
    # NOTE: rotary embedding (chunk + cat), a stacked/unbound pair, slices with clamped and
    # negative bounds, rsub: each recorded as an ATen call by the joint trace
    q = x @ w
    q1, q2 = q.chunk(2, dim=-1)
    r = q * cos + torch.cat((-q2, q1), dim=-1) * sin
    a, b = torch.stack((r, q), dim=0).unbind(0)
    s = a[:, 1:] + b[:, :-1]
    t = s[..., 2:100] * (1 - s[..., -4:-2].sum(-1, keepdim=True))
    return t.square().mean(-1) + torch.split(s, [3, s.shape[-1] - 3], dim=-1)[1].sum(-1)


@pytest.mark.parametrize("shape", [(4, 9, 16), (2, 5, 8)])
def test_joins_splits_and_slices_are_recorded_as_fusable_ops(shape):
    # NOTE: as ATen calls, cat/split/slice ran as torch's copy kernels between the compiled
    # kernels (a Llama block: four CatArrayBatchedCopy launches per layer and step on CUDA)
    b, s, d = shape
    args = [torch.randn(b, s, d), torch.randn(s, d), torch.randn(s, d), torch.randn(d, d)]
    args[0].requires_grad_()
    args[3].requires_grad_()
    joint = _joint_of(_rotary_block, *args)
    assert joint.reason is None
    text = str(joint.graph)
    for op in ("aten::cat", "aten::slice", "aten::split", "aten::stack", "aten::unbind"):
        assert op not in text, (op, text)
    ref = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    torchlite.reset()
    out = torchlite.compile(_rotary_block)(*args)
    expected = _rotary_block(*ref)
    assert compiled_backward_used(out)
    torch.testing.assert_close(out, expected)
    g = torch.randn_like(out)
    out.backward(g)
    expected.backward(g)
    for a, r in zip(args, ref, strict=True):
        if a.requires_grad:
            # NOTE: float32 sums of squares in another order
            torch.testing.assert_close(a.grad, r.grad, rtol=1e-4, atol=1e-4)


_ATEN = torch.ops.aten
_X = torch.randn(3, 4, 5)


@pytest.mark.parametrize(
    "func,args",
    [
        (_ATEN.rsub.Scalar, (_X, 1.5, 2)),
        (_ATEN.rsub.Scalar, (_X, 1.5)),
        (_ATEN.slice.Tensor, (_X, 1, -3, 2**63 - 1)),
        (_ATEN.slice.Tensor, (_X, 2, 1, 3, 1)),
        (_ATEN.slice.Tensor, (_X, -1, 4, 2)),
        (_ATEN.slice.Tensor, (_X, 0)),
        (_ATEN.slice_backward.default, (_X[:, 1:3], [3, 4, 5], 1, 1, 3, 1)),
        (_ATEN.slice_backward.default, (_X[..., -2:], [3, 4, 5], -1, -2, 2**63 - 1, 1)),
        (_ATEN.cat.default, ([_X, _X[:, :2]], 1)),
        (_ATEN.split.Tensor, (_X, 2, 1)),
        (_ATEN.split_with_sizes.default, (_X, [1, 4], 2)),
        (_ATEN.unbind.int, (_X, 1)),
        (_ATEN.select.int, (_X, 2, -1)),
        (_ATEN.stack.default, ([_X, _X], 3)),
    ],
)
def test_aten_calls_recorded_as_torch_level_ops_compute_the_same(func, args):
    from torchlite._training import _torch_level

    target, t_args, t_kwargs = _torch_level(func, args, {})
    assert target is not func
    torch.testing.assert_close(target(*t_args, **t_kwargs), func(*args))
