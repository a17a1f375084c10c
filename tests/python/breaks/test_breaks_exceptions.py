"""Exceptions from compiled code: same type and message as eager, user frames in the traceback,
and the compiler keeps working afterwards."""

import traceback

import pytest
import torch
from helpers import assert_same

import torchlite


def _raises_value_error(x):
    y = x + 1
    if x.shape[0] == 3:
        raise ValueError(f"length {x.shape[0]} is not allowed")
    return y


def _bad_matmul(a, b):
    c = a * 2
    return (c @ b).relu()


def _calls_bad_matmul(a, b):
    return _bad_matmul(a, b) + 1


def _eager_error(fn, *args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return info.value


def _assert_same_error(compiled, fn, *args, user_frames):
    expected = _eager_error(fn, *args)
    with pytest.raises(type(expected)) as info:
        compiled(*args)
    assert type(info.value) is type(expected)
    assert str(info.value) == str(expected)
    names = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    for name in user_frames:
        assert name in names, names


def test_user_value_error_propagates_like_eager():
    # NOTE: default fullgraph=False: under fullgraph=True a raise may be a user_exception break.
    compiled = torchlite.compile(_raises_value_error)
    x = torch.randn(3)
    _assert_same_error(compiled, _raises_value_error, x, user_frames=["_raises_value_error"])
    # Other shapes still run, and raising again works too.
    y = torch.randn(4)
    assert_same(compiled(y), y + 1)
    _assert_same_error(compiled, _raises_value_error, x, user_frames=["_raises_value_error"])


def test_torch_op_error_has_eager_type_and_message():
    compiled = torchlite.compile(_bad_matmul)
    a, b = torch.randn(2, 3), torch.randn(4, 5)
    _assert_same_error(compiled, _bad_matmul, a, b, user_frames=["_bad_matmul"])


def test_torch_op_error_in_inlined_callee_names_both_functions():
    compiled = torchlite.compile(_calls_bad_matmul)
    a, b = torch.randn(2, 3), torch.randn(4, 5)
    _assert_same_error(
        compiled, _calls_bad_matmul, a, b, user_frames=["_calls_bad_matmul", "_bad_matmul"]
    )


def test_compiled_function_works_after_op_error():
    compiled = torchlite.compile(_bad_matmul)
    with pytest.raises(RuntimeError):
        compiled(torch.randn(2, 3), torch.randn(4, 5))
    a, b = torch.randn(2, 3), torch.randn(3, 5)
    assert_same(compiled(a, b), _bad_matmul(a, b))


def test_wrong_argument_count_raises_type_error_like_eager():
    compiled = torchlite.compile(_bad_matmul)
    expected = _eager_error(_bad_matmul, torch.randn(2))
    with pytest.raises(TypeError) as info:
        compiled(torch.randn(2))
    assert str(info.value) == str(expected)


def test_keyerror_and_indexerror_from_user_code_propagate():
    def fn(x, d):
        return x * d["missing"]

    compiled = torchlite.compile(fn)
    with pytest.raises(KeyError) as info:
        compiled(torch.randn(2), {"present": 1})
    assert str(info.value) == str(_eager_error(fn, torch.randn(2), {"present": 1}))

    def g(x):
        return x[5]

    compiled_g = torchlite.compile(g)
    expected = _eager_error(g, torch.randn(2))
    with pytest.raises(IndexError) as info:
        compiled_g(torch.randn(2))
    assert str(info.value) == str(expected)


def test_assertion_in_user_code_propagates():
    def fn(x):
        assert x.dim() == 2, "need a matrix"
        return x.t()

    compiled = torchlite.compile(fn)
    assert_same(compiled(torch.ones(2, 3)), torch.ones(3, 2))
    with pytest.raises(AssertionError, match="need a matrix"):
        compiled(torch.ones(3))
