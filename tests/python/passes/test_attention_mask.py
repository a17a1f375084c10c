"""torchlite/_attention_mask.py: the additive form of a boolean attention mask, made once for
every attention that reads it, must give torch's own results exactly (CUDA graphs use it; the
helper itself runs anywhere)."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from torchlite._attention_mask import shared_additive_mask


def _inputs(dtype, fully_masked_rows):
    q, k, v = (torch.randn(2, 3, 24, 16, dtype=dtype) for _ in range(3))
    mask = torch.rand(2, 1, 24, 24) > 0.4
    mask[1, :, :fully_masked_rows] = False
    return q, k, v, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fully_masked_rows", [0, 3])
def test_additive_mask_gives_torchs_math_attention_bit_for_bit(dtype, fully_masked_rows):
    q, k, v, mask = _inputs(dtype, fully_masked_rows)
    with sdpa_kernel([SDPBackend.MATH]):
        additive = shared_additive_mask(mask, q, k, v, scale=0.3)
        assert additive.dtype == dtype and additive.shape == mask.shape
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
        actual = F.scaled_dot_product_attention(q, k, v, attn_mask=additive, scale=0.3)
    assert torch.equal(actual.isnan(), expected.isnan())
    assert torch.equal(actual.nan_to_num(), expected.nan_to_num())


def test_mask_is_kept_where_the_backend_fill_is_not_known():
    # CPU's default (flash) backend is not one the helper learns a fill for
    q, k, v, mask = _inputs(torch.float32, 2)
    assert shared_additive_mask(mask, q, k, v) is mask


def test_meta_inputs_give_the_additive_masks_metadata():
    q, k, v, mask = (t.to("meta") for t in _inputs(torch.bfloat16, 0))
    out = shared_additive_mask(mask, q, k, v)
    assert out.device.type == "meta" and out.dtype == torch.bfloat16 and out.shape == mask.shape


def test_probe_tensors_are_laid_out_as_the_real_ones():
    from torchlite._attention_mask import _probe_mask, _probe_values

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 24, 3, 16, dtype=torch.bfloat16).transpose(1, 2)  # heads of a projection
    pq = _probe_values(q, gen)
    assert pq.shape == q.shape and pq.stride() == q.stride() and pq.dtype == q.dtype
    assert pq.float().std() > 0.5
    mask = (torch.rand(2, 1, 24, 24) > 0.5).expand(2, 3, 24, 24)
    pm = _probe_mask(mask, gen)
    assert pm.shape == mask.shape and pm.stride()[1] == 0  # the head axis stays broadcast
    assert not pm[..., 0, :].any() and pm[..., 1, :].all()  # a fully masked row, a full one
    # a mask broadcast over its query rows still gets rows of its own in the probe
    rows = (torch.rand(2, 1, 1, 24) > 0.5).expand(2, 1, 24, 24)
    pr = _probe_mask(rows, gen)
    assert not pr[..., 0, :].any() and pr[..., 1, :].all()
