"""Objects made inside the compiled call and live at a graph break (issue 22): a
types.SimpleNamespace, an object() sentinel, a torch.Generator. Each reaches the resume function
as a new object on every call; an identity guard on it failed every time, so each identical call
recompiled until the cache limit. They are guarded by their type and the attributes the resumed
code reads instead (capture/made_in_call.h), and never baked into a graph as constants.

PYTEST_DONT_REWRITE: the programs' own asserts keep their plain messages.
"""

import types

import pytest
import torch
from conformance_check import check_captured_program, opaque, t43

import torchlite


def run(fn, make_args=t43, **options):
    return check_captured_program(fn, make_args, **options)


def test_namespace_made_in_the_call_read_after_breaks():
    def fn(x):
        o = types.SimpleNamespace(a=x * 2, n=3)
        opaque()
        o.a = o.a + 1
        o.n += 1
        opaque()
        return o.a * o.n, o.n, sorted(vars(o))

    run(fn, breaks=2)


def test_namespace_attribute_probes_after_a_break():
    def fn(x):
        o = types.SimpleNamespace(a=x)
        opaque()
        return getattr(o, "b", x) * 2, hasattr(o, "a"), vars(o)["a"] + 1

    run(fn, breaks=1)


def test_namespace_missing_attribute_raises_at_the_users_line():
    def fn(x):
        o = types.SimpleNamespace(a=x)
        opaque()
        return o.b + x

    run(fn, raises=AttributeError)


def test_two_objects_made_in_the_call_compared_by_identity():
    def fn(x):
        o = types.SimpleNamespace(a=x)
        opaque()
        s = object()
        opaque()
        return o.a + 1, s is o, s is not None

    run(fn, breaks=2)


def test_sentinel_object_held_in_a_dict_across_a_break():
    def fn(x):
        s = object()
        d = {"k": s}
        opaque()
        return x + (1 if d["k"] is s else 2)

    run(fn, breaks=1)


@torchlite.disable
def make_namespace(x):
    """An object made by code the trace cannot see: it reaches the resume function new."""
    return types.SimpleNamespace(a=x + 1, sentinel=object(), n=2)


def test_namespace_from_an_opaque_call_read_after_breaks():
    def fn(x):
        o = make_namespace(x)
        y = o.a * o.n
        opaque()
        return y + o.a, o.sentinel is not None, o.n

    run(fn, breaks=2)


def test_generator_made_in_the_call_draws_after_breaks():
    def fn(x):
        g = torch.Generator()
        g.manual_seed(3)
        for _ in range(2):
            opaque()
            x = x + torch.rand(x.shape, generator=g)
        return x

    run(fn, breaks=6)


def test_generator_passed_in_is_still_captured():
    # NOTE: not made in the call: the draw stays in the graph (an identity-guarded generator).
    def fn(x, g):
        return x + torch.rand(x.shape, generator=g)

    g = torch.Generator()
    report = torchlite.explain(fn)(torch.randn(3), g)
    assert report.graph_break_count == 0, str(report)


def test_namespace_and_sentinel_made_and_returned_in_one_graph():
    def fn(x):
        missing = object()
        o = types.SimpleNamespace(scale=2, bias=x + 1)
        o.extra = getattr(o, "nothing", missing)
        return o.bias * o.scale, o.extra is missing, o

    compiled = torchlite.compile(fn)
    x = torch.randn(2, 3)
    out, flag, o = compiled(x)
    torch.testing.assert_close(out, (x + 1) * 2)
    assert flag is True and isinstance(o, types.SimpleNamespace)
    assert sorted(vars(o)) == ["bias", "extra", "scale"] and o.scale == 2
    _, _, o2 = compiled(x)
    assert o2 is not o and o2.extra is not o.extra  # made anew on every call, as eagerly
    assert torchlite.explain(fn)(x).graph_break_count == 0


@torchlite.disable
def numpy_scale(n):
    np = pytest.importorskip("numpy")
    return np.sqrt(np.float64(n))


def test_numpy_scalar_from_an_opaque_call_guarded_by_value():
    # NOTE: a new numpy.float64 on every call (an identity guard failed each time).
    pytest.importorskip("numpy")

    def fn(x):
        s = numpy_scale(x.shape[-1])
        return x * float(s), x / s

    run(fn, breaks=1)


def test_numpy_scalar_value_change_recompiles():
    np = pytest.importorskip("numpy")

    def fn(x, s):
        return x * float(s)

    compiled = torchlite.compile(fn)
    x = torch.randn(3)
    for s in (np.float64(2.0), np.float64(2.0), np.float64(3.0), np.int64(3)):
        torch.testing.assert_close(compiled(x, s), fn(x, s))


@torchlite.disable
def numpy_nan():
    np = pytest.importorskip("numpy")
    return np.float64("nan") * np.float64(1.0)


def test_numpy_nan_from_an_opaque_call_hits_the_cache():
    pytest.importorskip("numpy")

    def fn(x):
        s = numpy_nan()
        return torch.nan_to_num(x * float(s), nan=1.5)

    run(fn, breaks=1)
