"""A break inside `with torch.no_grad()` / `torch.enable_grad()`: the block is left before
CPython runs the break and entered again in the resume function, so grad mode is exactly eager's
on both sides, and after the block."""

import torch
from helpers import assert_same
from resume_check import check_resume, inputs

import torchlite


def _no_grad_break(x):
    y = x * 2
    with torch.no_grad():
        z = y * 3
        print("inside", torch.is_grad_enabled())
        w = z + 1
    return w + y


def _enable_inside_no_grad(x):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
            print("inner", torch.is_grad_enabled())
            c = b + a
        d = c * 2
    return d + x


def _two_breaks_inside_no_grad(x):
    with torch.no_grad():
        y = x * 2
        print("first")
        z = y * 3
        print("second")
        w = z + 1
    return w + x


def _raise_inside_no_grad(x):
    with torch.no_grad():
        y = x * 2
        print("about to fail")
        z = y @ torch.ones(7, 7)
    return z


def test_no_grad_block_is_reentered_after_the_break(capsys):
    x = inputs(3, requires_grad=True)
    check_resume(_no_grad_break, x, graphs=2)
    assert "inside True" not in capsys.readouterr().out


def test_nested_grad_modes_survive_the_break():
    check_resume(_enable_inside_no_grad, inputs(3, requires_grad=True), graphs=2)


def test_second_break_inside_the_block_resumes_too():
    # The first resume function gets the block's __exit__ on its stack only (not as a local too),
    # so its own break can hand it on again.
    report = check_resume(
        _two_breaks_inside_no_grad, inputs(3, requires_grad=True), graphs=3, breaks=2
    )
    assert not any(f["no_resume"] for f in report.frames), str(report)


def test_grad_mode_restored_after_an_error_inside_the_block():
    torchlite.reset()
    compiled = torchlite.compile(_raise_inside_no_grad)
    x = inputs(3, requires_grad=True)
    for _ in range(2):
        try:
            compiled(x)
        except RuntimeError:
            pass
        else:
            raise AssertionError("expected a RuntimeError")
        assert torch.is_grad_enabled()


def test_backward_through_values_from_both_sides():
    x1 = inputs(3, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    torchlite.reset()
    out = torchlite.compile(_no_grad_break)(x1)
    out.sum().backward()
    _no_grad_break(x2).sum().backward()
    assert_same(x1.grad, x2.grad)
