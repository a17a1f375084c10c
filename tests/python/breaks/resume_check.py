"""Shared checks for the resume-function tests: parity with eager, graph and break counts from
explain(), and proof that code after a break ran compiled (a resume frame with ops, or a
loop-body frame with ops for a break inside a loop)."""

import torch
from helpers import assert_same, clone_args, counters

import torchlite


def resume_frames(report):
    """explain() records of resume functions (the frame after a break) that captured ops."""
    return [f for f in report.frames if "(resumed at line" in f["code_name"] and f["ops"] > 0]


def loop_body_frames(report):
    """explain() records of loop-body functions (a loop that broke, one iteration) with ops."""
    return [f for f in report.frames if "(loop body at line" in f["code_name"] and f["ops"] > 0]


def check_resume(fn, *args, graphs, breaks=1, compiled_after=True, loop_body=False, calls=3):
    """Compiles `fn`, compares `calls` calls with eager, and checks what explain() saw: `graphs`
    graphs and `breaks` breaks in all, (with `compiled_after`) a resume function with ops and
    (with `loop_body`) a loop-body function with ops. Calls after the first must be served from
    the cache. Returns the explain report."""
    torchlite.reset()
    report = torchlite.explain(fn)(*clone_args(args))
    assert report.graph_count == graphs, str(report)
    assert report.graph_break_count == breaks, str(report)
    if compiled_after:
        assert resume_frames(report), str(report)
    if loop_body:
        assert loop_body_frames(report), str(report)
    torchlite.reset()
    compiled = torchlite.compile(fn)
    first = None
    for i in range(calls):
        expected = fn(*clone_args(args))
        actual = compiled(*clone_args(args))
        assert_same(actual, expected, path=f"call {i}")
        if i == 0:
            first = counters()
    after = counters()
    assert after["frames"] == first["frames"], (first, after)
    assert after["graphs"] == first["graphs"], (first, after)
    return report


def inputs(*shape, requires_grad=False):
    return torch.randn(*shape, requires_grad=requires_grad)
