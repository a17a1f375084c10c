"""An `assert` on a tensor's value (`assert lengths.max().item() <= slen`, as XLM/FlauBERT's
embeddings check their inputs; `assert (x > 0).all()`) stays in the graph as a run-time check
instead of breaking it: while tracing the assertion is taken to hold, and the check placed where
the assert is runs on the real values. When it fails nothing visible has run yet, so the frame
runs eagerly from its start and raises eager's own AssertionError (message included).

`.item()` in such an assert is compared exactly as Python compares the number it returns (a
float32 value against a Python float in double precision, never in float32).

PYTEST_DONT_REWRITE: the programs' own asserts must stay plain `assert` statements."""

import pytest
import torch
from helpers import assert_same, check, clone_args, counters

import torchlite


def _one_graph(fn, *args):
    torchlite.reset()
    report = torchlite.explain(fn)(*args)
    assert report.graph_count == 1, str(report)
    assert report.graph_break_count == 0, str(report)
    return report


def _raises_like_eager(fn, *args):
    """The compiled call raises eager's exception (type and message), and leaves the arguments
    as eager leaves them."""
    eager_args = clone_args(list(args))
    with pytest.raises(AssertionError) as want:
        fn(*eager_args)
    torchlite.reset()
    compiled = torchlite.compile(fn)
    comp_args = clone_args(list(args))
    with pytest.raises(AssertionError) as got:
        compiled(*comp_args)
    assert str(got.value) == str(want.value)
    assert_same(comp_args, eager_args)


def _lengths_in_range(ids, lengths):
    slen = ids.size(1)
    emb = ids.float() * 2
    assert lengths.max().item() <= slen
    mask = torch.arange(slen)[None, :] < lengths[:, None]
    return emb * mask


def _reversed_with_message(x, n):
    y = x.sin()
    assert n.numel() >= x.abs().max().item(), "too large"
    return y + 1


def _tensor_condition(x):
    y = x.exp()
    assert (y > 0).all(), f"non-positive value in {tuple(y.shape)}"
    return y.log()


def _not_any(x):
    bad = x.isnan()
    assert not bad.any().item()
    return x * 3


def _first_of_and(x, flag):
    assert (x >= 0).all() and flag
    return x.sqrt()


def _get_masks(slen, lengths):
    alen = torch.arange(slen, dtype=torch.long)
    assert lengths.max().item() <= slen
    return alen < lengths[:, None]


def _inlined_helper(ids, lengths):
    mask = _get_masks(ids.size(1), lengths)
    return ids.float().masked_fill(~mask, 0.0).sum(1)


IDS = torch.arange(12).reshape(2, 6)


def test_item_assert_stays_in_one_graph():
    lengths = torch.tensor([4, 6])
    _one_graph(_lengths_in_range, IDS, lengths)
    check(_lengths_in_range, IDS, lengths, fresh=False)


def test_item_assert_in_an_inlined_helper_stays_in_one_graph():
    lengths = torch.tensor([3, 5])
    _one_graph(_inlined_helper, IDS, lengths)
    check(_inlined_helper, IDS, lengths, fresh=False)


def test_failing_item_assert_raises_eagers_error():
    _raises_like_eager(_lengths_in_range, IDS, torch.tensor([4, 7]))


def test_failing_assert_with_a_message_raises_eagers_message():
    x = torch.tensor([0.5, -3.0, 1.0])
    _raises_like_eager(_reversed_with_message, x, torch.ones(2))
    _one_graph(_reversed_with_message, x, torch.ones(4))
    check(_reversed_with_message, x, torch.ones(4), fresh=False)


def test_assert_on_a_tensor_condition():
    x = torch.randn(3, 4)
    _one_graph(_tensor_condition, x)
    check(_tensor_condition, x)
    _raises_like_eager(_tensor_condition, torch.tensor([1.0, float("-inf")]))


def test_assert_not_item():
    x = torch.randn(5)
    _one_graph(_not_any, x)
    check(_not_any, x)
    _raises_like_eager(_not_any, torch.tensor([1.0, float("nan")]))


def test_first_operand_of_and_is_checked_then_the_rest_traced():
    x = torch.rand(4)
    check(_first_of_and, x, True)
    _raises_like_eager(_first_of_and, torch.tensor([1.0, -1.0]), True)
    _raises_like_eager(_first_of_and, x, False)


def _float_item_above(x):
    assert x[0].item() > 0.1  # float32(0.1) is 0.10000000149...: true in double, not in float32
    return x * 2


def _int_item_below_float(x):
    assert x.sum().item() < 2.5
    return x + 1


def test_float_item_compares_as_a_python_float():
    x = torch.tensor([0.1, 2.0], dtype=torch.float32)
    _one_graph(_float_item_above, x)
    check(_float_item_above, x, fresh=False)
    _raises_like_eager(_float_item_above, torch.tensor([0.0999, 1.0]))


def test_int_item_against_a_float_is_still_correct():
    x = torch.tensor([1, 1])
    check(_int_item_below_float, x, fullgraph=False, fresh=False)
    _raises_like_eager(_int_item_below_float, torch.tensor([2, 1]))


class _Embeddings(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.max_positions = 8
        self.emb = torch.nn.Embedding(10, 4)

    def forward(self, ids):
        assert ids.max().item() < self.emb.num_embeddings, "id out of range"
        assert ids.size(1) <= self.max_positions
        return self.emb(ids).sum(1)


def test_item_against_a_module_attribute():
    module = _Embeddings()
    ids = torch.tensor([[1, 2, 9], [0, 3, 4]])
    with torch.no_grad():  # NOTE: a trainable module in grad mode keeps the break
        _one_graph(module, ids)
    torchlite.reset()
    compiled = torchlite.compile(module)
    with torch.no_grad():
        assert_same(compiled(ids), module(ids))
        first = counters()
        assert_same(compiled(ids), module(ids))
        assert counters()["frames"] == first["frames"]
        with pytest.raises(AssertionError, match="id out of range"):
            compiled(torch.tensor([[1, 10, 2]]))


def _assert_after_an_update(x, buf):
    buf.add_(1)
    assert x.max().item() < 10
    return x + buf


def _assert_before_an_update(x, buf):
    assert (x < 10).all()
    buf.add_(1)
    return x + buf


def test_assert_after_an_in_place_update_keeps_eagers_state():
    x, buf = torch.tensor([1.0, 2.0]), torch.zeros(2)
    check(_assert_after_an_update, x, buf, fullgraph=False, fresh=False)
    _raises_like_eager(_assert_after_an_update, torch.tensor([1.0, 20.0]), buf)


def test_failing_check_before_an_update_leaves_it_undone():
    x, buf = torch.tensor([1.0, 2.0]), torch.zeros(2)
    _one_graph(_assert_before_an_update, x, buf)
    check(_assert_before_an_update, x, buf, fresh=False)
    _raises_like_eager(_assert_before_an_update, torch.tensor([1.0, 20.0]), buf)


def test_sizes_stay_dynamic_through_the_check():
    torchlite.reset()
    compiled = torchlite.compile(_lengths_in_range, dynamic=True)
    for n in (5, 7, 9):
        ids = torch.arange(2 * n).reshape(2, n)
        lengths = torch.tensor([n - 1, n])
        assert_same(compiled(ids, lengths), _lengths_in_range(ids, lengths))
    with pytest.raises(AssertionError):
        compiled(IDS, torch.tensor([1, 9]))


def test_where_autograd_records_the_assert_breaks_and_stays_correct():
    # NOTE: a training graph's joint trace keeps torch's ops only: no check there.
    x = torch.rand(3, 4) + 0.5
    check(_tensor_condition, x.requires_grad_(), fullgraph=False)
    bad = torch.tensor([1.0, float("-inf")], requires_grad=True)
    with pytest.raises(AssertionError) as want:
        _tensor_condition(bad)
    torchlite.reset()
    with pytest.raises(AssertionError) as got:
        torchlite.compile(_tensor_condition)(bad)
    assert str(got.value) == str(want.value)


def test_another_backend_keeps_the_check():
    # NOTE: a backend's graph is traced again on fake tensors: the check becomes
    # torch._assert_async, which raises a RuntimeError (no eager rerun there).
    torchlite.reset()
    compiled = torchlite.compile(_tensor_condition, backend="aot_eager")
    x = torch.rand(5) + 0.5
    assert_same(compiled(x), _tensor_condition(x))
    with pytest.raises((AssertionError, RuntimeError)):
        compiled(torch.tensor([1.0, float("-inf")]))


def test_a_failed_check_leaves_the_compiled_entry_in_use():
    torchlite.reset()
    compiled = torchlite.compile(_lengths_in_range)
    good = torch.tensor([4, 6])
    assert_same(compiled(IDS, good), _lengths_in_range(IDS, good))
    with pytest.raises(AssertionError):
        compiled(IDS, torch.tensor([4, 7]))
    before = counters()
    assert_same(compiled(IDS, good), _lengths_in_range(IDS, good))
    after = counters()
    assert after["frames"] == before["frames"] and after["graphs"] == before["graphs"]
    assert after["cache_hits"] == before["cache_hits"] + 1, (before, after)
    assert after["eager_fallbacks"] == before["eager_fallbacks"], (before, after)


def _torch_assert(x):
    y = x.abs() + 1
    torch._assert((y >= 1).all(), "below one")
    return y.log()


def _int_of_a_max(ids):
    assert int(ids.max()) < 10, "id too large"
    return ids.float() * 2


def _int_of_a_float(x):
    assert int(x.max()) < 3  # truncates (2.5 passes): left to CPython
    return x * 2


def test_torch_assert_on_a_tensor_is_checked_in_the_graph():
    x = torch.randn(6)
    _one_graph(_torch_assert, x)
    check(_torch_assert, x)
    _raises_like_eager(_torch_assert, torch.tensor([1.0, float("nan")]))


def test_int_of_an_integer_tensor_in_an_assert():
    ids = torch.tensor([1, 4, 9])
    _one_graph(_int_of_a_max, ids)
    check(_int_of_a_max, ids, fresh=False)
    _raises_like_eager(_int_of_a_max, torch.tensor([1, 10]))


def test_int_of_a_float_tensor_is_left_to_cpython():
    x = torch.tensor([2.5, 1.0])
    check(_int_of_a_float, x, fullgraph=False, fresh=False)
    _raises_like_eager(_int_of_a_float, torch.tensor([3.5, 1.0]))


class _CheckedFirst(torch.nn.Module):
    """The assert comes before any parameter is read (XLM's forward)."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    def forward(self, ids, x):
        assert ids.max().item() < 10
        return self.proj(x).tanh()


def test_a_trainable_module_keeps_its_training_graph():
    module = _CheckedFirst()
    ids, x = torch.tensor([1, 9]), torch.randn(2, 4)
    torchlite.reset()
    report = torchlite.explain(module)(ids, x)
    assert report.graph_break_count == 1, str(report)  # the break as before, not op by op
    assert not any("checks an assert" in str(t) for t in report.training), report.training
    compiled = torchlite.compile(module)
    out = compiled(ids, x)
    out.sum().backward()
    grads = [p.grad.clone() for p in module.parameters()]
    module.zero_grad()
    module(ids, x).sum().backward()
    assert_same(grads, [p.grad for p in module.parameters()])
    with torch.no_grad():
        _one_graph(module, ids, x)
