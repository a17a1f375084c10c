"""Several breaks in one frame: one graph between each pair, each resume function built once."""

from resume_check import check_resume, inputs


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


def test_three_breaks_give_four_graphs():
    check_resume(_three_breaks, inputs(3), graphs=4, breaks=3)


def test_tuples_dicts_lists_and_constants_survive_the_break():
    check_resume(_locals_of_every_kind, inputs(3), graphs=2)
