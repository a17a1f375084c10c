"""transformers builds its attention masks from aranges, `q_idx.new_ones(())` and an advanced
index `padding_mask[batch_idx, kv_idx]` (masking_utils.sdpa_mask): all of it lowers into two
kernels (csrc/passes/lower_factory.cpp, lower_data.cpp `tensor_index`) instead of torch calls and
small kernels per mask: the padding mask's bool cast (a gathered value is read from memory) and
the mask itself. On the CPU an advanced index is lowered only where the graph proves its
indices in bounds (torch raises IndexError there, a kernel cannot). Also: eval-mode dropout and a
linear's `view(...).transpose(1, 2)` feeding an attention are no torch calls of their own at run
time (passes/view_facts.cpp, memory_plan.cpp)."""

import pytest
import torch
import torch.nn.functional as F
from helpers import check

import torchlite
from torchlite import _C

needs_cpu_kernels = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


def summary(fn, *args):
    torchlite.reset()
    return _C.partition_summary(torchlite.explain(fn)(*args).graphs[0])


def check_exact(fn, *args):
    torchlite.reset()
    expected = fn(*args)
    got = torchlite.compile(fn)(*args)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert torch.equal(got, expected), (got, expected)


def padding_mask(batch, n, lengths):
    m = torch.zeros(batch, n, dtype=torch.int64)
    for b, k in enumerate(lengths):
        m[b, :k] = 1
    return m


# masking_utils.sdpa_mask without transformers: a causal mask and a padding mask read by an
# advanced index of aranges, one head, broadcast over the batch.
def padded_causal(attention_mask, q_offset=0):
    batch, kv = attention_mask.shape
    padding = attention_mask.to(torch.bool)
    b = torch.arange(batch)[:, None, None, None]
    h = torch.arange(1)[None, :, None, None]
    q = (torch.arange(kv) + q_offset)[None, None, :, None]
    k = torch.arange(kv)[None, None, None, :]
    del h
    mask = q.new_ones((), dtype=torch.bool) & (k <= q)
    mask = mask & padding[b, k]
    return mask.expand(batch, -1, kv, kv)


@needs_cpu_kernels
@pytest.mark.parametrize("batch,n", [(2, 16), (3, 7), (1, 5)])
def test_a_padded_causal_mask_is_two_kernels_and_equals_eager(batch, n):
    m = padding_mask(batch, n, [max(1, n - 2 * b) for b in range(batch)])
    check_exact(padded_causal, m)
    s = summary(padded_causal, m)
    assert s["kernel_count"] == 2, s
    assert not any(op for op in s["extern_ops"] if "expand" not in op), s["extern_ops"]


@needs_cpu_kernels
def test_transformers_sdpa_mask_is_one_kernel_and_equals_eager():
    masking_utils = pytest.importorskip("transformers.masking_utils")

    def causal(attention_mask):
        batch, n = attention_mask.shape
        return masking_utils.sdpa_mask(
            batch_size=batch,
            q_length=n,
            kv_length=n,
            mask_function=masking_utils.causal_mask_function,
            attention_mask=attention_mask,
            allow_is_causal_skip=False,
        )

    def bidirectional(attention_mask):
        batch, n = attention_mask.shape
        return masking_utils.sdpa_mask(
            batch_size=batch,
            q_length=n // 2,
            kv_length=n,
            mask_function=masking_utils.bidirectional_mask_function,
            attention_mask=attention_mask,
            allow_is_causal_skip=False,
        )

    m = padding_mask(3, 12, [12, 9, 4]).bool()  # as create_causal_mask hands it on
    for fn in (causal, bidirectional):
        check_exact(fn, m)
        s = summary(fn, m)
        assert s["kernel_count"] == 1, (fn.__name__, s)
        assert all("expand" in op for op in s["extern_ops"]), (fn.__name__, s["extern_ops"])


def gather_rows(x, idx):
    return x[idx] * 2


def gather_by_aranges(x):
    rows = torch.arange(-3, 0)[:, None]  # negative: counted from the end, as in eager
    cols = torch.arange(x.shape[1])[None, :]
    return x[rows, cols] + 1


def gather_leading(x):
    return x[torch.arange(2) + 1] * 3  # x is 3-D: the trailing axes come along


@needs_cpu_kernels
def test_advanced_index_by_aranges_lowers_on_the_cpu_and_equals_eager():
    x = torch.randn(5, 4)
    check(gather_by_aranges, x)
    assert summary(gather_by_aranges, x)["externs"] == []
    y = torch.randn(4, 3, 2)
    check(gather_leading, y)
    assert summary(gather_leading, y)["externs"] == []


@needs_cpu_kernels
def test_advanced_index_by_unknown_values_stays_torch_on_the_cpu_and_raises_as_eager():
    x, idx = torch.randn(5, 3), torch.tensor([4, 0, -1])
    check(gather_rows, x, idx, fresh=False)
    assert summary(gather_rows, x, idx)["externs"] != []
    torchlite.reset()
    with pytest.raises(IndexError):
        torchlite.compile(gather_rows)(x, torch.tensor([5, 0, 1]))


def gather_past_the_end(x):
    return x[torch.arange(x.shape[0] + 1)] * 2  # one index too many: IndexError in eager


@needs_cpu_kernels
def test_advanced_index_by_an_arange_past_the_end_stays_torch_on_the_cpu_and_raises():
    x = torch.randn(5, 3)
    torchlite.reset()
    with pytest.raises(IndexError):
        torchlite.compile(gather_past_the_end)(x)


FACTORIES = {
    "new_ones_bool": lambda x: x.new_ones((), dtype=torch.bool) & (x > 0),
    "ones": lambda x: x + torch.ones(x.shape[-1]),
    "zeros_int": lambda x: x + torch.zeros(3, 1, dtype=torch.int32),
    "ones_like_bf16": lambda x: x.bfloat16() * torch.ones_like(x, dtype=torch.bfloat16),
    "zeros_like": lambda x: torch.zeros_like(x) - x,
    "full_inf": lambda x: torch.minimum(x, torch.full((3, 4), float("-inf"))),
    "full_int": lambda x: x * torch.full((4,), 7, dtype=torch.int64),
    "full_like_bool": lambda x: torch.full_like(x, True, dtype=torch.bool) ^ (x > 0),
    "new_full": lambda x: x.new_full((3, 4), -5) + x,
    "new_zeros": lambda x: x.new_zeros(4) + x,
}


@needs_cpu_kernels
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_constant_factories_fuse_and_equal_eager(name):
    x = torch.randn(3, 4)
    check_exact(FACTORIES[name], x)
    s = summary(FACTORIES[name], x)
    assert s["externs"] == [] and s["kernel_count"] == 1, s


@needs_cpu_kernels
def test_a_fill_the_dtype_cannot_hold_exactly_stays_torch_and_equals_eager():
    def tenth(x):
        return x.bfloat16() + torch.full((4,), 0.1, dtype=torch.bfloat16)

    x = torch.randn(3, 4)
    check_exact(tenth, x)
    assert summary(tenth, x)["externs"] != []


def attention_block(x, w, b):
    batch, n, d = x.shape
    q = F.linear(x, w, b).view(batch, n, 2, d // 2).transpose(1, 2)
    o = F.scaled_dot_product_attention(q, q, q)
    o = o.transpose(1, 2).reshape(batch, n, d)
    h = F.dropout(F.linear(o, w, b), p=0.1, training=False)
    return h + x


@needs_cpu_kernels
def test_eval_dropout_and_views_after_a_linear_are_no_steps_of_their_own():
    args = (torch.randn(2, 8, 16), torch.randn(16, 16), torch.randn(16))
    check(attention_block, *args, atol=1e-5, rtol=1e-5)
    torchlite.reset()
    s = summary(attention_block, *args)
    steps = dict(zip(s["order"], s["memory"]))
    ran = [name for name, m in steps.items() if not name.startswith("kernel") and not m["skip"]]
    assert not any("dropout" in name or name.startswith("view") for name in ran), ran
    # the query is made from the linear's output by one as_strided
    assert any(m["strided_base"] == "linear" for m in steps.values()), steps


def positions(ids, table):
    # NOTE: bart's learned positions: `arange(n).expand(batch, -1) + 2` as embedding indices
    pos = torch.arange(ids.shape[1]).expand(ids.shape[0], -1) + 2
    return F.embedding(ids, table) + F.embedding(pos, table)


@needs_cpu_kernels
def test_position_embedding_by_an_arange_lowers_on_the_cpu_and_token_ids_stay_torch():
    ids, table = torch.randint(0, 20, (2, 6)), torch.randn(20, 8)
    check(positions, ids, table, fresh=False)
    externs = summary(positions, ids, table)["extern_ops"]
    # the token ids' only: their values are unknown
    assert sum(op.endswith("embedding") for op in externs) == 1, externs
    torchlite.reset()
    with pytest.raises(IndexError):
        torchlite.compile(positions)(torch.full((2, 6), 20), table)
