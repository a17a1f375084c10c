"""Model code that checks its inputs with `assert` on tensor values, in the style of transformers'
XLM/FlauBERT embeddings (written from scratch). A separate module: pytest rewrites the asserts of
test modules, and these must stay plain `assert` statements."""

import torch
from torch import nn


def get_masks(slen, lengths, causal, padding_mask=None):
    alen = torch.arange(slen, dtype=torch.long, device=lengths.device)
    if padding_mask is not None:
        mask = padding_mask
    else:
        assert lengths.max().item() <= slen
        mask = alen < lengths[:, None]
    bs = lengths.size(0)
    if causal:
        attn_mask = alen[None, None, :].repeat(bs, slen, 1) <= alen[None, :, None]
    else:
        attn_mask = mask
    assert mask.size() == (bs, slen)
    return mask, attn_mask


class TinyXLM(nn.Module):
    def __init__(self, vocab=32, dim=16, pad_index=2, causal=False):
        super().__init__()
        self.pad_index = pad_index
        self.causal = causal
        self.embeddings = nn.Embedding(vocab, dim, padding_idx=pad_index)
        self.position_embeddings = nn.Embedding(64, dim)
        self.layer_norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, input_ids, lengths=None):
        bs, slen = input_ids.size()
        if lengths is None:
            lengths = (input_ids != self.pad_index).sum(dim=1).long()
        assert lengths.size(0) == bs
        assert lengths.max().item() <= slen
        mask, attn_mask = get_masks(slen, lengths, self.causal)
        positions = torch.arange(slen, device=input_ids.device)[None, :]
        h = self.embeddings(input_ids) + self.position_embeddings(positions)
        h = self.layer_norm(h) * mask.unsqueeze(-1).to(h.dtype)
        scores = h @ h.transpose(1, 2)
        keep = attn_mask if self.causal else attn_mask[:, None, :]
        scores = scores.masked_fill(~keep.expand_as(scores), -1e4)
        return self.proj(torch.softmax(scores, -1) @ h)
