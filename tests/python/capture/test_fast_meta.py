"""Meta results inferred in C++ (capture/fast_meta*.cpp) against torch's own meta kernels:
sizes, strides, dtype, requires_grad, leaf-ness and freshness must be identical, and a call
torch rejects must never be answered."""

import itertools

import pytest
import torch
import torch.nn.functional as F

import torchlite

DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
]


def meta(shape, dtype=torch.float32, layout="contiguous", requires_grad=False):
    """A meta tensor of `shape` in one of several layouts."""
    if layout == "contiguous":
        t = torch.empty(shape, dtype=dtype, device="meta")
    elif layout == "transposed":
        t = torch.empty(shape[::-1], dtype=dtype, device="meta").permute(
            *reversed(range(len(shape)))
        )
    elif layout == "channels_last":
        t = torch.empty(shape, dtype=dtype, device="meta").to(memory_format=torch.channels_last)
    elif layout == "sliced":  # not dense
        big = torch.empty((*shape[:-1], shape[-1] * 2), dtype=dtype, device="meta")
        t = big[..., ::2]
    elif layout == "odd_unit_strides":  # size-1 dimensions with strides no copy would give
        strides = [17 if n == 1 else s for n, s in zip(shape, torch.empty(shape).stride())]
        t = torch.empty(4096, dtype=dtype, device="meta").as_strided(shape, strides)
    elif layout == "expanded":
        t = torch.empty((*shape[:-1], 1), dtype=dtype, device="meta").expand(shape)
    else:
        raise ValueError(layout)
    if requires_grad:
        t = t.detach().requires_grad_()
    return t


def describe(r):
    if not isinstance(r, torch.Tensor):
        return ("not a tensor", type(r))
    return (
        tuple(r.shape),
        r.stride(),
        r.storage_offset(),
        r.dtype,
        r.device,
        r.requires_grad,
        r.is_leaf,
        r._base is None,
    )


def compare(target, *args, method="", **kwargs):
    """Runs the call both ways; returns whether the fast path answered it."""
    self = args[0] if method else None
    rest = args[1:] if method else args
    fast = torchlite._C.fast_meta(target, method, self, tuple(rest), kwargs or None)
    try:
        real = getattr(self, method)(*rest, **kwargs) if method else target(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - any error torch raises must not be answered
        assert fast is None, f"fast meta answered a call torch rejects ({e})"
        return False
    if fast is None:
        return False
    assert describe(fast) == describe(real), (target, method, describe(fast), describe(real))
    return True


UNARY = [
    torch.abs, torch.neg, torch.floor, torch.ceil, torch.trunc, torch.sign, torch.relu,
    torch.sin, torch.cos, torch.exp, torch.log, torch.sqrt, torch.rsqrt, torch.sigmoid,
    torch.tanh, torch.erf, torch.reciprocal, torch.log1p, torch.expm1, torch.isnan,
    torch.isinf, torch.isfinite, torch.logical_not, F.gelu, F.silu, F.relu, F.mish,
    F.hardswish, F.hardsigmoid, F.relu6, F.sigmoid, F.tanh, torch.tan, torch.exp2,
]  # fmt: skip
LAYOUTS = ["contiguous", "transposed", "channels_last", "sliced", "expanded"]
UNIT_SHAPES = [(2, 1, 4, 1), (1, 1, 4), (1, 3, 1, 5), (1, 1)]


@pytest.mark.parametrize("fn", UNARY, ids=lambda f: f.__name__)
def test_unary_ops_match_meta_over_dtypes_and_layouts(fn):
    answered = 0
    for dtype, layout in itertools.product(DTYPES, LAYOUTS):
        answered += compare(fn, meta((2, 3, 4, 5), dtype, layout))
    answered += compare(fn, meta((), torch.float32))
    answered += compare(fn, meta((7,), torch.float32))
    answered += compare(fn, meta((3, 1, 4, 1), torch.float32))
    for shape, layout in itertools.product(UNIT_SHAPES, ["odd_unit_strides", "channels_last"]):
        if layout == "channels_last" and len(shape) != 4:
            continue
        answered += compare(fn, meta(shape, torch.float32, layout))
        answered += compare(fn, meta(shape, torch.int64, layout))
    assert answered >= 5


def test_unary_methods_and_keyword_forms_match_meta():
    x = meta((4, 8))
    for name in ["exp", "sigmoid", "relu", "neg", "abs", "tanh", "rsqrt", "isnan"]:
        assert compare(None, x, method=name)
    assert compare(F.gelu, x, approximate="tanh")
    assert compare(F.silu, x, inplace=False)
    assert compare(F.silu, x, inplace=True)  # in place: x itself (see below)


SHAPE_PAIRS = [
    ((4, 8), (4, 8)),
    ((4, 8), (8,)),
    ((4, 1), (1, 8)),
    ((2, 3, 4, 5), (5,)),
    ((2, 3, 4, 5), (3, 1, 1)),
    ((4, 8), ()),
    ((), (4, 8)),
    ((3, 1, 4), (1, 1, 4)),
]
BINARY = [
    torch.add, torch.sub, torch.mul, torch.div, torch.true_divide, torch.maximum, torch.minimum,
    torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge, torch.logical_and,
    torch.logical_or, torch.logical_xor, torch.pow, torch.floor_divide, torch.remainder,
    torch.atan2,
]  # fmt: skip


@pytest.mark.parametrize("fn", BINARY, ids=lambda f: f.__name__)
def test_binary_ops_match_meta_over_dtype_pairs_and_broadcasting(fn):
    answered = 0
    for da, db in itertools.product(DTYPES, DTYPES):
        answered += compare(fn, meta((4, 8), da), meta((8,), db))
        answered += compare(fn, meta((4, 8), da), meta((), db))
    for sa, sb in SHAPE_PAIRS:
        answered += compare(fn, meta(sa), meta(sb))
    for dtype, scalar in itertools.product(DTYPES, [True, 3, -2, 2.5]):
        answered += compare(fn, meta((4, 8), dtype), scalar)
        answered += compare(fn, scalar, meta((4, 8), dtype))
    assert answered >= 20


@pytest.mark.parametrize("fn", [torch.add, torch.mul, torch.gt, torch.maximum, torch.div])
def test_binary_output_strides_follow_input_layouts(fn):
    answered = 0
    shape = (2, 3, 4, 5)
    for la, lb in itertools.product(LAYOUTS, LAYOUTS):
        answered += compare(fn, meta(shape, layout=la), meta(shape, layout=lb))
        answered += compare(fn, meta(shape, layout=la), meta((5,), layout="contiguous"))
        answered += compare(fn, meta(shape, layout=la), meta((3, 1, 1)))
    for shape in UNIT_SHAPES:
        u = meta(shape, layout="odd_unit_strides")
        answered += compare(fn, u, 1.5)
        answered += compare(fn, u, meta(shape))
        answered += compare(fn, meta(shape), u)
        answered += compare(fn, u, meta(shape[-1:]))
        answered += compare(fn, u, meta((), torch.float64))
    for sa, sb in [((2, 1, 4, 1), (2, 3, 1, 5)), ((1, 3, 1, 5), (2, 1, 4, 1))]:
        for la, lb in itertools.product(["contiguous", "channels_last"], repeat=2):
            answered += compare(fn, meta(sa, layout=la), meta(sb, layout=lb))
    assert answered >= 40


def test_operator_and_dunder_forms_match_meta():
    import operator

    x, y = meta((4, 8)), meta((8,), torch.float16)
    i = meta((4, 8), torch.int64)
    for op in [operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
               operator.mod, operator.pow, operator.lt, operator.eq, operator.ge]:  # fmt: skip
        assert compare(op, x, y)
        assert compare(op, x, 2)
        compare(op, i, 2)
        compare(op, 2.5, i)
    for name in ["__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rtruediv__",
                 "__pow__", "__rpow__", "__gt__"]:  # fmt: skip
        assert compare(None, x, 2.0, method=name)
        compare(None, i, 3, method=name)
    assert compare(operator.neg, x)
    assert compare(torch.add, x, y, alpha=2)
    assert not compare(torch.add, i, i, alpha=0.5)  # torch raises


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_where_masked_fill_clamp_match_meta(dtype):
    mask = meta((4, 8), torch.bool)
    for layout in LAYOUTS:
        x = meta((4, 8), dtype, layout if layout != "channels_last" else "contiguous")
        compare(torch.where, mask, x, meta((8,), dtype))
        compare(torch.where, mask, x, 0.0)
        compare(torch.where, meta((8,), torch.bool), 1, x)
        compare(None, x, mask, 0, method="where")
        compare(None, x, mask, 1.5, method="masked_fill")
        compare(None, x, mask, True, method="masked_fill")
        compare(None, x, meta((8,), torch.bool), -3, method="masked_fill")
        compare(torch.masked_fill, x, mask, 2)
        compare(None, x, 0, 1, method="clamp")
        compare(None, x, 0.5, method="clamp")
        compare(torch.clamp, x, max=2)
        compare(torch.clamp, x, min=-1.5, max=2)
        compare(torch.clamp_min, x, 0)
        compare(None, x, 0.0, method="clamp_max")
    assert compare(torch.where, mask, meta((4, 8)), 0.0)
    assert compare(None, meta((4, 8)), mask, float("-inf"), method="masked_fill")
    assert compare(torch.clamp, meta((4, 8)), 0, 6)


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin"])
def test_reductions_match_meta_over_dims_keepdim_dtype(name):
    answered = 0
    dims = [None, 0, -1, 1, (0, 2), [1, -1], (0, 1, 2, 3), (), []]
    for dtype, layout in itertools.product(DTYPES, LAYOUTS):
        x = meta((2, 3, 4, 5), dtype, layout)
        for dim, keepdim in itertools.product(dims, [False, True]):
            if dim is None:
                answered += compare(None, x, method=name)
                answered += compare(getattr(torch, name), x)
            else:
                answered += compare(None, x, dim, keepdim, method=name)
                answered += compare(getattr(torch, name), x, dim=dim, keepdim=keepdim)
        if name in ("sum", "mean"):
            for out in [torch.float64, torch.int64, torch.float16]:
                answered += compare(None, x, -1, dtype=out, method=name)
    assert answered >= 50


def test_softmax_layer_norm_cat_stack_tril_match_meta():
    for dtype, layout in itertools.product(DTYPES, LAYOUTS):
        x = meta((2, 3, 4, 5), dtype, layout)
        for dim in [0, -1, 1]:
            compare(F.softmax, x, dim)
            compare(F.log_softmax, x, dim=dim)
            compare(torch.softmax, x, dim, dtype=torch.float64)
            compare(None, x, dim, method="softmax")
        compare(F.layer_norm, x, (5,))
        compare(F.layer_norm, x, [4, 5], meta((4, 5), dtype), meta((4, 5), dtype), 1e-6)
        compare(F.layer_norm, x, (5,), weight=meta((5,), torch.float32))
        for dim in [0, 1, -1]:
            compare(torch.cat, [x, x], dim)
            compare(torch.cat, (x, meta((2, 3, 4, 5), dtype)), dim=dim)
            compare(torch.stack, [x, x], dim)
        compare(torch.tril, x)
        compare(None, x, 1, method="triu")
        compare(torch.triu, x, diagonal=-1)
    for shape in UNIT_SHAPES:
        u = meta(shape, layout="odd_unit_strides")
        compare(F.softmax, u, -1)
        compare(F.layer_norm, u, shape[-1:])
        compare(torch.tril, u)
        compare(torch.cat, [u, u], -1)
        compare(torch.stack, [u, u])
        compare(torch.sum, u, -1)
        compare(torch.amax, u, 0, True)
        compare(torch.where, meta(shape, torch.bool), u, 0.0)
        compare(None, u, meta(shape, torch.bool), 0.0, method="masked_fill")
        compare(torch.clamp, u, 0.0)
    x = meta((4, 8))
    assert compare(F.softmax, x, -1)
    assert compare(F.layer_norm, x, (8,), meta((8,)), meta((8,)))
    assert compare(torch.cat, [x, meta((2, 8))])
    assert compare(torch.stack, [x, x], 1)
    assert compare(torch.tril, x)


@pytest.mark.parametrize("grad_mode", [True, False])
def test_requires_grad_follows_grad_mode_and_dtype(grad_mode):
    x = meta((4, 8), requires_grad=True)
    w = meta((8,), requires_grad=True)
    with torch.set_grad_enabled(grad_mode):
        assert compare(torch.add, x, 1.0)
        assert compare(torch.mul, meta((4, 8)), w)
        assert compare(torch.gt, x, 0)  # bool: never requires grad
        assert compare(torch.sum, x, -1)
        assert compare(F.layer_norm, meta((4, 8)), (8,), w, None)
        assert compare(torch.where, meta((4, 8), torch.bool), x, 0.0)
        assert compare(F.gelu, x)
        assert compare(torch.cat, [x, meta((4, 8))])
    with torch.inference_mode():
        assert compare(torch.add, meta((4, 8)), 1.0)


def test_subclasses_and_non_meta_tensors_are_left_to_torch():
    class Sub(torch.Tensor):
        pass

    x = meta((4, 8)).as_subclass(Sub)
    assert torchlite._C.fast_meta(torch.add, "", None, (x, 1.0), None) is None
    y = torch.empty(4, 8)
    assert torchlite._C.fast_meta(torch.add, "", None, (y, 1.0), None) is None
    assert torchlite._C.fast_meta(torch.add, "", None, (meta((0, 8)), 1.0), None) is None


@pytest.mark.parametrize("grad", [False, True])
def test_linear_matches_meta_including_views_of_its_flattened_result(grad):
    answered = 0
    for dtype, layout in itertools.product(DTYPES, LAYOUTS):
        w = meta((6, 5), dtype, requires_grad=grad and dtype.is_floating_point)
        b = meta((6,), dtype)
        odd = meta((2, 1, 1, 5), dtype, "odd_unit_strides")
        answered += compare(F.linear, odd, w, b)
        answered += compare(F.linear, odd, w)
        for shape in [(4, 5), (2, 3, 5), (2, 3, 4, 5), (5,)]:
            x = meta(shape, dtype, layout if len(shape) == 4 else "contiguous")
            answered += compare(F.linear, x, w, b)
            answered += compare(F.linear, x, w)
            answered += compare(F.linear, x, w, bias=None)
        answered += compare(F.linear, meta((2, 3, 5), dtype, "transposed"), w, b)
        answered += compare(F.linear, meta((2, 3, 5), dtype), meta((5, 6), dtype, "transposed"), b)
        compare(F.linear, meta((2, 3, 5), dtype), w, meta((3, 6), dtype))
        compare(F.linear, meta((2, 3, 5), dtype), w, meta((6,), torch.float64))
    assert answered >= 40


@pytest.mark.parametrize("grad", [False, True])
def test_addmm_matches_meta_over_dtypes_layouts_and_bias_shapes(grad):
    answered = 0
    for dtype, layout in itertools.product(DTYPES, ["contiguous", "transposed", "sliced"]):
        x = meta((7, 5), dtype, layout, requires_grad=grad and dtype.is_floating_point)
        w = meta((5, 6), dtype, "transposed" if layout == "contiguous" else "contiguous")
        for b in [meta((6,), dtype), meta((7, 6), dtype), meta((1, 6), dtype), meta((7, 1), dtype)]:
            answered += compare(torch.addmm, b, x, w)
        compare(torch.addmm, meta((6,), dtype), x, meta((4, 6), dtype))  # torch raises
        compare(torch.addmm, meta((5,), dtype), x, w)  # the bias does not broadcast
        compare(torch.addmm, meta((2, 7, 6), dtype), x, w)
        compare(torch.addmm, meta((6,), torch.float64), x, w)
        compare(torch.addmm, meta((6,), dtype), x, w, beta=0.5, alpha=2)
    assert answered >= 4 * 3 * 4


@pytest.mark.parametrize("grad", [False, True])
def test_attention_matches_meta_over_layouts_masks_and_arguments(grad):
    sdpa = F.scaled_dot_product_attention
    answered = 0
    for dtype in [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64]:
        rg = grad and dtype.is_floating_point
        q4 = meta((2, 3, 5, 8), dtype, requires_grad=rg)
        # a query sliced from a packed projection and transposed (GPT-2's layout)
        packed = meta((2, 5, 3 * 24), dtype).split(24, dim=2)[0]
        q_view = packed.view(2, 5, 3, 8).transpose(1, 2)
        k4, v4 = meta((2, 3, 7, 8), dtype), meta((2, 3, 7, 6), dtype, "transposed")
        for q in [q4, q_view]:
            answered += compare(sdpa, q, k4, v4)
            answered += compare(sdpa, q, k4, v4, is_causal=True)
            answered += compare(sdpa, q, k4, v4, None, 0.0, False, scale=0.25)
            compare(sdpa, q, k4, v4, None, 0.0, False, 0.25)  # scale is keyword-only
            answered += compare(sdpa, q, k4, v4, attn_mask=None, dropout_p=0.0, scale=None)
            for mask in [
                meta((7,), torch.bool),
                meta((5, 7), torch.bool),
                meta((2, 1, 5, 7), torch.bool),
                meta((2, 1, 5, 7), dtype),
                meta((5, 7), dtype, "expanded"),
            ]:
                answered += compare(sdpa, q, k4, v4, attn_mask=mask)
                compare(sdpa, q, k4, v4, attn_mask=mask, is_causal=True)  # torch raises
            compare(sdpa, q, k4, v4, attn_mask=meta((5, 6), torch.bool))  # no broadcast
            compare(sdpa, q, k4, v4, attn_mask=meta((5, 7), torch.int32))
        answered += compare(
            sdpa, meta((4, 5, 8), dtype), meta((4, 7, 8), dtype), meta((4, 7, 2), dtype)
        )
        compare(sdpa, q4, meta((2, 3, 7, 4), dtype), v4)  # head sizes differ: torch raises
        compare(sdpa, q4, k4, meta((2, 3, 6, 6), dtype))  # key and value lengths differ
        compare(sdpa, q4, meta((1, 3, 7, 8), dtype), meta((1, 3, 7, 6), dtype))  # broadcast
        compare(sdpa, q4, k4.to(torch.float32 if dtype != torch.float32 else torch.float16), v4)
        compare(
            sdpa,
            meta((2, 4, 5, 8), dtype),
            meta((2, 2, 7, 8), dtype),
            meta((2, 2, 7, 6), dtype),
            enable_gqa=True,
        )
        compare(sdpa, meta((5, 8), dtype), meta((7, 8), dtype), meta((7, 6), dtype))
    assert answered >= 4 * (2 * 9 + 1)


@pytest.mark.parametrize("grad", [False, True])
def test_grouped_query_attention_matches_meta_over_heads_masks_and_arguments(grad):
    """enable_gqa=True (Llama's and Mistral's attention): key/value heads dividing the query's
    are answered in C++; forms torch's meta path broadcasts or rejects are left to it."""
    sdpa = F.scaled_dot_product_attention
    answered = 0
    for dtype in [torch.float16, torch.bfloat16, torch.float32]:
        rg = grad and dtype.is_floating_point
        for hq, hkv, lq, lk in [
            (4, 2, 5, 7),
            (4, 1, 1, 9),
            (6, 3, 8, 8),
            (4, 4, 3, 3),
            (8, 2, 2, 6),
        ]:
            q = meta((2, hq, lq, 8), dtype, requires_grad=rg)
            packed = meta((2, lq, hq * 8 + 16), dtype).split(hq * 8, dim=2)[0]
            q_view = packed.view(2, lq, hq, 8).transpose(1, 2)  # a projection's heads
            k = meta((2, hkv, lk, 8), dtype)
            v_t = meta((2, hkv, lk, 6), dtype, "transposed")
            v = meta((2, hkv, lk, 6), dtype)
            for qq, vv in [(q, v), (q_view, v_t)]:
                for kw in [
                    {},
                    {"is_causal": True},
                    {"is_causal": True, "scale": 0.35},
                    {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None},
                    {"attn_mask": meta((lq, lk), torch.bool)},
                    {"attn_mask": meta((2, 1, lq, lk), dtype)},
                    {"attn_mask": meta((2, hq, lq, lk), torch.bool)},
                    {"attn_mask": meta((lq, lk), dtype, "expanded")},
                ]:
                    answered += compare(sdpa, qq, k, vv, enable_gqa=True, **kw)
                    answered += compare(sdpa, qq, k, vv, None, 0.0, kw.get("is_causal", False),
                                        enable_gqa=True, scale=kw.get("scale"))  # fmt: skip
                    compare(
                        sdpa, qq, k, vv, enable_gqa=False, **kw
                    )  # torch raises unless hq == hkv
            if hkv > 1:  # key/value masks at the key/value heads do not broadcast: torch raises
                compare(sdpa, q, k, v, enable_gqa=True, attn_mask=meta((2, hkv, lq, lk)))
            compare(sdpa, q, k, v, attn_mask=meta((lq, lk)), is_causal=True, enable_gqa=True)
        # heads that do not divide, key and value heads that differ, 3-d "heads": left to torch
        q4 = meta((2, 4, 5, 8), dtype)
        assert not compare(sdpa, q4, meta((2, 3, 7, 8), dtype), meta((2, 3, 7, 6), dtype),
                           enable_gqa=True)  # fmt: skip
        assert not compare(sdpa, q4, meta((2, 8, 7, 8), dtype), meta((2, 8, 7, 6), dtype),
                           enable_gqa=True)  # fmt: skip
        assert not compare(sdpa, q4, meta((2, 2, 7, 8), dtype), meta((2, 1, 7, 6), dtype),
                           enable_gqa=True)  # fmt: skip
        assert not compare(sdpa, q4, meta((1, 2, 7, 8), dtype), meta((1, 2, 7, 6), dtype),
                           enable_gqa=True)  # fmt: skip
        assert not compare(sdpa, meta((4, 5, 8), dtype), meta((2, 7, 8), dtype),
                           meta((2, 7, 6), dtype), enable_gqa=True)  # fmt: skip
        assert not compare(sdpa, q4, meta((2, 2, 7, 8), dtype), meta((2, 2, 7, 6), dtype),
                           enable_gqa=1)  # fmt: skip
    assert answered >= 3 * 5 * 2 * 8 * 2


def test_check_reports_any_difference_as_internal_error():
    x = meta((4, 8))
    torchlite._C.check_fast_meta("add", x, meta((4, 8)))
    for other in [meta((8, 4)).t(), meta((4, 8), torch.float64), meta((4, 8), requires_grad=True)]:
        with pytest.raises(torchlite.InternalError, match="fast meta inference of add differs"):
            torchlite._C.check_fast_meta("add", x, other)
    with pytest.raises(torchlite.InternalError, match="differs"):
        torchlite._C.check_fast_meta("t", x, meta((8, 4)).t())  # a view, not a fresh tensor


def test_compiled_models_match_eager_with_every_fast_answer_checked(monkeypatch):
    monkeypatch.setattr(torchlite.config, "check_meta", True)
    from helpers import check

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(16)
            self.up = torch.nn.Linear(16, 32)
            self.down = torch.nn.Linear(32, 16)

        def forward(self, x, mask):
            h = self.down(F.gelu(self.up(self.norm(x))))
            h = h.masked_fill(mask, 0.0).softmax(-1) + torch.where(x > 0, x, 0.1 * x)
            s = torch.cat([h, x.clamp(-1, 1)], -1).sum(-1, keepdim=True)
            return (h * s.rsqrt().abs()).tril(), s.mean(), (x.amax(1) > 0).sum()

    torch.manual_seed(0)
    m = Block()
    for shape in [(2, 5, 16), (3, 7, 16)]:
        check(m, torch.randn(shape), torch.rand(shape) > 0.5)
        with torch.no_grad():
            check(m, torch.randn(shape), torch.rand(shape) > 0.5)


def test_fresh_process_compiles_pointwise_and_mlp_without_importing_dynamo():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    script = """
import sys, torch, torchlite
import torch.nn.functional as F
f = torchlite.compile(lambda x: (torch.sigmoid(x * 2 + 1) * x - torch.tanh(x)).relu())
x = torch.randn(8, 16)
torch.testing.assert_close(f(x), (torch.sigmoid(x * 2 + 1) * x - torch.tanh(x)).relu())
m = torch.nn.Sequential(torch.nn.LayerNorm(16), torch.nn.Linear(16, 32), torch.nn.GELU(),
                        torch.nn.Linear(32, 16))
with torch.no_grad():  # NOTE: in grad mode the compiled backward's joint trace imports it
    torch.testing.assert_close(torchlite.compile(m)(x), m(x))
print("torch._dynamo" in sys.modules)
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={**__import__("os").environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


NORM_LAYOUTS = LAYOUTS + ["odd_unit_strides"]
NORM_DTYPES = [torch.float32, torch.bfloat16, torch.int64]  # NOTE: torch's meta here is slow


def test_batch_and_group_norm_match_meta_over_layouts_modes_and_forms():
    answered = 0
    for dtype, layout in itertools.product(NORM_DTYPES, NORM_LAYOUTS):
        shape = (2, 1, 4, 1) if layout == "odd_unit_strides" else (2, 4, 3, 5)
        grad = dtype == torch.bfloat16  # NOTE: requires_grad with and without grad mode
        x = meta(shape, dtype, layout, requires_grad=grad)
        c = shape[1]
        w, b, m, v = (meta((c,), dtype) for _ in range(4))
        for training in [False, True]:
            answered += compare(F.batch_norm, x, m, v, w, b, training, 0.1, 1e-5)
            answered += compare(F.batch_norm, x, m, v, weight=w, bias=b, training=training)
            answered += compare(torch.batch_norm, x, w, b, m, v, training, 0.1, 1e-5, True)
            answered += compare(torch.batch_norm, x, None, None, m, v, training, None, 1e-3, False)
        answered += compare(F.batch_norm, x, m, meta((c + 1,), dtype))  # torch raises
        answered += compare(F.batch_norm, x, m, v, meta((c,), torch.float64))
        for groups in [2, 3]:
            answered += compare(F.group_norm, x, groups)
            answered += compare(F.group_norm, x, groups, w, b, 1e-6)
            answered += compare(torch.group_norm, x, groups, weight=w, bias=None, eps=1e-3)
    answered += compare(F.batch_norm, meta((1, 4)), None, None, training=True)  # one value
    answered += compare(F.batch_norm, meta((8, 4)), None, None, training=True)
    answered += compare(F.batch_norm, meta((8, 4)), None, None, training=False)  # torch raises
    answered += compare(F.batch_norm, meta((8, 4, 6)), meta((4,)), meta((4,)))
    answered += compare(F.group_norm, meta((8, 6, 5)), 3, meta((6,)), meta((6,)))
    with torch.no_grad():
        x = meta((2, 4, 3, 5), requires_grad=True)
        answered += compare(F.batch_norm, x, meta((4,)), meta((4,)), meta((4,)), None)
        answered += compare(F.group_norm, x, 2, meta((4,), requires_grad=True))
    answered += compare(F.batch_norm, meta((2, 4, 3)), None, None, meta((4,), requires_grad=True))
    answered += compare(F.batch_norm, meta((2, 4)), meta((4,), requires_grad=True), meta((4,)))
    assert answered >= 30


def test_inplace_activation_returns_its_input_and_matches_meta():
    for dtype, layout in itertools.product(DTYPES, LAYOUTS):
        x = meta((2, 3, 4, 5), dtype, layout)
        for fn in [F.relu, F.silu, F.hardswish, F.relu6]:
            fast = torchlite._C.fast_meta(fn, "", None, (x,), {"inplace": True})
            if fast is not None:
                assert fast is x
            compare(fn, x, inplace=True)
    x = meta((4, 8))
    assert torchlite._C.fast_meta(F.relu, "", None, (x,), {"inplace": True}) is x
    expanded = meta((4, 8), layout="expanded")  # torch raises on an overlapping write
    assert not compare(F.relu, expanded, inplace=True)
    leaf = meta((4, 8), requires_grad=True)  # autograd's bookkeeping: left to torch
    assert torchlite._C.fast_meta(F.relu, "", None, (leaf,), {"inplace": True}) is None


def test_compiled_cnn_matches_eager_with_every_fast_answer_checked(monkeypatch):
    monkeypatch.setattr(torchlite.config, "check_meta", True)
    from helpers import check

    torch.manual_seed(0)
    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(inplace=True),
        torch.nn.GroupNorm(2, 8),
        torch.nn.ReLU(inplace=True),
    ).eval()
    x = torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last)
    with torch.no_grad():
        check(m, x)


@pytest.mark.parametrize("grad", [False, True])
def test_gather_matches_meta_over_dtypes_layouts_dims_and_forms(grad):
    answered = 0
    for dtype, layout, index_layout in itertools.product(
        DTYPES, ["contiguous", "transposed", "sliced"], ["contiguous", "transposed", "expanded"]
    ):
        x = meta((4, 6, 5), dtype, layout, requires_grad=grad and dtype.is_floating_point)
        for dim, shape in [(0, (3, 6, 5)), (1, (4, 9, 5)), (-1, (2, 3, 7)), (2, (4, 6, 1))]:
            index = meta(shape, torch.int64, index_layout)
            answered += compare(torch.gather, x, dim, index)
            answered += compare(torch.gather, x, dim, index=index)
            answered += compare("gather", x, dim, index, method="gather")
        compare(torch.gather, x, 1, meta((5, 2, 5), torch.int64))  # torch raises: 5 > 4
        compare(torch.gather, x, 1, meta((4, 2), torch.int64))  # another rank
        compare(torch.gather, x, 1, meta((4, 2, 5), torch.int32))  # not int64
        compare(torch.gather, x, 3, meta((4, 2, 5), torch.int64))  # no such dim
        compare(torch.gather, x, 1, meta((4, 2, 5), torch.int64), sparse_grad=True)
    assert answered >= 3 * 4 * 3 * 3 * 6


def test_bert_new_lengths_gather_without_python_meta():
    transformers = pytest.importorskip("transformers")
    import collections
    import sys

    cfg = transformers.BertConfig(
        num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=4,
        vocab_size=100, max_position_embeddings=64,
    )  # fmt: skip
    model = transformers.BertModel(cfg).eval()
    torchlite.reset()
    compiled = torchlite.compile(model)
    with torch.no_grad():
        for t in (5, 9):
            compiled(torch.randint(0, 100, (2, t)))
        calls = collections.Counter()

        def profile(frame, event, arg):
            if event == "call" and "_meta_registrations" in frame.f_code.co_filename:
                calls[frame.f_code.co_name] += 1

        x = torch.randint(0, 100, (2, 13))
        before = torchlite.counters()["size_instances"]
        sys.setprofile(profile)
        try:
            out = compiled(x)
        finally:
            sys.setprofile(None)
        assert torchlite.counters()["size_instances"] == before + 1
        torch.testing.assert_close(out.last_hidden_state, model(x).last_hidden_state)
    assert calls["meta_gather"] == 0, calls
