"""Torch functions whose eager bodies capture cannot trace (torch.vmap inside), captured through a
plain-Python stand-in of the same result (torchlite/_polyfills.py): one graph, values equal eager.
"""

import pytest
import torch
from helpers import check

import torchlite

scan_module = pytest.importorskip("torch._higher_order_ops.associative_scan")
associative_scan = scan_module.associative_scan


def _ssm_combine(left, right):  # the selective-scan recurrence h_t = a_t * h_{t-1} + b_t
    a_left, b_left = left
    a_right, b_right = right
    return a_left * a_right, a_right * b_left + b_right


def _graphs_and_breaks(fn, *args):
    report = torchlite.explain(fn)(*args)
    return report.graph_count, report.graph_break_count


def test_is_compiling_path_with_a_tuple_scan_is_one_graph():
    # NOTE: the shape of transformers' Mamba: the scan runs only while compiling
    def fn(a, b, c):
        if torch.compiler.is_compiling():
            _, states = associative_scan(_ssm_combine, (a, b), dim=2, combine_mode="generic")
        else:  # eager: the sequential recurrence
            h, steps = torch.zeros_like(b[:, :, 0]), []
            for i in range(b.shape[2]):
                h = a[:, :, i] * h + b[:, :, i]
                steps.append(h)
            states = torch.stack(steps, 2)
        return (states * c).sum(-1)

    a = torch.rand(2, 3, 7, 4) * 0.9
    check(fn, a, torch.randn(2, 3, 7, 4), torch.randn(4))
    assert _graphs_and_breaks(fn, a, torch.randn(2, 3, 7, 4), torch.randn(4)) == (1, 0)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("reverse", [False, True])
def test_single_tensor_scan_over_any_dim_either_direction(dim, reverse):
    def fn(x):
        scan = associative_scan(
            torch.logaddexp, x.cos(), dim, reverse=reverse, combine_mode="generic"
        )
        return scan * 2

    check(fn, torch.randn(4, 5, 6))
    assert _graphs_and_breaks(fn, torch.randn(4, 5, 6)) == (1, 0)


def test_list_input_gives_a_list_and_max_combine():
    def fn(x, y):
        out = associative_scan(
            lambda l, r: [torch.maximum(l[0], r[0]), l[1] + r[1]], [x, y], 1, combine_mode="generic"
        )
        assert isinstance(out, list)
        return out[0] - out[1]

    check(fn, torch.randn(3, 9), torch.randn(3, 9))


@pytest.mark.parametrize(
    "kwargs", [{"combine_mode": "pointwise"}, {"combine_mode": "sequential"}, {"dim": 1.5}]
)
def test_arguments_eager_rejects_raise_the_same_error(kwargs):
    def fn(x):
        return associative_scan(lambda l, r: l + r, x + 1, **{"dim": 0, **kwargs})

    with pytest.raises(ValueError) as eager:
        fn(torch.randn(5, 2))
    with pytest.raises(ValueError) as compiled:
        torchlite.compile(fn)(torch.randn(5, 2))
    assert str(compiled.value) == str(eager.value)


# heapq.nlargest / nsmallest (Python code over C heap helpers): Counter.most_common(n >= 2)


def test_counter_most_common_two_or_more_is_one_graph():
    import collections

    def fn(x, words):
        counts = collections.Counter(words)
        top = counts.most_common(3)
        return x * top[0][1] + top[1][1] - top[2][1], [w for w, _ in top]

    words = ["a", "b", "a", "c", "b", "a", "d", "c", "c", "c"]
    check(fn, torch.randn(4), words)
    assert _graphs_and_breaks(fn, torch.randn(4), words) == (1, 0)


@pytest.mark.parametrize("n", [-1, 0, 1, 2, 4, 9])
def test_heapq_nlargest_nsmallest_with_and_without_key_keep_ties_order(n):
    import heapq

    def fn(x, pairs):
        big = heapq.nlargest(n, pairs, key=lambda p: p[0])
        small = heapq.nsmallest(n, pairs, key=lambda p: p[0])
        plain = heapq.nlargest(n, [p[0] for p in pairs])
        return x + len(big), big, small, plain, heapq.nsmallest(n, x.shape)

    pairs = [(2, "a"), (1, "b"), (2, "c"), (0, "d"), (1, "e"), (2, "f")]
    check(fn, torch.randn(3, 5), pairs)
    assert _graphs_and_breaks(fn, torch.randn(3, 5), pairs) == (1, 0)


def test_topk_of_sizes_with_heapq_over_traced_tensors():
    import heapq

    def fn(xs):
        largest = heapq.nlargest(2, xs, key=lambda t: t.shape[0])
        return torch.cat(largest).sum()

    xs = [torch.randn(3), torch.randn(5), torch.randn(4)]
    check(fn, xs)
    assert _graphs_and_breaks(fn, xs) == (1, 0)
