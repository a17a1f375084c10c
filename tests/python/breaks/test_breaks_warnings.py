"""warnings.warn in compiled code: a warning the filters show is a `warning_call` graph break
that runs eagerly, so the user sees it with their own file and line, exactly as eager; a
warning the filters ignore is skipped in the trace (no break), and a filter change recompiles.
"""

import os
import warnings

import pytest
import torch
from helpers import assert_counters_delta, assert_same, counters, filename_of, lineno_of

import torchlite


def _warns(x):
    y = x * 2
    warnings.warn("careful: doubled")  # WARN
    return y + 1


def _warns_deprecation(x):
    warnings.warn("old api", DeprecationWarning, stacklevel=1)  # WARN
    return x.cos()


def _helper_that_warns(x):
    warnings.warn("from helper", RuntimeWarning)  # WARN
    return x - 1


def _calls_helper(x):
    return _helper_that_warns(x.sin()) * 3


def _same_warnings(compiled, fn, x):
    """Runs eager then compiled, recording warnings; both must match, with file and line."""
    out = []
    for runner in (fn, compiled):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            result = runner(x.clone())
        out.append((result, [(str(w.message), w.category, w.filename, w.lineno) for w in rec]))
    (expected, eager_w), (actual, comp_w) = out
    assert_same(actual, expected)
    assert comp_w == eager_w
    return comp_w


def test_shown_warning_is_a_warning_call_break_at_the_users_line():
    with pytest.warns(UserWarning, match="careful"):
        report = torchlite.explain(_warns)(torch.randn(3))
    kinds = [b.kind for b in report.break_reasons]
    assert kinds == ["warning_call"], report
    b = report.break_reasons[0]
    assert "UserWarning" in b.reason
    assert os.path.realpath(b.filename) == os.path.realpath(filename_of(_warns))
    assert b.lineno == lineno_of(_warns, "# WARN")


def test_shown_warning_has_eager_file_line_and_category():
    compiled = torchlite.compile(_warns)
    for _ in range(2):
        rec = _same_warnings(compiled, _warns, torch.randn(4))
        assert rec == [
            ("careful: doubled", UserWarning, filename_of(_warns), lineno_of(_warns, "# WARN"))
        ]


def test_pytest_warns_sees_the_warning():
    compiled = torchlite.compile(_warns)
    x = torch.randn(3)
    for _ in range(2):
        with pytest.warns(UserWarning, match="careful") as rec:
            assert_same(compiled(x), _warns(x))
        assert [w.lineno for w in rec if "careful" in str(w.message)] == [
            lineno_of(_warns, "# WARN")
        ] * 2


def test_warning_in_inlined_helper_points_at_helper_line():
    compiled = torchlite.compile(_calls_helper)
    rec = _same_warnings(compiled, _calls_helper, torch.randn(3))
    assert [r[3] for r in rec] == [lineno_of(_helper_that_warns, "# WARN")]


def test_ignored_warning_is_skipped_without_a_break():
    compiled = torchlite.compile(_warns)
    x = torch.randn(3)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("ignore")
        before = counters()
        for _ in range(2):
            assert_same(compiled(x), _warns(x))
        assert_counters_delta(before, counters(), graph_breaks=0, graphs=1)
    assert rec == []


def test_ignore_for_the_category_only_skips_that_category():
    compiled = torchlite.compile(_warns_deprecation)
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", DeprecationWarning)
        before = counters()
        assert_same(compiled(x), _warns_deprecation(x))
        assert_counters_delta(before, counters(), graph_breaks=0)
        compiled_user = torchlite.compile(_warns)
        with pytest.warns(UserWarning):  # another category is still shown, and breaks
            compiled_user(x)


def test_filter_change_from_ignore_to_shown_recompiles_and_warns():
    compiled = torchlite.compile(_warns)
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled(x)
    before = counters()
    with pytest.warns(UserWarning, match="careful"):
        assert_same(compiled(x), _warns(x))
    assert_counters_delta(before, counters(), recompiles=1, graph_breaks=1)


def test_message_filter_ignores_only_matching_text():
    compiled = torchlite.compile(_warns)
    x = torch.randn(3)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message="careful")
        before = counters()
        compiled(x)
        assert_counters_delta(before, counters(), graph_breaks=0)
        warnings.filterwarnings("ignore", message="other text")  # inserted first: no match
        compiled(x)
    assert rec == []


def test_error_filter_raises_like_eager():
    compiled = torchlite.compile(_warns)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="careful"):
            compiled(torch.randn(3))
