"""Dynamic shapes, layer 2: sizes read by the trace are symbolic ints (docs/internals/
dynamic-shapes.md). `b, t = x.shape[:2]`, `x.size(-1)`, arithmetic on them, views, `arange(t)`,
slices `[:t]` and factories of size t keep one size-generic entry: a new size replays the graph
with its size arguments recomputed, no capture (counters()["frames"] stays at 2). A decision on a
size (a branch, math.sqrt, range(n)) is a relation the entry keeps (`t > 8`, `d == 16`): a size
where it no longer holds captures again. Every size is checked against eager."""

import logging
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchlite
from torchlite import _C, config

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def _sweep(fn, make_args, sizes, compiled=None, **kw):
    """Runs `fn` compiled at each size against eager; returns (captures, size instances)."""
    compiled = compiled or torchlite.compile(fn, **kw)
    before = dict(torchlite.counters())
    for s in sizes:
        args = make_args(s)
        with torch.no_grad():
            torch.testing.assert_close(compiled(*args), fn(*args), atol=1e-4, rtol=1e-4)
    after = torchlite.counters()
    return after["frames"] - before["frames"], after["size_instances"] - before["size_instances"]


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention: sizes read from the input, views built from them, a causal mask
    sliced by t, a scale from k.size(-1)."""

    def __init__(self, c=32, nh=4, block=64):
        super().__init__()
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.n_head = nh
        self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class GPT2Like(nn.Module):
    def __init__(self, vocab=50, c=32, nh=4, block=64, layers=2):
        super().__init__()
        self.block_size = block
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(block, c)
        self.attn = nn.ModuleList(CausalSelfAttention(c, nh, block) for _ in range(layers))
        self.ln = nn.ModuleList(nn.LayerNorm(c) for _ in range(2 * layers))
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c))
            for _ in range(layers)
        )
        self.ln_f = nn.LayerNorm(c)
        self.head = nn.Linear(c, vocab, bias=False)

    def forward(self, idx):
        _b, t = idx.size()
        assert t <= self.block_size, f"length {t} over {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for i, attn in enumerate(self.attn):
            x = x + attn(self.ln[2 * i](x))
            x = x + self.mlp[i](self.ln[2 * i + 1](x))
        return self.head(self.ln_f(x))


class BertLike(nn.Module):
    """BERT's encoder pattern: an additive mask from attention_mask, heads by view/permute,
    the context back by reshape, positions from arange(t).expand(b, t)."""

    def __init__(self, vocab=50, h=32, nh=4, layers=2, max_pos=64):
        super().__init__()
        self.nh, self.hd = nh, h // nh
        self.tok = nn.Embedding(vocab, h)
        self.pos = nn.Embedding(max_pos, h)
        self.ln = nn.LayerNorm(h)
        self.qkv = nn.ModuleList(nn.Linear(h, 3 * h) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(h, h) for _ in range(layers))
        self.ffn = nn.ModuleList(
            nn.Sequential(nn.Linear(h, 2 * h), nn.GELU(), nn.Linear(2 * h, h))
            for _ in range(layers)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(h) for _ in range(2 * layers))

    def forward(self, input_ids, attention_mask):
        b, t = input_ids.shape
        pos = torch.arange(t).unsqueeze(0).expand(b, t)
        x = self.ln(self.tok(input_ids) + self.pos(pos))
        ext = (1.0 - attention_mask[:, None, None, :]) * -10000.0
        for i in range(len(self.qkv)):
            q, k, v = self.qkv[i](x).chunk(3, dim=-1)
            q = q.view(b, t, self.nh, self.hd).permute(0, 2, 1, 3)
            k = k.view(b, t, self.nh, self.hd).permute(0, 2, 1, 3)
            v = v.view(b, t, self.nh, self.hd).permute(0, 2, 1, 3)
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.hd) + ext
            ctx = (scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(b, t, -1)
            x = self.norms[2 * i](x + self.out[i](ctx))
            x = self.norms[2 * i + 1](x + self.ffn[i](x))
        return x


SEQ = [5, 9, 17, 3, 40, 64, 2]


def test_gpt2_like_sweep_of_lengths_captures_twice():
    torch.manual_seed(0)
    model = GPT2Like().eval()
    frames, instances = _sweep(model, lambda t: (torch.randint(0, 50, (2, t)),), SEQ)
    assert frames == 2, frames
    assert instances == len(SEQ) - 2, instances


def test_gpt2_like_batch_and_length_change_together():
    torch.manual_seed(1)
    model = GPT2Like(layers=1).eval()
    sizes = [(2, 5), (3, 9), (1, 12), (4, 4), (5, 31), (2, 64), (3, 2)]
    frames, instances = _sweep(model, lambda s: (torch.randint(0, 50, s),), sizes)
    # (2, 5) exact; (3, 9) generic; (1, 12): batch 1 is specialised (its own capture).
    assert frames == 3, frames
    assert instances == len(sizes) - 3, instances


def test_gpt2_like_length_over_the_assert_raises_as_eager():
    model = GPT2Like(layers=1, block=16).eval()
    compiled = torchlite.compile(model)
    with torch.no_grad():
        for t in [4, 6, 9]:
            idx = torch.randint(0, 50, (2, t))
            torch.testing.assert_close(compiled(idx), model(idx), atol=1e-4, rtol=1e-4)
        with pytest.raises(AssertionError, match="length 20 over 16"):
            compiled(torch.randint(0, 50, (2, 20)))


def test_bert_like_sweep_of_lengths_and_batches():
    torch.manual_seed(2)
    model = BertLike().eval()

    def make(s):
        b, t = s
        mask = torch.ones(b, t)
        mask[0, t // 2 :] = 0
        return torch.randint(0, 50, (b, t)), mask

    sizes = [(2, 6), (2, 13), (3, 7), (2, 40), (4, 3), (2, 64), (3, 21)]
    frames, instances = _sweep(model, make, sizes)
    assert frames == 2, frames
    assert instances == len(sizes) - 2, instances


def _views_from_shapes(x):
    b, t = x.shape[:2]
    d = x.size(-1)
    h = x.view(b, t, 2, d // 2).transpose(1, 2).reshape(b * 2, t, -1)
    scale = x.shape[-1] ** -0.5
    mask = torch.full((b, t), 0.5).tril(0)
    pos = torch.arange(t).float()
    y = h[:, : t - 1] * scale + pos[: t - 1, None]
    z = x[:, 1:].expand(b, t - 1, d) + mask[:, 1:, None]
    return y.sum(0) + z.sum(0)[:, : d // 2] * (t % 3) - (t // 2) + (-t) * 2


def test_views_and_factories_from_shapes_follow_new_sizes():
    frames, instances = _sweep(
        _views_from_shapes,
        lambda s: (torch.randn(s[0], s[1], 8),),
        [(2, 5), (3, 6), (4, 9), (2, 3)],
    )
    assert frames == 2 and instances == 2, (frames, instances)


def _branch(x):
    t = x.size(1)
    if t > 8:
        return x.sum(1) * 2 + t
    return x.mean(1) - t


def test_a_size_crossing_a_branch_threshold_recaptures_and_is_correct():
    sizes = [4, 5, 7, 10, 12, 3, 16, 6, 9]
    frames, instances = _sweep(_branch, lambda t: (torch.randn(2, t, 3),), sizes)
    # 4: exact; 5: generic entry (t > 8 is false); 10: t > 8 holds no more, captures the
    # other side; every other size is served by one of the two generic entries.
    assert frames == 3, frames
    assert instances == len(sizes) - 3, instances


def _loop(x):
    out = x[:, 0]
    for i in range(1, x.shape[1]):
        out = out + x[:, i]
    return out


def test_a_loop_over_a_size_specialises_it():
    frames, instances = _sweep(_loop, lambda t: (torch.randn(2, t),), [3, 4, 5, 4, 6])
    assert (frames, instances) == (4, 0), (frames, instances)


def _int_escape(x):
    n = int(x.shape[0])
    return x.sum() / float(n) + torch.ones(n).sum()


def test_int_and_float_of_a_size_specialise_it():
    frames, instances = _sweep(_int_escape, lambda n: (torch.randn(n, 4),), [3, 5, 7, 5])
    assert (frames, instances) == (3, 0), (frames, instances)


def _returns_size(x):
    return x * 2, x.shape[0] * 3


def test_a_size_returned_to_python_is_the_new_size():
    compiled = torchlite.compile(_returns_size)
    for n in [3, 5, 8, 5]:
        x = torch.randn(n, 2)
        got, want = compiled(x), _returns_size(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]


def _list_index(x, table=(10, 20, 30, 40, 50, 60, 70, 80, 90, 100)):
    return x * table[x.size(0)]


def test_a_size_used_as_a_list_index_specialises_it():
    frames, _ = _sweep(_list_index, lambda n: (torch.randn(n, 3),), [2, 3, 4, 5, 4])
    assert frames == 4, frames


def test_mark_dynamic_range_holds_with_symbolic_sizes():
    def fn(x):
        b, t = x.shape
        return x.view(b, t // 2, 2).sum(-1) + t

    def make(t):
        x = torch.randn(3, t)
        torchlite.mark_dynamic(x, 1, min=2, max=32)
        return (x,)

    compiled = torchlite.compile(fn)
    frames, instances = _sweep(fn, make, [4, 8, 32, 10], compiled=compiled)
    assert (frames, instances) == (1, 3), (frames, instances)
    x = torch.randn(3, 34)
    torchlite.mark_dynamic(x, 1, min=2, max=32)
    with pytest.raises(ValueError, match=r"L\['x'\]\.size\(1\) is 34, outside the range"):
        compiled(x)


def test_dynamic_false_still_captures_every_size():
    frames, instances = _sweep(
        _views_from_shapes, lambda t: (torch.randn(2, t, 8),), [4, 6, 9], dynamic=False
    )
    assert (frames, instances) == (3, 0)


def test_the_recompiles_log_names_the_failed_relation(monkeypatch, caplog):
    def branch(x):  # a code object of its own: no entries from the tests above
        return _branch(x)

    monkeypatch.setattr(config, "logs", "recompiles")
    compiled = torchlite.compile(branch)
    with caplog.at_level(logging.INFO, logger="torchlite"):
        for t in [4, 5, 11]:
            compiled(torch.randn(2, t, 3))
    messages = [r.getMessage() for r in caplog.records]
    # NOTE: s0 is the input's size: the relation is a SIZE_RELATION guard, checked in C++.
    assert any("relied on s0 <= 8" in m and "false at these sizes" in m for m in messages), messages


def test_explain_lists_the_size_relations_of_a_generic_entry():
    x = torch.randn(2, 5, 3)
    torchlite.mark_dynamic(x, 1)
    guards = torchlite.explain(_branch)(x).guards
    assert any("SIZE_RELATION s0 <= 8" in g for g in guards), guards


def _opless_branch(x):
    return "long" if x.size(1) > 8 else "short"


def test_an_opless_frame_serves_every_size_while_its_relations_hold():
    compiled = torchlite.compile(_opless_branch)
    before = torchlite.counters()["frames"]
    for t in [4, 5, 7, 10, 12, 3, 16, 9, 6]:
        x = torch.randn(2, t)
        assert compiled(x) == _opless_branch(x), t
    # 4: exact; 5: one entry for every size where t <= 8 (a SIZE_RELATION guard); 10: the
    # relation fails, a second entry for t > 8; the rest are served by the two.
    assert torchlite.counters()["frames"] - before == 3


def _cast_and_dropout(ids, weight):
    h = F.dropout(weight.float(), 0.1, training=False).type(torch.float32)
    return F.embedding(ids, h).sum(-1).contiguous() * 2


def test_ops_returning_their_argument_by_dtype_stay_size_generic():
    w = torch.randn(9, 6)
    frames, _ = _sweep(
        lambda ids: _cast_and_dropout(ids, w),
        lambda t: (torch.randint(0, 9, (2, t)),),
        [3, 5, 8, 11, 4],
    )
    assert frames == 2, frames


def _embedding_only(ids, w):
    return F.embedding(ids, w)


def test_a_graph_with_nothing_to_fuse_serves_every_size_op_by_op():
    w = torch.randn(9, 6)
    frames, _ = _sweep(
        lambda ids: _embedding_only(ids, w), lambda t: (torch.randint(0, 9, (2, t)),), [3, 5, 8, 4]
    )
    assert frames == 2, frames
    # NOTE: an index out of range raises eager's error at a new size, not a wrong answer.
    compiled = torchlite.compile(lambda ids: _embedding_only(ids, w))
    for t in [3, 5]:
        compiled(torch.randint(0, 9, (2, t)))
    with pytest.raises(IndexError):
        compiled(torch.full((2, 7), 20))


def _relations_of_two_inputs(x, d):
    b, t, c = x.shape  # three symbols of one input, read together by the guards
    y = d["y"]  # a symbol behind a nested source
    if t > 4 and c % 2 == 0 and y.size(0) == b:
        return x.reshape(b * t, c) * 2 + y.sum()
    return x.sum() - y.sum()


def test_relations_over_sizes_of_several_inputs_hold_at_every_size():
    compiled = torchlite.compile(_relations_of_two_inputs)
    before = torchlite.counters()["frames"]
    cases = [(2, 6, 4, 2), (3, 7, 4, 3), (3, 9, 6, 3), (2, 3, 4, 2), (4, 8, 4, 4), (3, 8, 5, 3)]
    cases += [(3, 6, 4, 2), (5, 10, 8, 5), (2, 6, 4, 2)]
    for b, t, c, rows in cases:
        x, d = torch.randn(b, t, c), {"y": torch.randn(rows, 3)}
        with torch.no_grad():
            torch.testing.assert_close(compiled(x, d), _relations_of_two_inputs(x, d))
    # NOTE: the first two cases capture (exact, then size-generic); each case where a relation
    # comes out the other way captures once more; cases on a known side capture nothing.
    assert torchlite.counters()["frames"] - before <= 5


def _split_sum_then_sizes(x):
    s = x.mean()  # a whole-tensor mean of long rows: split_reductions adds nodes before y
    y = x * 2
    b, t = y.shape  # symbols of a computed tensor (y), found by their node's position
    return y.view(b, t // 4, 4).sum(-1) * s + t


def test_sizes_of_a_value_after_a_node_the_passes_insert_stay_bound_to_it():
    # compile_graph's passes insert nodes (the split mean's partials) ahead of y: the symbols'
    # node positions are taken before them, so each new size replays with y's sizes, compiles,
    # and matches eager (they pointed past y: the view raised at every new size and ran eagerly).
    sizes = [512, 640, 768, 896, 1024]
    captures, instances = _sweep(_split_sum_then_sizes, lambda n: (torch.randn(64, n),), sizes)
    assert captures == 2
    assert instances == len(sizes) - 2


def _renames_a_keyword(func):
    # transformers' deprecate_kwarg: looks a key up in **kwargs and hands them all on.
    def wrapped(*args, **kwargs):
        if "old_length" in kwargs:
            kwargs["length"] = kwargs.pop("old_length")
        return func(*args, **kwargs)

    return wrapped


@_renames_a_keyword
def _causal_ones(length, dtype):
    return torch.ones(length, length, dtype=dtype).tril()


def _sizes_through_kwargs(x):
    return torch.matmul(x, _causal_ones(length=x.size(1), dtype=x.dtype)) * 2


def test_a_key_looked_up_in_kwargs_holding_sizes_keeps_them_symbolic():
    # `key in kwargs` reads the keys only and `f(*args, **kwargs)` moves the values: the sizes
    # among them stay symbolic (before, each became a relation `s == value` and every length
    # captured again: transformers 5.17's causal mask, built through deprecate_kwarg).
    sizes = [4, 9, 13, 6, 17, 30]
    captures, instances = _sweep(_sizes_through_kwargs, lambda n: (torch.randn(3, n),), sizes)
    assert captures == 2
    assert instances == len(sizes) - 2


def _size_in_a_tuple(x):
    t = x.size(1)
    return x * 2 if t in (4, 6) else x * 3


def test_a_size_looked_up_in_a_tuple_is_a_relation():
    # `t in (4, 6)` compares t with each item: the outcome holds only where t keeps its value.
    captures, _ = _sweep(_size_in_a_tuple, lambda n: (torch.randn(2, n),), [4, 5, 6, 7, 6, 4])
    assert captures >= 3


def _specialised_size_of_a_computed_tensor(x):
    y = x * 2
    n = int(y.size(1))  # int() specialises: the relation s == n, not checked by the guards
    return torch.matmul(y, torch.ones(n, n))


def test_the_recompiles_log_names_the_relation_behind_an_op_raising_at_new_sizes(
    monkeypatch, caplog
):
    monkeypatch.setattr(config, "logs", "recompiles")
    compiled = torchlite.compile(_specialised_size_of_a_computed_tensor)
    with caplog.at_level(logging.INFO, logger="torchlite"):
        for t in [4, 5, 11]:
            x = torch.randn(2, t)
            torch.testing.assert_close(compiled(x), _specialised_size_of_a_computed_tensor(x))
    raised = [r.getMessage() for r in caplog.records if "raised at the new sizes" in r.getMessage()]
    assert raised and all("the trace relied on s" in m and "== 5" in m for m in raised), raised
