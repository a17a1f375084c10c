"""A break inside an inlined call: one break for both frames (the graph runs the code before it
in the caller and the callee), the callee goes on in its resume function, the caller after its
call in its own, and live values on the caller's stack survive, NULLs included
(test_resume_nested.py has deeper cases)."""

import torch
from resume_check import check_resume, inputs


def print_and_return(y):
    z = y * 3
    print("inside")
    return z + 1


def _live_tensor_on_stack(x, y):
    return x + print_and_return(y)


def _nested_call_with_null(x):
    a = x.sin()
    return torch.relu(print_and_return(a)) * 2


def _method_pending(x):
    return x.add(print_and_return(x), alpha=2)


def test_live_tensor_on_stack_mid_expression():
    # graphs: `y * 3` (the callee, before the break), `z + 1` (its rest), `x + r` (the caller's)
    check_resume(_live_tensor_on_stack, inputs(4), inputs(4), graphs=3, breaks=1)


def test_pending_call_below_the_break_keeps_its_null():
    # graphs: sin and `y * 3`, then `z + 1`, then relu and `* 2`
    check_resume(_nested_call_with_null, inputs(4), graphs=3, breaks=1)


def test_pending_method_call_below_the_break():
    # NOTE: the bound method x.add is a fresh object per call, passed to the resume function: it
    # is guarded by its __self__ and name, not its identity, so later calls hit the cache.
    check_resume(_method_pending, inputs(4), graphs=3, breaks=1)
