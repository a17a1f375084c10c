"""One additive form of a boolean attention mask that several attentions read.

`scaled_dot_product_attention` turns a boolean mask into an additive one on
every call (a `where` and two small tensors: ~40 us of host time and a kernel
per layer of a transformer). The compiled graph makes that additive mask once
per run, with the fill value torch itself would use, and hands it to every
attention that read the boolean mask (passes/cuda_layouts.cpp).

The fill depends on the backend torch picks (cuDNN fills with a finite value
in some releases, the others with -inf), and a fully masked row comes out
differently for each. So the fill is learned from torch: once per backend,
device and dtype, a small attention with a fully masked row is run with the
boolean mask and with each candidate; a candidate is used only if it gives
exactly torch's result, else the boolean mask is passed on unchanged. The probe
has the first call's shapes and layouts (with a fully masked row in its mask), so
the kernel plan cuDNN builds for it is the model's own.
"""

import math

import torch
import torch.nn.functional as F

_CANDIDATE_FILLS = (-math.inf, -65504.0)
_fills = {}  # (backend, device, dtype) -> fill, or None: keep the boolean mask


def _same(a, b):
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


def _additive(mask, fill, dtype):
    # NOTE: the expression torch's own conversion uses, so the values are the same bits.
    zero = torch.scalar_tensor(0.0, dtype=dtype, device=mask.device)
    return torch.where(mask.logical_not(), fill, zero)


def _probe_values(like, gen):
    """Random values laid out as `like` (same sizes and strides; broadcast dimensions stay
    broadcast), so torch picks the same kernel for the probe as for the real call and cuDNN
    builds its plan once for both."""
    if 0 not in like.stride():
        t = torch.empty_strided(like.size(), like.stride(), dtype=like.dtype, device=like.device)
        return t.normal_(generator=gen)
    base = [1 if st == 0 else n for n, st in zip(like.shape, like.stride())]
    return torch.randn(base, generator=gen, device=like.device, dtype=like.dtype).expand(like.shape)


def _probe_mask(mask, gen):
    """A boolean mask shaped as `mask`, broadcast where it is except in its last two dimensions,
    with a fully masked row (where the fills differ) and a fully unmasked one."""
    if mask.dim() < 2 or mask.shape[-2] < 2 or mask.shape[-1] < 2:
        shape = (1, 1, 64, 64)  # too small to hold both rows: a probe of its own
        base = shape
    else:
        shape = mask.shape
        lead = [1 if st == 0 else n for n, st in zip(mask.shape[:-2], mask.stride()[:-2])]
        base = (*lead, *mask.shape[-2:])
    m = torch.rand(base, generator=gen, device=mask.device) > 0.5
    m[..., 0, :] = False
    m[..., 1, :] = True
    return m.expand(shape)


def _learn_fill(backend, mask, query, key, value, kw):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = {
        int(SDPBackend.MATH): SDPBackend.MATH,
        int(SDPBackend.EFFICIENT_ATTENTION): SDPBackend.EFFICIENT_ATTENTION,
        int(SDPBackend.CUDNN_ATTENTION): SDPBackend.CUDNN_ATTENTION,
    }.get(backend)
    if chosen is None:
        return None
    gen = torch.Generator(device=query.device).manual_seed(0)
    probe_mask = _probe_mask(mask, gen)
    if probe_mask.shape == mask.shape:
        # NOTE: the real shapes, so the plan cuDNN compiles here (~0.3 s the first time on a
        # machine) is the one the model's attentions use.
        q, k, v = (_probe_values(t, gen) for t in (query, key, value))
    else:
        shape = (1, 2, 64, query.shape[-1])
        q, k, v = (
            torch.randn(shape, generator=gen, device=query.device, dtype=query.dtype)
            for _ in range(3)
        )
        kw = {"scale": kw.get("scale")}
    try:
        with sdpa_kernel([chosen]):
            expected = F.scaled_dot_product_attention(q, k, v, attn_mask=probe_mask, **kw)
            for fill in _CANDIDATE_FILLS:
                got = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=_additive(probe_mask, fill, query.dtype), **kw
                )
                if _same(got, expected):
                    return fill
    except RuntimeError:  # the backend refuses the probe's shape: keep the boolean mask
        return None
    return None


def shared_additive_mask(
    mask, query, key, value, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
):
    """`mask` (bool) as the additive mask torch would make for this attention, or
    `mask` itself where that cannot be matched exactly."""
    if query.device.type == "meta":  # trace time: the value's metadata
        return _additive(mask, -math.inf, query.dtype)
    kw = {"scale": scale, "enable_gqa": enable_gqa}
    backend = torch._fused_sdp_choice(query, key, value, mask, dropout_p, is_causal, **kw)
    key_ = (backend, query.device, query.dtype)
    if key_ not in _fills:
        _fills[key_] = _learn_fill(backend, mask, query, key, value, kw)
    fill = _fills[key_]
    if fill is None:
        return mask
    additive = _additive(mask, fill, query.dtype)
    # NOTE: an additive mask must not send torch to another backend than the boolean one.
    if torch._fused_sdp_choice(query, key, value, additive, dropout_p, is_causal, **kw) != backend:
        return mask
    return additive


def _real_like(t, device):
    """An uninitialised tensor on `device` with t's sizes, strides, offset and dtype (t may be
    a meta tensor): torch's backend choice reads only these."""
    span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0)
    base = torch.empty(t.storage_offset() + span, dtype=t.dtype, device=device)
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def runs_math(query, key, value, attn_mask, device, scale=None):
    """Whether scaled_dot_product_attention(query, key, value, attn_mask, scale=scale) on
    `device` runs torch's math path (no fused kernel takes it). The arguments may be meta
    tensors (compile time): tensors of their layouts are made on the device for the question
    (torch._fused_sdp_choice reads layouts and offsets, not values). False where torch cannot
    answer (the call keeps torch's own choice)."""
    try:
        q, k, v, m = (_real_like(t, device) for t in (query, key, value, attn_mask))
        choice = torch._fused_sdp_choice(q, k, v, m, 0.0, False, scale=scale, enable_gqa=False)
    except (RuntimeError, TypeError, ValueError):
        return False
    return choice == int(torch.nn.attention.SDPBackend.MATH)
