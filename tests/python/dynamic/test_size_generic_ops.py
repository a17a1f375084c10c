"""Which ops a size-generic entry serves at every size (frame/size_generic.cpp, op_blocker): any
torch op, Tensor method or Python operator on tensors that writes no operand, not a hand-kept
list of names. transformers 5.17 builds its decoder masks with `and_masks`/`or_masks` closures
(`result & mask(...)`) and checks `len(mask.shape) == 4`: operator.and_ was missing from the
list and len() pinned every size of the mask, so generate() captured once per new token.

Each program runs at several lengths: results equal eager's, and at most two captures (the first
call, then the automatic recompile that makes the entry size-generic). Counters are process-wide
(torchlite.reset() keeps them): each test takes their difference."""

import pytest
import torch
import torch.nn.functional as F

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)

LENGTHS = [5, 9, 6, 13, 8]


def _captures(fn, make_args, lengths=LENGTHS):
    """Captures of `fn` compiled over `lengths`, each call checked against eager."""
    torchlite.reset()
    compiled = torchlite.compile(fn)
    before = torchlite.counters()["frames"]
    for n in lengths:
        args = make_args(n)
        torch.testing.assert_close(compiled(*args), fn(*args), atol=1e-5, rtol=1e-5)
    return torchlite.counters()["frames"] - before


# --- masks as transformers writes them (masking_utils.py) ------------------------------------


def and_masks(*fns):
    def and_mask(b, h, q, kv):
        result = q.new_ones((), dtype=torch.bool)
        for m in fns:
            result = result & m(b, h, q, kv).to(result.device)
        return result

    return and_mask


def or_masks(*fns):
    def or_mask(b, h, q, kv):
        result = q.new_zeros((), dtype=torch.bool)
        for m in fns:
            result = result | m(b, h, q, kv).to(result.device)
        return result

    return or_mask


def causal(b, h, q, kv):
    return kv <= q


def sliding(window):
    def inner(b, h, q, kv):
        return q - kv < window

    return inner


def padding(pm):
    def inner(b, h, q, kv):
        return pm[b, kv]

    return inner


def _grid(x, past):
    """batch, head, query and key index tensors broadcast to [b, 1, q, kv] (query at the cache's
    end), as `_non_vmap_expansion_sdpa` makes them."""
    b, q = x.shape[0], x.shape[1]
    kv = past.shape[1] + q
    return (
        torch.arange(b, device=x.device)[:, None, None, None],
        torch.arange(1, device=x.device)[None, :, None, None],
        (torch.arange(q, device=x.device) + past.shape[1])[None, None, :, None],
        torch.arange(kv, device=x.device)[None, None, None, :],
    )


def _scores(x, past, mask):
    # NOTE: a float result from the bool mask (the attention bias an SDPA mask becomes)
    s = torch.cat([past, x], 1).sum(-1)[:, None, None, :]
    return torch.where(mask, s, torch.finfo(s.dtype).min)


def mask_and(x, past, pm):
    if isinstance(pm, torch.Tensor) and len(pm.shape) == 4:
        return pm
    m = and_masks(causal, padding(pm.to(torch.bool)))(*_grid(x, past))
    return _scores(x, past, m.expand(x.shape[0], -1, x.shape[1], -1))


def mask_or(x, past, pm):
    m = or_masks(causal, padding(pm.to(torch.bool)))(*_grid(x, past))
    return _scores(x, past, m)


def mask_sliding_invert_xor(x, past, pm):
    b, h, q, kv = _grid(x, past)
    m = and_masks(causal, sliding(3))(b, h, q, kv)
    m = ~(~m | ~pm.bool()[b, kv]) ^ (q == kv)
    return _scores(x, past, m)


def mask_bitwise_functions(x, past, pm):
    b, _, q, kv = _grid(x, past)
    m = torch.bitwise_and(kv <= q, pm.bool()[b, kv])
    m = torch.bitwise_or(m, torch.bitwise_xor(q == kv, kv > q + 100))
    return _scores(x, past, torch.bitwise_not(torch.bitwise_not(m)))


def mask_logical_functions(x, past, pm):
    b, _, q, kv = _grid(x, past)
    m = torch.logical_and(kv <= q, pm[b, kv])  # a long padding mask: logical_* take any dtype
    m = torch.logical_or(m, torch.logical_xor(q == kv, torch.logical_not(kv >= 0)))
    return _scores(x, past, m)


def mask_comparisons_and_where(x, past, pm):
    b, _, q, kv = _grid(x, past)
    keep = (kv < q) | (kv == q) & (kv != -1) & (q >= 0) & (q > -1)
    bias = torch.where(keep & pm.bool()[b, kv], 0.0, -1e4)
    return bias + torch.cat([past, x], 1).mean(-1)[:, None, None, :]


def mask_new_factories(x, past, pm):
    b, q = x.shape[0], x.shape[1]
    kv = past.shape[1] + q
    full = past.new_full((b, 1, q, kv), 2.0)
    zeros = x.new_zeros(b, 1, q, kv)
    ones = pm.new_ones(b, kv, dtype=torch.bool)
    m = (ones & pm.bool())[:, None, None, :].expand(b, 1, q, kv)
    return torch.where(m, full, zeros).masked_fill(~m, -3.0)


MASKS = [
    mask_and,
    mask_or,
    mask_sliding_invert_xor,
    mask_bitwise_functions,
    mask_logical_functions,
    mask_comparisons_and_where,
    mask_new_factories,
]


def _mask_args(n):
    # NOTE: one new token over a cache of n: the decoding step's shapes
    x = torch.randn(2, 1, 8)
    past = torch.randn(2, n, 8)
    pm = torch.ones(2, n + 1, dtype=torch.long)
    pm[1, : n // 2] = 0  # left padding in the second row
    return x, past, pm


@pytest.mark.parametrize("fn", MASKS, ids=[f.__name__ for f in MASKS])
def test_mask_programs_serve_every_cache_length_from_one_entry(fn):
    assert _captures(fn, _mask_args) <= 2


def _prefill_args(n):
    x = torch.randn(2, n, 8)
    past = torch.randn(2, 0, 8)
    pm = torch.ones(2, n, dtype=torch.long)
    pm[0, :2] = 0
    return x, past, pm


@pytest.mark.parametrize("fn", [mask_and, mask_or], ids=["and", "or"])
def test_mask_programs_serve_every_prompt_length_from_one_entry(fn):
    assert _captures(fn, _prefill_args) <= 2


def test_len_of_a_shape_keeps_the_sizes_symbolic():
    def rank_check(x):
        if len(x.shape) == 4:
            return x
        return x.cumsum(1) * len(x.shape)

    assert _captures(rank_check, lambda n: (torch.randn(3, n),)) <= 2


# --- op families: one entry for every length --------------------------------------------------


def _x(n):
    return (torch.randn(2, n, 6),)


def _xy(n):
    return torch.randn(2, n, 6), torch.randn(n, 1) + 3


UNARY = {
    "abs": lambda x: torch.abs(x) + x.abs(),
    "exp_log": lambda x: torch.exp(x) + torch.log1p(x.abs()) + x.expm1(),
    "trig": lambda x: torch.sin(x) * torch.cos(x) + torch.tan(x * 0.1) + torch.atan(x),
    "hyperbolic": lambda x: torch.sinh(x) + torch.cosh(x) + torch.asinh(x) + x.tanh(),
    "rounding": lambda x: torch.floor(x) + torch.ceil(x) + x.round() + x.trunc() + x.frac(),
    "roots": lambda x: torch.sqrt(x.abs()) + torch.rsqrt(x.abs() + 1) + x.square(),
    "special": lambda x: torch.erf(x) + torch.special.erfc(x) + torch.special.expit(x),
    "sign": lambda x: torch.sign(x) + torch.sgn(x) + torch.signbit(x).float(),
    "nan_to_num": lambda x: torch.nan_to_num(torch.log(x), nan=0.0, neginf=-5.0),
    "activations": lambda x: F.softplus(x) + F.mish(x) + F.hardswish(x) + F.elu(x) + F.selu(x),
    "clamp": lambda x: x.clamp(-0.5, 0.5) + torch.clamp_min(x, 0) + x.clip(max=1),
    "reciprocal": lambda x: torch.reciprocal(x.abs() + 1) + torch.neg(x) + (-x),
    "logit": lambda x: torch.logit(torch.sigmoid(x), eps=1e-6),
}


@pytest.mark.parametrize("fn", list(UNARY.values()), ids=list(UNARY))
def test_unary_math_serves_every_length(fn):
    assert _captures(fn, _x) <= 2


BINARY = {
    "arith": lambda x, y: (x + y) * (x - y) / y - 2 * x,
    "floor_mod": lambda x, y: torch.floor_divide(x, y) + torch.remainder(x, y) + torch.fmod(x, y),
    "minmax": lambda x, y: torch.maximum(x, y) + torch.minimum(x, y) + torch.fmax(x, y),
    "pow": lambda x, y: torch.pow(x.abs(), y) + x**2 + 2**x,
    "atan2_hypot": lambda x, y: torch.atan2(x, y) + torch.hypot(x, y) + torch.copysign(y, x),
    "lerp_addcmul": lambda x, y: torch.lerp(x, y.expand_as(x), 0.3) + torch.addcmul(x, x, y),
    "xlogy": lambda x, y: torch.xlogy(y, y) + torch.special.xlog1py(y, y) + x,
    "compare": lambda x, y: (x > y).float() + (x <= y).int() + torch.isclose(x, y).long(),
}


@pytest.mark.parametrize("fn", list(BINARY.values()), ids=list(BINARY))
def test_binary_pointwise_serves_every_length(fn):
    assert _captures(fn, _xy) <= 2


REDUCTIONS = {
    "sum_mean": lambda x: (
        x.sum(1) + x.mean(dim=1, keepdim=True).squeeze(1) + x.sum(-1).mean(1)[:, None]
    ),
    "amax_amin": lambda x: torch.amax(x, 1) - torch.amin(x, dim=1),
    "max_min_dim": lambda x: x.max(1).values + x.min(dim=1)[0] + x.max(1)[1].float(),
    "prod_norm": lambda x: torch.prod(x * 0.1 + 1, 1) + torch.linalg.vector_norm(x, dim=1),
    "var_std": lambda x: x.var(1) + torch.std(x, dim=1, unbiased=False) + torch.var_mean(x, 1)[0],
    "logsumexp": lambda x: torch.logsumexp(x, 1) + torch.softmax(x, 1).sum(1),
    "arg": lambda x: x.argmax(1).float() + torch.argmin(x, dim=1).float(),
    "all_any": lambda x: (x > 0).all(1).float() + (x > 1).any(dim=1).float(),
    "cumulative": lambda x: torch.cumsum(x, 1) + x.cumprod(1) * 0 + torch.logcumsumexp(x, 1),
    "sort_topk": lambda x: torch.sort(x, 1).values[:, :2] + torch.topk(x, 2, dim=1).values,
}


@pytest.mark.parametrize("fn", list(REDUCTIONS.values()), ids=list(REDUCTIONS))
def test_reductions_over_a_dim_serve_every_length(fn):
    assert _captures(fn, _x) <= 2


CASTS = {
    "methods": lambda x: x.double().float() + x.half().float() + x.bfloat16().float(),
    "ints": lambda x: (x * 4).int().float() + (x * 4).long().float() + x.bool().float(),
    "to": lambda x: x.to(torch.float64).to(dtype=torch.float32) + x.to(torch.int32),
    "type": lambda x: x.type(torch.int64).type_as(x) + x.type(torch.float16).float(),
}


@pytest.mark.parametrize("fn", list(CASTS.values()), ids=list(CASTS))
def test_casts_serve_every_length(fn):
    assert _captures(fn, _x) <= 2


VIEWS = {
    "view_symbolic": lambda x: x.view(x.shape[0], -1, 2, 3).transpose(1, 2).sum(-1),
    "unflatten_flatten": lambda x: x.unflatten(2, (2, 3)).flatten(1) * 2,
    "movedim_narrow": lambda x: torch.movedim(x, 1, 2).narrow(1, 1, 3).sum(-1),
    "data_movement": lambda x: torch.flip(x, [1]) + torch.roll(x, 1, 1) + x.repeat(1, 1, 1),
    "stack_chunk": lambda x: torch.stack([x, x * 2], 0).sum(0) + torch.cat(x.chunk(2, -1), -1),
    "pad": lambda x: F.pad(x, (1, 1)).sum(-1) + F.pad(x, (0, 0, 2, 0))[:, 2:].sum(-1),
}


@pytest.mark.parametrize("fn", list(VIEWS.values()), ids=list(VIEWS))
def test_views_with_symbolic_sizes_serve_every_length(fn):
    assert _captures(fn, _x) <= 2


# --- what still keeps the sizes exact -----------------------------------------------------------


def test_an_in_place_op_on_a_new_tensor_serves_every_length():
    """Writes are size-generic (tests/python/dynamic/test_in_place_sizes.py): this one overlaps
    nothing it reads at any length."""

    def inplace(x):
        y = x * 2
        y.add_(1)
        return y.sum(-1)

    assert _captures(inplace, _x) == 2


def test_an_out_tensor_keeps_the_sizes_exact_and_stays_correct():
    # NOTE: eager resizes an out= tensor whose size does not fit: a change of the tensor object
    def with_out(x):
        y = torch.empty_like(x)
        torch.mul(x, 2, out=y)
        return y.sum(-1)

    assert _captures(with_out, _x) == len(LENGTHS)


def test_a_view_or_copy_answer_that_changes_with_the_length_captures_again():
    # x[:, :4] of [2, n] is contiguous (flatten: a view) only at n == 4
    def flat(x):
        return x[:, :4].flatten() * 2

    frames = _captures(flat, lambda n: (torch.randn(2, n),), [6, 9, 4, 7])
    assert 2 <= frames <= 4
