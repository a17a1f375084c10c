"""collections.deque in traced code (issue 22), as Dynamo traces it: a deque made in the trace,
one passed in or held by a module, one live at a graph break, one iterated. Each program runs
eagerly and compiled on fresh inputs (conformance_check.check_program), its graph breaks are
counted, and a second identical call must hit the cache (a deque made in the call reached each
resume function as an identity-guarded object before: a recompile on every call).

PYTEST_DONT_REWRITE: the programs' own asserts keep their plain messages.
"""

import collections

import pytest
import torch
from conformance_check import check_captured_program, check_program

import torchlite


def t4():
    return (torch.randn(4),)


def run(fn, make_args=t4, **options):
    """conformance_check.check_captured_program with one tensor of 4 as the default input."""
    return check_captured_program(fn, make_args, **options)


def test_deque_made_in_traced_code():
    def fn(x):
        q = collections.deque([x], maxlen=3)
        q.append(x + 1)
        q.appendleft(x - 1)
        q.append(x * 2)
        q.rotate(1)
        return torch.stack(list(q)), len(q)

    run(fn)


def test_deque_methods_indexing_and_the_deque_returned():
    def fn(x):
        q = collections.deque(maxlen=4)
        q.extend([x, x * 2, x * 3])
        q.extendleft((x - 1, x - 2))  # full: drops from the right
        a = q.pop() + q.popleft()
        q.insert(1, x * 5)
        q.rotate(-2)
        q.reverse()
        q[0] = q[0] + 10
        c = q.copy()
        c.clear()
        r = collections.deque(range(5), 2)
        return (
            a,
            q[0] * q[-1],
            q,
            c,
            r,
            q.maxlen,
            r.count(4),
            r.index(4),
            bool(c),
            len(q),
            isinstance(q, collections.deque),
            type(q) is collections.deque,
            3 in r,
        )

    run(fn)


def test_deque_iterated_and_an_item_removed():
    def fn(x):
        q = collections.deque([1, 2, 3, 2])
        q.remove(2)
        total = x
        for k in q:
            total = total * k
        return total, list(reversed(list(q))), [v for v in collections.deque(q, maxlen=2)]

    run(fn)


def test_deque_live_at_a_graph_break_hits_the_cache_on_a_second_call():
    def fn(x):
        q = collections.deque([x], maxlen=3)
        q.append(x + 1)
        if x.sum() > 0:  # a graph break: the deque is handed to the resume function
            q.append(x * 2)
        else:
            q.appendleft(x * 3)
        q.append(x - 1)
        return torch.stack(list(q)), len(q), q.maxlen

    for sign in (1.0, -1.0):
        run(fn, lambda sign=sign: (torch.rand(4) * sign,), breaks=1)


def test_deque_iterated_across_a_graph_break():
    def fn(x):
        q = collections.deque([x, x + 1, x + 2])
        out = []
        for t in q:
            if t.sum() > 0:  # a break inside the loop over the deque
                t = t * 2
            out.append(t)
        return torch.stack(out), q

    # NOTE: a break per iteration of the loop (the loop body runs as functions of its own), as
    # over a list.
    run(fn, lambda: (torch.randn(4),), breaks=4)


def test_deque_passed_in_is_mutated_in_place():
    def fn(x, q):
        q.append(x)
        first = q.popleft()
        return first + q[-1], len(q)

    def make():
        return torch.randn(4), collections.deque([torch.randn(4), torch.randn(4)], maxlen=2)

    run(fn, make)


def test_deque_held_by_a_module_is_a_rolling_window():
    class Smooth(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.window = collections.deque(maxlen=3)

        def forward(self, x):
            self.window.append(x)
            return torch.stack(list(self.window)).mean(0)

    m = Smooth()
    compiled = torchlite.compile(m)
    eager = Smooth()
    for _ in range(6):
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x), eager(x))
        assert len(m.window) == len(eager.window)
        for a, b in zip(m.window, eager.window):
            assert a is b  # the caller's own tensors, not copies
    before = dict(torchlite.counters())
    x = torch.randn(4)
    compiled(x)
    eager(x)
    assert torchlite.counters()["graphs"] == before["graphs"]  # the full window: one entry
    assert type(m.window) is collections.deque and m.window.maxlen == 3


def test_deque_mutated_while_iterated_raises_as_eager():
    def fn(x):
        q = collections.deque([1, 2])
        for k in q:
            x = x + k
            q.append(k)
        return x

    check_program(fn, t4)


@pytest.mark.parametrize("bad", ["pop", "index", "maxlen"])
def test_deque_errors_are_eagers(bad):
    def fn(x):
        q = collections.deque([1], maxlen=1)
        if bad == "pop":
            q.pop()
            q.popleft()
        elif bad == "index":
            q.index(5)
        else:
            collections.deque([], maxlen=-1)
        return x + 1

    check_program(fn, t4)
