"""Each graph-break kind: eager-correct results, counted, explained at the user's exact line,
and raised as torchlite.Unsupported under fullgraph=True.

The reported line is found from a `# BREAK` marker comment (helpers.lineno_of), never
hard-coded. For try/except the report may name the `try:` line or the first guarded line.
"""

import dataclasses
import os
import zlib

import pytest
import torch
from helpers import (
    assert_counters_delta,
    assert_same,
    at_least,
    counters,
    filename_of,
    lineno_of,
)

import torchlite


def _print_break(x):
    y = x * 2
    print("shape is", tuple(y.shape))  # BREAK
    return y + 1


def _item_break(x):
    s = x.sum().item()  # BREAK
    return x * s


def _tolist_break(x):
    vals = x.tolist()  # BREAK
    return x + len(vals) + vals[0]


def _branch_break(x):
    y = x.cos()
    if x.sum() > 0:  # BREAK
        return y + 1
    return y - 1


def _getpid_break(x):
    pid = os.getpid()  # BREAK
    return x * 2 + (pid > 0)


def _crc_break(x):
    c = zlib.crc32(b"torchlite")  # BREAK
    return x + c % 7


def _try_break(x):
    y = x * 2
    try:
        # A try body is traced; a break inside it stops the graph at the try.
        y = y + os.getpid() * 0  # BREAK
    except ValueError:
        y = y - 1
    return y


@dataclasses.dataclass
class Case:
    fn: object
    kind: str
    words: tuple  # the reason mentions one of these (case-insensitive)
    markers: tuple = ("# BREAK",)

    def lines(self):
        return {lineno_of(self.fn, m) for m in self.markers}


CASES = {
    "print": Case(_print_break, "unsupported_builtin", ("print",)),
    "item": Case(_item_break, "data_dependent_op", ("item",)),
    "tolist": Case(_tolist_break, "data_dependent_op", ("tolist",)),
    "branch": Case(_branch_break, "data_dependent_branch", ("tensor", "branch", "bool")),
    "getpid": Case(_getpid_break, "unsupported_callable", ("getpid",)),
    "crc32": Case(_crc_break, "unsupported_callable", ("crc32",)),
    "try_except": Case(_try_break, "unsupported_callable", ("getpid",)),
}

INPUTS = [torch.tensor([0.5, -1.0, 2.0]), torch.tensor([-3.0, 0.0, 0.0])]


@pytest.mark.parametrize("name", list(CASES))
def test_break_runs_correctly_and_is_counted(name, capsys):
    case = CASES[name]
    compiled = torchlite.compile(case.fn)
    before = counters()
    for x in INPUTS:
        expected = case.fn(x.clone())
        eager_out = capsys.readouterr().out
        assert_same(compiled(x.clone()), expected)
        # Side effects of the breaking instruction (print) happen exactly once, like eager.
        assert capsys.readouterr().out == eager_out
    assert_counters_delta(before, counters(), graph_breaks=at_least(1))


@pytest.mark.parametrize("name", list(CASES))
def test_explain_reports_kind_reason_file_and_line(name):
    case = CASES[name]
    report = torchlite.explain(case.fn)(INPUTS[0].clone())
    assert report.graph_break_count >= 1
    assert len(report.break_reasons) >= 1
    matching = [r for r in report.break_reasons if r.kind == case.kind]
    assert matching, [(r.kind, r.reason) for r in report.break_reasons]
    reason = matching[0]
    assert any(w in reason.reason.lower() for w in case.words), reason.reason
    assert os.path.realpath(reason.filename) == os.path.realpath(filename_of(case.fn))
    assert reason.lineno in case.lines(), (reason.lineno, case.lines())
    assert case.kind in str(report)


@pytest.mark.parametrize("name", list(CASES))
def test_fullgraph_raises_unsupported_with_file_and_line(name):
    case = CASES[name]
    compiled = torchlite.compile(case.fn, fullgraph=True)
    with pytest.raises(torchlite.Unsupported) as info:
        compiled(INPUTS[0].clone())
    assert isinstance(info.value, RuntimeError)
    msg = str(info.value)
    base = os.path.basename(filename_of(case.fn))
    assert any(f"{base}:{line}" in msg for line in case.lines()), msg
    assert any(w in msg.lower() for w in case.words), msg


def test_branch_break_takes_both_paths_like_eager():
    compiled = torchlite.compile(_branch_break)
    for x in (torch.zeros(3), torch.full((3,), 3.0), torch.zeros(3)):
        assert_same(compiled(x), _branch_break(x))


def _inner_callee(x):
    return x.sin() * 2 + 1


def _outer_with_break(x):
    y = x + 1
    print("outer runs eagerly")  # BREAK
    return _inner_callee(y) - 1


def test_broken_outer_still_compiles_inner_callee():
    compiled = torchlite.compile(_outer_with_break)
    x = torch.randn(4)
    before = counters()
    assert_same(compiled(x), _outer_with_break(x))
    assert_counters_delta(before, counters(), graph_breaks=at_least(1), graphs=at_least(1))


def test_explain_of_broken_outer_counts_inner_graph():
    report = torchlite.explain(_outer_with_break)(torch.randn(4))
    assert report.graph_count >= 1
    assert report.graph_break_count >= 1
    assert len(report.graphs) == report.graph_count
    assert report.break_reasons[0].lineno == lineno_of(_outer_with_break, "# BREAK")


def test_explain_of_clean_function_has_one_graph_and_no_breaks():
    def clean(x):
        return x.relu() * 2

    report = torchlite.explain(clean)(torch.randn(3))
    assert report.graph_count == 1
    assert report.graph_break_count == 0
    assert len(report.break_reasons) == 0
    assert report.guards
    assert str(report)


def test_disabled_function_runs_eagerly_inside_compiled_caller(capsys):
    @torchlite.disable
    def noisy(x):
        print("eager helper")
        return x * 3

    def outer(x):
        return noisy(x + 1) - 1

    compiled = torchlite.compile(outer)
    x = torch.randn(3)
    assert_same(compiled(x), outer(x))
    assert capsys.readouterr().out == "eager helper\n" * 2
    assert_same(noisy(x), x * 3)


def test_break_inside_inlined_helper_reports_helper_line():
    report = torchlite.explain(_calls_item_helper)(torch.randn(3))
    lines = {r.lineno for r in report.break_reasons if r.kind == "data_dependent_op"}
    assert lineno_of(_item_break, "# BREAK") in lines


def _calls_item_helper(x):
    return _item_break(x) + 1


class _Counted(torch.nn.Module):
    calls = 0

    def forward(self, x):
        type(self).calls += 1
        return x * type(self).calls


class _Stashed(torch.nn.Module):
    last = None

    def forward(self, x):
        type(self).last = x.sum()  # BREAK
        return x * 2


def test_class_attribute_write_of_a_number_is_captured():
    # NOTE: replayed after the graph, as Dynamo does; the counter's read is guarded by value,
    # so each new count recaptures (correct on every call).
    _Counted.calls = 0
    report = torchlite.explain(_Counted())(torch.ones(3))
    assert report.graph_break_count == 0, str(report)
    _Counted.calls = 0
    compiled = torchlite.compile(_Counted())
    for k in range(1, 4):
        assert_same(compiled(torch.ones(3)), torch.full((3,), float(k)))
    assert _Counted.calls == 3


def test_class_attribute_write_of_a_tensor_is_a_break_that_names_the_class():
    m = _Stashed()
    report = torchlite.explain(m)(torch.ones(3))
    [reason] = [r for r in report.break_reasons if r.kind == "unsupported_side_effect"]
    assert "_Stashed.last" in reason.reason and "class attribute" in reason.reason
    assert "self.last" in reason.hint
    assert reason.lineno == lineno_of(_Stashed.forward, "# BREAK")
    compiled = torchlite.compile(_Stashed())
    x = torch.randn(3)
    assert_same(compiled(x), x * 2)
    assert_same(_Stashed.last, x.sum())
