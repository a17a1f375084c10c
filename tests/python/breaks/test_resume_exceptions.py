"""Exceptions raised after a break carry the user's file, line and function name, like eager."""

import traceback

import pytest
import torch

import torchlite


def _fails_after_break(x):
    y = x * 2
    print("before the failure")
    return y @ torch.ones(7, 7)  # FAIL


def _raises_after_break(x):
    y = x + 1
    print("checking")
    if y.shape[0] == 3:
        raise ValueError("three is not allowed")  # RAISE
    return y


def _try_after_break(x):
    y = x * 2
    print("try next")
    try:
        z = y @ torch.ones(7, 7)
    except RuntimeError:
        z = y + 1
    return z


def _line_of(fn, marker):
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if marker in line)


@pytest.mark.parametrize(
    "fn, marker, exc",
    [
        (_fails_after_break, "# FAIL", RuntimeError),
        (_raises_after_break, "# RAISE", ValueError),
    ],
)
def test_error_after_break_points_at_the_users_line(fn, marker, exc):
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for _ in range(2):
        with pytest.raises(exc) as info:
            compiled(torch.randn(3))
        last = traceback.extract_tb(info.value.__traceback__)[-1]
        if exc is RuntimeError:  # torch's own frames may follow: find the user's
            users = [
                f for f in traceback.extract_tb(info.value.__traceback__) if f.filename == __file__
            ]
            last = users[-1]
        assert last.filename == __file__
        assert last.lineno == _line_of(fn, marker)
        assert last.name == fn.__name__


def test_try_block_after_a_break_catches_like_eager():
    torchlite.reset()
    compiled = torchlite.compile(_try_after_break)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), _try_after_break(x))
