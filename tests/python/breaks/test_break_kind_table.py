"""Graph-break kinds are one table: every kind a site in csrc/ raises is listed by
`_C.break_kinds()` and in docs/graph_breaks.md with the same hint, and programs that hit the
sites re-kinded from the catch-all `unsupported_value` report their specific kind, a hint, and
the user's file and line (found from a `# BREAK` marker), with eager's result.
"""

import collections
import math
import os
import pathlib
import re

import numpy as np
import pytest
import torch
from helpers import filename_of, lineno_of
from torch.overrides import TorchFunctionMode

import torchlite

ROOT = pathlib.Path(__file__).resolve().parents[3]
# The first argument of graph_break(...), GraphBreak(...) or BreakInfo{...}: up to the first comma
# outside quotes (a kind may be chosen by `cond ? "a" : "b"`).
_SITE = re.compile(r'\b(?:graph_break|GraphBreak|BreakInfo)\s*[({]\s*((?:"[^"]*"|[^,"])*),')
_KIND = re.compile(r'"([a-z]+(?:_[a-z]+)*)"')
_DOC_ROW = re.compile(r"^\| `([a-z_]+)` \| .* \| (.*) \|$", re.MULTILINE)


def _kinds_in_sources() -> dict[str, list[str]]:
    """kind -> the files that raise it, from the sources (comments excluded)."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "csrc").rglob("*.cpp")) + sorted((ROOT / "csrc").rglob("*.h")):
        text = re.sub(r"//[^\n]*", "", path.read_text())
        for first_arg in _SITE.findall(text):
            for kind in _KIND.findall(first_arg):
                found.setdefault(kind, []).append(path.name)
    return found


def _doc_rows() -> dict[str, str]:
    text = (ROOT / "docs" / "graph_breaks.md").read_text()
    return dict(_DOC_ROW.findall(text))


def test_no_site_raises_the_catch_all_kind():
    # NOTE: every site names what happened (issue 22): the catch-all kind is gone from the table.
    found = _kinds_in_sources()
    assert "unsupported_value" not in found, found.get("unsupported_value")
    assert "unsupported_value" not in dict(torchlite._C.break_kinds())
    for kind in ("unsupported_super", "module_hooks", "model_output_construction"):
        assert kind in found and kind in _doc_rows()


def test_the_source_scan_finds_the_kinds_it_should():
    # NOTE: protects the scan itself: a regex that found nothing would pass the test below.
    found = _kinds_in_sources()
    assert {"data_dependent_op", "unsupported_operand", "live_value_at_break"} <= set(found)
    assert "unsupported_return" in found  # chosen by a conditional at its sites
    assert len(found) >= 25


def test_every_kind_raised_in_csrc_is_in_the_kind_table_and_the_docs():
    table = dict(torchlite._C.break_kinds())
    doc = _doc_rows()
    for kind, files in _kinds_in_sources().items():
        assert kind in table, f"{kind} (raised in {sorted(set(files))}) is not in break_kinds.cpp"
        assert kind in doc, f"{kind} has no row in docs/graph_breaks.md"


def test_the_docs_table_and_the_cpp_table_list_the_same_kinds_and_hints():
    table = torchlite._C.break_kinds()
    doc = _doc_rows()
    assert [k for k, _ in table] == list(doc)
    for kind, hint in table:
        assert hint and hint == doc[kind], kind
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", kind)


# --- programs hitting the re-kinded sites ------------------------------------------------------


class _Obj:
    def __init__(self, v):
        self.v = v

    def method(self):
        return self.v


class _Sub(torch.Tensor):
    pass


_LIN1, _LIN2 = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)


def _max_of_tensors(x):
    return max(x[0], x[1]) * x  # BREAK


def _sorted_tensors(x):
    return sorted([x[1], x[0]])[0] * x  # BREAK  # noqa: FURB192 (sorted() is the site)


def _math_of_a_tensor(x):
    return x + math.prod([x, 2])  # BREAK


def _list_indexed_by_a_tensor(x):
    i = x.abs().sum().long().clamp(0, 2)
    return [x, x * 2, x * 3][i] + 1  # BREAK


def _list_sliced_by_a_tensor(x):
    n = x.abs().sum().long().clamp(0, 3)
    return x * len([1, 2, 3][:n])  # BREAK


def _enumerate_from_a_tensor(x):
    start = x.abs().sum().long().clamp(0, 3)
    return x * sum(i for i, _ in enumerate([5, 6], start))  # BREAK


def _tensor_as_dict_key(x):
    return {x: 2}[x] * x  # BREAK


def _dict_update_with_tensor_keys(x):
    d = {}
    d.update([(x, 1)])  # BREAK
    return x + len(d)


def _iterate_a_set_of_modules(x):
    return x * len([m for m in {_LIN1, _LIN2}])  # BREAK


def _format_a_tensor(x):
    return x + len(f"{x}")  # BREAK


def _format_an_object(x):
    return x + len(f"{_Obj(1)}".split(" at ")[0])  # BREAK


def _tensor_version(x):
    return x * (x._version + 1)  # BREAK


def _iterate_an_array(x):
    return x * sum(v for v in np.array([1, 2]))  # BREAK


def _return_a_method(x):
    return x * 2, _Obj(3).method  # BREAK


def _raise_none():
    raise None  # BREAK  # noqa: B016 (the site under test)


def _raise_of_none(x):
    try:
        _raise_none()
    except TypeError:
        return x + 1
    return x


def _plain(x):
    return x * 2  # BREAK


def _super_on_a_tensor(x):
    return super(torch.Tensor, x).__repr__ and x * 2  # BREAK


class _HooksAsList(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self._forward_hooks = []  # an empty list where torch.nn keeps a dict: eager skips it

    def forward(self, x):
        return x + 1


_HOOKS_AS_LIST = _HooksAsList()


def _module_with_a_hook_list(x):
    return _HOOKS_AS_LIST(x) * 2  # BREAK


def _deque_rotated_by_a_tensor(x):
    d = collections.deque([x, x * 2, x * 3])
    d.rotate((x > 10).sum())  # BREAK
    return d[0] + 1


def _deque_indexed_by_a_tensor(x):
    d = collections.deque([x, x * 2, x * 3])
    return d[(x > 10).sum()] + 1  # BREAK


class _Mode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


CASES = {
    "max_of_tensors": (_max_of_tensors, "unsupported_operand", None),
    "sorted_tensors": (_sorted_tensors, "unsupported_operand", None),
    "math_of_a_tensor": (_math_of_a_tensor, "unsupported_operand", None),
    "list_indexed_by_a_tensor": (_list_indexed_by_a_tensor, "non_constant_index", None),
    "list_sliced_by_a_tensor": (_list_sliced_by_a_tensor, "non_constant_index", None),
    "enumerate_from_a_tensor": (_enumerate_from_a_tensor, "non_constant_argument", None),
    "tensor_as_dict_key": (_tensor_as_dict_key, "unsupported_dict_key", None),
    "dict_update_with_tensor_keys": (_dict_update_with_tensor_keys, "unsupported_dict_key", None),
    "iterate_a_set_of_modules": (_iterate_a_set_of_modules, "set_of_objects", None),
    "format_a_tensor": (_format_a_tensor, "format_traced_value", None),
    "format_an_object": (_format_an_object, "format_traced_value", None),
    "tensor_version": (_tensor_version, "unsupported_attribute", None),
    "iterate_an_array": (_iterate_an_array, "unsupported_iteration", None),
    "return_a_method": (_return_a_method, "unsupported_return", None),
    "raise_of_none": (_raise_of_none, "raise_of_non_exception", _raise_none),
    "super_on_a_tensor": (_super_on_a_tensor, "unsupported_super", None),
    "module_with_a_hook_list": (_module_with_a_hook_list, "module_hooks", None),
    "deque_rotated_by_a_tensor": (_deque_rotated_by_a_tensor, "non_constant_argument", None),
    "deque_indexed_by_a_tensor": (_deque_indexed_by_a_tensor, "non_constant_index", None),
}


def _same(out, expected):
    if isinstance(expected, tuple):
        assert isinstance(out, tuple) and len(out) == len(expected)
        for o, e in zip(out, expected):
            _same(o, e)
    elif callable(expected):
        assert out() == expected()
    else:
        torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("name", list(CASES))
def test_a_rekinded_site_reports_its_kind_hint_file_and_line(name):
    fn, kind, marked = CASES[name]
    marked = marked or fn
    x = torch.randn(3)
    report = torchlite.explain(fn)(x.clone())
    assert report.breaks_by_kind.get(kind, 0) >= 1, report.breaks_by_kind
    assert "unsupported_value" not in report.breaks_by_kind
    b = next(b for b in report.break_reasons if b.kind == kind)
    assert os.path.realpath(b.filename) == os.path.realpath(filename_of(marked))
    assert b.lineno == lineno_of(marked, "# BREAK"), (b.lineno, b.reason)
    assert b.hint, b  # the site's own hint, or its kind's
    assert f"  {kind}: " in str(report)  # "Breaks by kind:" groups it


@pytest.mark.parametrize("name", list(CASES))
def test_a_rekinded_site_gives_eagers_result(name):
    fn, _, _ = CASES[name]
    compiled = torchlite.compile(fn)
    for shape in ((3,), (3,), (5,)):
        x = torch.randn(*shape)
        _same(compiled(x.clone()), fn(x.clone()))


def test_a_break_without_a_site_hint_carries_its_kinds_hint():
    hints = dict(torchlite._C.break_kinds())
    (b,) = [b for b in torchlite.explain(_iterate_an_array)(torch.randn(3)).break_reasons]
    assert b.kind == "unsupported_iteration" and b.hint == hints["unsupported_iteration"]
    with pytest.raises(torchlite.Unsupported, match=re.escape(hints["unsupported_iteration"])):
        torchlite.compile(_iterate_an_array, fullgraph=True)(torch.randn(3))


def test_a_tensor_subclass_input_is_its_own_kind():
    x = torch.randn(3).as_subclass(_Sub)
    report = torchlite.explain(_plain)(x)
    assert list(report.breaks_by_kind) == ["tensor_subclass"]
    assert "as_subclass" in report.break_reasons[0].hint
    torch.testing.assert_close(torchlite.compile(_plain)(x), _plain(x))


def test_a_frame_called_under_a_torch_function_mode_is_its_own_kind():
    x = torch.randn(3)
    with _Mode():
        report = torchlite.explain(_plain)(x)
        out = torchlite.compile(_plain)(x)
    first = report.break_reasons[0]
    assert first.kind == "active_torch_mode" and "_torchlite_transparent_mode" in first.hint
    assert os.path.realpath(first.filename) == os.path.realpath(filename_of(_plain))
    torch.testing.assert_close(out, _plain(x))
