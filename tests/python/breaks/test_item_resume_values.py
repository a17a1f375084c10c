"""A number from `.item()` that outlives its break (`s = x.abs().max().item(); return x / s`)
reaches the resume function as a Python float or int, a new one on every call. The resume
function takes it as a per-call graph input (capture/scalar_inputs.h): a 0-d tensor made from
the call's number where a tensor op uses it, guarded by its type only, so a new value runs the
same capture. A use that reads the number in Python (a branch, `float` arithmetic, a size) still
guards it by value: right for every value, one capture per value seen. Every call is checked
against eager, with fresh values."""

import math

import pytest
import torch
from helpers import assert_same, counters

import torchlite


def _scaled_by_max(x):
    s = x.abs().max().item()
    return x / s


def _times_sum(x):
    n = int(x.sum().item())
    return x * n


def _number_inputs(fn, args):
    """The graphs' inputs made from numbers, and the kinds of `fn`'s graph breaks."""
    torchlite.reset()
    out = torchlite.explain(fn)(*args)
    inputs = [g for g in out.guards if "NUMBER_TYPE" in g]
    return inputs, {b.kind for b in out.break_reasons}


def _captures(fn, make_args, calls=6, **kw):
    """`fn` compiled, called `calls` times on fresh arguments against eager; returns the
    captures (frames) after the first two calls and the recompiles over all calls. The numbers
    must reach a graph as inputs, with no break but the reads of the numbers themselves."""
    inputs, kinds = _number_inputs(fn, make_args(0))
    assert inputs, "no number became a graph input"
    assert kinds <= {"data_dependent_op", "unsupported_builtin"}, kinds
    torchlite.reset()
    compiled = torchlite.compile(fn, **kw)
    start = counters()
    after_two = None
    for i in range(calls):
        args = make_args(i)
        assert_same(compiled(*args), fn(*args))
        if i == 1:
            after_two = counters()
    end = counters()
    return end["frames"] - after_two["frames"], end["recompiles"] - start["recompiles"]


def _rand(i):
    return (torch.rand(8) * 3 + 0.1 + i,)


@pytest.mark.parametrize("fn", [_scaled_by_max, _times_sum])
def test_numbers_from_item_past_a_break_give_eagers_values(fn):
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for _ in range(5):
        x = torch.rand(8) * 3 + 0.1
        assert_same(compiled(x), fn(x))


@pytest.mark.parametrize("fn", [_scaled_by_max, _times_sum])
def test_numbers_from_item_past_a_break_do_not_recapture_per_value(fn):
    torchlite.reset()
    compiled = torchlite.compile(fn)
    compiled(torch.rand(8) * 3 + 0.1)
    compiled(torch.rand(8) * 3 + 0.1)
    before = counters()
    for i in range(4):
        x = torch.full((8,), 1.5 + i)
        assert_same(compiled(x), fn(x))
    assert counters()["recompiles"] == before["recompiles"]
    assert counters()["frames"] == before["frames"]


def _float_arithmetic(x):
    s = x.mean().item()
    return (x - s) * s + 1.0 - (s - x) / (x.abs() + 1)


def _int_arithmetic(x):
    n = int(x.sum())
    return x * n - n + (x > n).float()


def _python_arithmetic(x):
    s = x.mean().item()
    n = int(x.sum())
    a = 1 - s
    a += 0.25
    return x * a + (-s) * x + x / (s + 1e-6) - (s / 2) * x + x * (n * 0.5)


def _comparisons(x):
    s = float(x.median())
    return (x > s).float() + (x <= s).float() * 2 + (x == s).float()


def _where_and_masked_fill(x):
    s = x.min().item()
    return torch.where(x > 0.5, x, s) + x.masked_fill(x < 0.3, s)


def _clamped(x):
    lo = x.min().item()
    hi = x.mean().item()
    return x.clamp(min=lo + 0.1, max=hi) + torch.clamp(x, None, hi) + x.clamp_min(lo)


def _full_of_the_number(x):
    s = x.max().item()
    return torch.full((3, x.size(0)), s) + x


def _full_like_of_the_number(x):
    s = x.max().item()
    return torch.full_like(x, s) * x + torch.full_like(x, s, dtype=torch.float64)


def _power(x):
    s = x.max().item()
    return x**s + s**x


@pytest.mark.parametrize(
    "fn",
    [
        _float_arithmetic,
        _int_arithmetic,
        _python_arithmetic,
        _comparisons,
        _where_and_masked_fill,
        _clamped,
        _full_of_the_number,
        _full_like_of_the_number,
        _power,
    ],
    ids=[
        "float",
        "int",
        "python_arithmetic",
        "compare",
        "where_masked_fill",
        "clamp",
        "full",
        "full_like",
        "pow",
    ],
)
def test_a_number_in_tensor_ops_is_one_capture_for_every_value(fn):
    frames, recompiles = _captures(fn, _rand, calls=6)
    assert frames == 0, "the resume function was captured again for a new value"
    assert recompiles == 0


def _int_tensor_times_float(x):
    s = x.float().mean().item()
    return x * s, x / s, s - x, (x + s).dtype


def _double_divided(x):
    s = x.sum().item()
    return x / s, x * s


def _half_compared(x):
    s = x[0].item() + 0.1  # not a half: eager compares with half(s)
    y = torch.where(torch.arange(4) == 1, s, x)  # y[1] is half(s)
    return (y == s).float(), (y > s).float(), y * s


def _zero_dim_times_number(x):
    s = x.max().item()
    return x.sum() * s, x.half().sum() * s


@pytest.mark.parametrize(
    "fn, make",
    [
        (_half_compared, lambda i: (torch.rand(4, dtype=torch.float16) + i,)),
        (_int_tensor_times_float, lambda i: (torch.randint(1, 9 + i, (6,)),)),
        (_double_divided, lambda i: (torch.rand(5, dtype=torch.float64) + i,)),
        (_zero_dim_times_number, lambda i: (torch.rand(4) + i,)),
        (_float_arithmetic, lambda i: (torch.rand(5, dtype=torch.bfloat16) + i,)),
    ],
    ids=["half_compared", "int_tensor", "float64", "zero_dim", "bfloat16"],
)
def test_a_number_input_keeps_eagers_dtypes_and_precision(fn, make):
    frames, _ = _captures(fn, make, calls=5)
    assert frames == 0


def _number_in_a_branch(x):
    s = x.mean().item()
    if s > 0.5:
        return x * s
    return x - s


def _number_in_python_math(x):
    s = x.mean().item()
    return x * math.exp(s) + x * (1 / s)  # math.exp reads s; so does 1 / s (raises for 0)


def test_a_number_read_by_python_is_guarded_by_value_and_right():
    torchlite.reset()
    for fn in (_number_in_a_branch, _number_in_python_math):
        compiled = torchlite.compile(fn)
        for v in (0.2, 0.9, 0.2, 0.7, 0.9):
            x = torch.full((4,), v)
            assert_same(compiled(x), fn(x))
        # the same value again: no capture
        before = counters()["frames"]
        x = torch.full((4,), 0.7)
        assert_same(compiled(x), fn(x))
        assert counters()["frames"] == before


def _arange_of_the_number(x):
    n = int(x.sum().item())
    return torch.arange(n) * 2 + x.size(0)


def _view_by_the_number(x):
    n = int(x.numel() // x[0].item())
    return x.view(n, -1) * 2


def test_a_number_deciding_a_size_is_guarded_by_value_and_right():
    torchlite.reset()
    compiled = torchlite.compile(_arange_of_the_number)
    for v in (1, 2, 3, 2):
        x = torch.full((3,), float(v))
        assert_same(compiled(x), _arange_of_the_number(x))
    compiled = torchlite.compile(_view_by_the_number)
    for v in (2, 4, 2):
        x = torch.full((8,), float(v))
        assert_same(compiled(x), _view_by_the_number(x))


def _two_breaks(x):
    s = x.max().item()
    y = x / s
    print(end="")  # a second graph break: s lives on
    z = y * s + s
    t = z.min().item()
    return z - t, s


def test_a_number_across_two_breaks_is_each_calls_own():
    frames, recompiles = _captures(_two_breaks, _rand, calls=6)
    assert frames == 0
    assert recompiles == 0


def _loop_of_numbers(xs):
    out = []
    for x in xs:
        s = x.sum().item()
        out.append(x * s)
    return out


def test_numbers_in_a_loop_body_do_not_recapture_per_value():
    def make(i):
        return ([torch.rand(3) + i + k for k in range(3)],)

    # NOTE: the first call captures each iteration's list length; no value captures after it.
    frames, _ = _captures(_loop_of_numbers, make, calls=5)
    assert frames == 0


def test_a_resume_function_guards_the_numbers_type():
    """An int where the capture took a float (or a bool where it took an int) is another
    capture, with eager's result."""

    def f(x, s):
        y = x * 2
        print(end="")
        return y * s

    torchlite.reset()
    compiled = torchlite.compile(f)
    x = torch.rand(4)
    for s in (1.5, 2.5, 3, True, 4):
        assert_same(compiled(x, s), f(x, s))


def _scaled_softmax(x):
    s = x.max().item()
    return (x / s).softmax(-1) * s


def test_a_number_and_new_sizes_capture_the_resume_function_at_most_twice():
    """The resume function goes size-generic as any frame; the number stays an input."""
    torchlite.reset()
    compiled = torchlite.compile(_scaled_softmax)
    sizes = [5, 9, 17, 3, 40, 11, 64, 7]
    before = counters()["frames"]
    for n in sizes:
        x = torch.rand(2, n) + n
        assert_same(compiled(x), _scaled_softmax(x))
    # the frame before the break: once per size (its max is not size-generic); after: twice
    assert counters()["frames"] - before <= len(sizes) + 2


def _scaled_matmul(x, w):
    s = w.detach().abs().max().item()
    return ((x @ w) * (1 - s) / s).tanh().sum()


def test_a_number_input_in_a_training_graph_gives_eagers_gradients():
    torchlite.reset()
    compiled = torchlite.compile(_scaled_matmul)
    frames = None
    for i in range(5):
        x = torch.randn(4, 8)
        w = torch.randn(8, 3) * (i + 1)
        w1, w2 = w.clone().requires_grad_(), w.clone().requires_grad_()
        out, expected = compiled(x, w1), _scaled_matmul(x, w2)
        out.backward()
        expected.backward()
        assert_same(out, expected)
        assert_same(w1.grad, w2.grad)
        if i == 1:
            frames = counters()["frames"]
    assert counters()["frames"] == frames


def _full_like_kept_by_value(x):
    s = x.max().item()
    # NOTE: a transposed x's result keeps x's strides and an int result converts with eager's
    # checks: both keep the value guard (still eager's values and strides)
    y = torch.full_like(x.t(), s)
    return y, y.stride(), torch.full_like(x, s, dtype=torch.int64)


def test_full_like_of_other_layouts_and_int_results_are_eagers():
    torchlite.reset()
    compiled = torchlite.compile(_full_like_kept_by_value)
    for i in range(4):
        x = torch.rand(3, 5) * 4 + i
        assert_same(compiled(x), _full_like_kept_by_value(x))


def _add_with_alpha(x, y):
    s = x.max().item()
    z = y.clone()
    z.add_(x, alpha=s)
    return x.add(y, alpha=s) + torch.add(x, y, alpha=-s) - torch.sub(x, y, alpha=s) + z


def _add_with_alpha_mixed(x, y):
    s = x.float().max().item()
    # a half x and a float32 y give float32; two halves compute in float32 and round once
    return torch.add(x, y, alpha=s), x.add(x, alpha=s), x.sub(y.half(), alpha=s)


def _int_python_arithmetic(x, t):
    n = t.sum().item()
    m = n + 1
    return x * m + x * (2 * n - 3) + x * (-n) + (n // 3) * x + x * (n % 5), t * (n + 7)


@pytest.mark.parametrize(
    "fn, make",
    [
        (_add_with_alpha, lambda i: (torch.rand(6) * 3 + 0.1 + i, torch.rand(6))),
        (
            _add_with_alpha_mixed,
            # NOTE: 64 elements: eager's scalar tail of a half add rounds alpha * y to half
            # too, its vector body does not (the graph computes as the vector body)
            lambda i: (torch.rand(64, dtype=torch.float16) + i, torch.rand(64)),
        ),
        (_int_python_arithmetic, lambda i: (torch.rand(6), torch.randint(-9, 9 + i, (5,)))),
    ],
    ids=["add_alpha", "add_alpha_half", "int_arithmetic"],
)
def test_alpha_and_int_arithmetic_take_the_number_as_an_input(fn, make):
    frames, recompiles = _captures(fn, make, calls=6)
    assert frames == 0, "the resume function was captured again for a new value"
    assert recompiles == 0


def _times_int_plus_one(x, t):
    n = t.sum().item()
    return x * (n + 1), x * (3 * n - 2)


def test_int_arithmetic_beyond_int32_is_guarded_by_value_and_right():
    """The graph computes `n + 1` in int64 for ints within +-2**31: a number beyond fails
    that range guard and is captured by value instead (2**62: `3 * n - 2` leaves int64, where
    eager converts the Python int to a double; without the guard the graph's int64 wraps)."""
    torchlite.reset()
    compiled = torchlite.compile(_times_int_plus_one)
    x = torch.rand(4, dtype=torch.float64)
    for n in (3, 2**40, 5, -(2**35), 2**31, 2**31 + 1, 2**62, 7):
        t = torch.tensor([n])
        assert_same(compiled(x, t), _times_int_plus_one(x, t))


def _dropout_by_number(x):
    p = x.mean().item()
    return torch.nn.functional.dropout(x, p=p, training=True) * 2


def test_dropout_of_a_number_keeps_eagers_random_bits():
    """dropout's p stays guarded by value: its noise is `bernoulli_(1 - p)` with p a double
    (a tensor p draws through another kernel, other bits)."""
    torchlite.reset()
    compiled = torchlite.compile(_dropout_by_number)
    for v in (0.25, 0.5, 0.25, 0.0, 0.75):
        x = torch.full((64,), v)
        torch.manual_seed(3)
        out = compiled(x)
        torch.manual_seed(3)
        assert_same(out, _dropout_by_number(x))
