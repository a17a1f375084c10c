"""Several breaks in one frame: one graph between each pair, each resume function built once."""

import torch
from helpers import assert_same
from resume_check import check_resume, inputs

import torchlite


def _three_breaks(x):
    a = x * 2
    print("one")
    b = a.sin()
    print("two")
    c = b + a
    print("three")
    return c * x


def _locals_of_every_kind(x, scale=2.0, name="n"):
    t = (x, 1)
    d = {"k": x * 2}
    lst = [x + 1]
    print("break", name)
    return t[0] * scale + d["k"] + lst[0]


class _Acc:
    def __init__(self, xs):
        self.items = []
        print("break")  # the rest of __init__ runs in a resume function...
        self += xs  # ...which breaks again here (iadd on a user object)

    def __iadd__(self, xs):
        self.items.extend(xs)
        return self


def _second_break_in_resume_function(x):
    return _Acc([x * 2]).items[0] + 1


_LAYERS = torch.nn.ModuleList([torch.nn.Linear(3, 3) for _ in range(3)])


def _module_list_slice(x):
    # ModuleList[:n] builds a ModuleList in traced code: its __init__ breaks at
    # Module.__init__ and again at `self += modules` (transformers decoders).
    for layer in _LAYERS[:2]:
        x = layer(x)
    return x


def test_three_breaks_give_four_graphs():
    check_resume(_three_breaks, inputs(3), graphs=4, breaks=3)


def test_tuples_dicts_lists_and_constants_survive_the_break():
    check_resume(_locals_of_every_kind, inputs(3), graphs=2)


def test_second_break_inside_a_resume_function_keeps_self():
    check_resume(
        _second_break_in_resume_function, inputs(3), graphs=4, breaks=3, compiled_after=False
    )


def test_module_list_slice_matches_eager():
    torchlite.reset()
    compiled = torchlite.compile(_module_list_slice)
    with torch.no_grad():
        for _ in range(2):
            x = inputs(2, 3)
            assert_same(compiled(x), _module_list_slice(x))
