"""Side effects recorded before a break (attributes, lists, dicts, globals) are applied before the
breaking instruction runs, in program order, so CPython sees the same state as eager."""

import torch
from resume_check import check_resume, inputs

COUNTER = 0


class Box:
    def __init__(self):
        self.value = 0
        self.items = []


def _observe(*objs):
    print("observe", *objs)


def _attr_then_break(x, box):
    box.value = 3
    box.items.append("a")
    y = x * 2
    _observe(box.value, list(box.items))
    return y + box.value


def _global_then_break(x):
    global COUNTER
    COUNTER = COUNTER + 1
    y = x + 1
    print("counter", COUNTER)
    return y * COUNTER


def _dict_then_break(x, d):
    d["k"] = 1
    d["j"] = 2
    del d["k"]
    y = x * 3
    print("dict", sorted(d.items()))
    return y


def test_attribute_and_list_writes_are_visible_at_the_break(capsys):
    for box in (Box(), Box()):
        eager_box, comp_box = Box(), box
        import torchlite

        torchlite.reset()
        compiled = torchlite.compile(_attr_then_break)
        x = inputs(3)
        expected = _attr_then_break(x, eager_box)
        eager_out = capsys.readouterr().out
        actual = compiled(x, comp_box)
        assert capsys.readouterr().out == eager_out
        torch.testing.assert_close(actual, expected)
        assert comp_box.items == eager_box.items and comp_box.value == eager_box.value


def test_global_write_is_visible_at_the_break(capsys):
    global COUNTER
    import torchlite

    torchlite.reset()
    compiled = torchlite.compile(_global_then_break)
    x = inputs(3)
    COUNTER = 0
    expected = [_global_then_break(x) for _ in range(3)]
    eager_out = capsys.readouterr().out
    COUNTER = 0
    actual = [compiled(x) for _ in range(3)]
    assert capsys.readouterr().out == eager_out
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)


def test_dict_writes_are_visible_at_the_break(capsys):
    import torchlite

    torchlite.reset()
    compiled = torchlite.compile(_dict_then_break)
    x = inputs(3)
    d1, d2 = {"z": 0}, {"z": 0}
    expected = _dict_then_break(x, d1)
    eager_out = capsys.readouterr().out
    actual = compiled(x, d2)
    assert capsys.readouterr().out == eager_out
    assert d1 == d2
    torch.testing.assert_close(actual, expected)


def test_side_effects_before_break_counted_as_one_break():
    check_resume(_attr_then_break, inputs(3), Box(), graphs=2, calls=1)
