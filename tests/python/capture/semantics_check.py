"""`same_as_eager`: one program run eagerly and compiled (default mode, so breaks are allowed)
on fresh inputs, compared by value, by exception (type and message) and by what it mutated."""

from __future__ import annotations

import torch
from helpers import assert_same, clone_args, fresh_like

import torchlite


def _outcome(fn, args):
    args = clone_args(args)
    try:
        return ("value", fn(*args), args)
    except Exception as e:  # noqa: BLE001 - the exception is the outcome being compared
        return ("raised", (type(e), str(e)), args)


def same_as_eager(fn, *args, fullgraph=False):
    """Runs `fn` eagerly and compiled twice (the second call from the cache) plus once on fresh
    random inputs, and asserts the outcomes agree. Returns the compiled callable."""
    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=fullgraph)
    for i, a in enumerate([args, args, fresh_like(args)]):
        want = _outcome(fn, a)
        got = _outcome(compiled, a)
        assert got[0] == want[0], (
            f"call {i}: compiled {got[0]} {got[1]!r}, eager {want[0]} {want[1]!r}"
        )
        if want[0] == "raised":
            assert got[1] == want[1], f"call {i}: raised {got[1]!r}, eager {want[1]!r}"
        else:
            assert_same(got[1], want[1], path=f"call {i} out")
        assert_same(got[2], want[2], path=f"call {i} args after call")
    return compiled


def randn(*shape):
    return torch.randn(*shape)
