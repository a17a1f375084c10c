"""A break inside a loop: the graph before the loop runs compiled, CPython runs the loop and the
rest of the frame (a loop would otherwise break once per iteration), and functions the loop calls
are still captured as frames of their own."""

from resume_check import check_resume, inputs


def _range_loop(x):
    y = x + 1
    for i in range(3):
        y = y * 2
        print("step", i)
    return y - 1


def _list_loop(x, ws):
    y = x.sin()
    for w in ws:
        y = y + w
        print("w")
    return y


def helper(y):
    return y.cos() * 2 + 1


def _loop_calls_helper(x):
    y = x * 2
    for _ in range(2):
        y = helper(y)
        print("iter")
    return y


def _while_loop(x):
    y = x * 1
    n = 0
    while n < 3:
        y = y + 1
        print("n", n)
        n += 1
    return y


def test_range_loop_with_break_runs_like_eager():
    check_resume(_range_loop, inputs(3), graphs=1, compiled_after=False)


def test_list_loop_with_break_runs_like_eager():
    check_resume(_list_loop, inputs(3), [inputs(3), inputs(3)], graphs=1, compiled_after=False)


def test_functions_called_in_the_loop_are_captured():
    report = check_resume(_loop_calls_helper, inputs(3), graphs=2, compiled_after=False)
    assert any(f["code_name"].endswith("helper") and f["ops"] > 0 for f in report.frames)


def test_while_loop_with_break_runs_like_eager():
    check_resume(_while_loop, inputs(3), graphs=1, compiled_after=False)
