"""Python operators on tensors (arithmetic, comparison, bitwise, reflected, in-place, @)."""

import operator

import pytest
import torch
from helpers import check

DTYPES = [torch.float32, torch.float64]
SHAPES = [(3, 4), (2, 1, 4)]

BINARY = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "truediv": lambda x, y: x / (y.abs() + 0.5),
    "floordiv": lambda x, y: x // (y.abs() + 0.5),
    "mod": lambda x, y: x % (y.abs() + 0.5),
    "pow": lambda x, y: (x.abs() + 0.1) ** y,
    "neg_pos": lambda x, y: -x + (+y),
    "lt_gt": lambda x, y: (x < y, x > y),
    "le_ge": lambda x, y: (x <= y, x >= y),
    "eq_ne": lambda x, y: (x == y, x != x),  # noqa: PLR0124
    "chained": lambda x, y: (x * 2 - y) / 3 + x * y - 1,
    "operator_module": lambda x, y: operator.add(operator.mul(x, y), x),
}

REFLECTED = {
    "radd": lambda x, y: 2 + x,
    "rsub": lambda x, y: 1.5 - x,
    "rmul": lambda x, y: 2 * x,
    "rtruediv": lambda x, y: 1.0 / (x.abs() + 1),
    "rpow": lambda x, y: 2**x,
    "scalar_cmp": lambda x, y: (0 < x, 0.5 >= x),
}


def _inputs(shape, dtype):
    return torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_operator_matches_eager(name, dtype, shape):
    check(BINARY[name], *_inputs(shape, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(REFLECTED))
def test_reflected_operator_matches_eager(name, dtype):
    check(REFLECTED[name], *_inputs((3, 4), dtype))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_broadcasting_operators_match_eager(shape):
    def fn(x, row, col):
        return x + row, x * col, row - col

    x = torch.randn(shape)
    check(fn, x, torch.randn(shape[-1]), torch.randn(shape[:-1] + (1,)))


def test_bitwise_operators_on_int_tensors_match_eager():
    def fn(a, b):
        return a & b, a | b, a ^ b, ~a, a << 2, a >> 1

    check(fn, torch.randint(0, 64, (3, 5)), torch.randint(0, 64, (3, 5)))


def test_bitwise_operators_on_bool_tensors_match_eager():
    def fn(x, y):
        m, n = x > 0, y > 0
        return m & n, m | n, m ^ n, ~m

    check(fn, torch.randn(4, 4), torch.randn(4, 4))


def test_inplace_augmented_assignment_matches_eager():
    def fn(x, y):
        z = x.clone()
        z += y
        z *= 2
        z -= 1
        z /= 4
        return z

    check(fn, *_inputs((3, 4), torch.float32))


def test_inplace_methods_on_clone_match_eager():
    def fn(x, y):
        z = x.clone()
        z.add_(y)
        z.mul_(0.5).relu_()
        z.clamp_(max=0.7)
        return z, x

    check(fn, *_inputs((3, 4), torch.float32))


def test_inplace_on_input_mutates_caller_tensor_like_eager():
    def fn(x, y):
        x.add_(y)
        x[0] = 0.0
        return x * 2

    # check() compares the inputs after each call: the caller sees the mutation.
    check(fn, *_inputs((3, 4), torch.float32))


def test_inplace_on_view_updates_base_like_eager():
    def fn(x):
        z = x.clone()
        v = z[:, 1:]
        v.mul_(10)
        z.t()[0].fill_(-1)
        return z

    check(fn, torch.randn(3, 4))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "shapes",
    [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((2, 3, 4), (2, 4, 5)), ((4,), (4,))],
    ids=str,
)
def test_matmul_operator_matches_eager(shapes, dtype):
    def fn(a, b):
        return a @ b

    check(fn, torch.randn(shapes[0], dtype=dtype), torch.randn(shapes[1], dtype=dtype))


def test_matmul_with_epilogue_matches_eager():
    def fn(a, b, bias):
        return torch.relu(a @ b + bias) * 2

    check(fn, torch.randn(3, 4), torch.randn(4, 5), torch.randn(5))


def test_imatmul_and_rmatmul_match_eager():
    def fn(a, b):
        c = a.clone()
        c @= b
        return c, a.__rmatmul__(b.t())

    check(fn, torch.randn(3, 3), torch.randn(3, 3))


def test_scalar_tensor_mixed_dtype_promotion_matches_eager():
    def fn(i, f):
        return i + f, i * 2.5, i / 2, (i > 0) + 1, f.double() + i

    check(fn, torch.randint(-3, 3, (4,)), torch.randn(4))
