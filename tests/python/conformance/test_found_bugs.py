"""Mismatches the random-program generator found (program_gen.py), minimised, one test each.

Each test fails on the main branch it was found on; the seed that found it is named.
"""

import torch
from conformance_check import check_program


def t4():
    return (torch.randn(4),)


# --- meta kernels accept what eager rejects (seeds 14, 44, 157, 186, 291) ------------------------


def test_tensor_minus_python_bool_raises_as_eager():
    def fn(x):
        return x - True

    check_program(fn, t4)


def test_python_bool_minus_tensor_raises_as_eager():
    def fn(x, flag):
        y = x * 2
        return flag - y

    check_program(fn, lambda: (torch.randn(4), isinstance(1, int)))


def test_tensor_minus_bool_tensor_raises_as_eager():
    def fn(x):
        return torch.sub(x, x > 0)

    check_program(fn, t4)


def test_inplace_sub_of_bool_raises_as_eager_and_leaves_input():
    def fn(x):
        x.sub_(False)
        return x

    check_program(fn, t4)


def test_tensor_minus_int_still_compiles():
    def fn(x):
        return x - 1, 1 - x, x - (x > 0).float()

    check_program(fn, t4)


# --- containers mutated while an iterator over them is live (seed 229) ---------------------------


def test_for_loop_sees_list_shrinking_under_it():
    def fn(x, ks):
        for k in ks:
            ks.pop()
            x = x + k
        return x

    check_program(fn, lambda: (torch.randn(4), [1, 2, 3, 4]))


def test_for_loop_sees_list_growing_under_it():
    def fn(x, ks):
        for k in ks:
            if k < 3:
                ks.append(k + 2)
            x = x * k
        return x

    check_program(fn, lambda: (torch.randn(4), [1, 2]))


def test_dict_size_change_during_iteration_raises_runtime_error():
    def fn(x, d):
        for k in d:
            d[k + "x"] = 1
            x = x + 1
        return x

    check_program(fn, lambda: (torch.randn(4), {"a": 1}))


def test_dict_value_update_during_iteration_is_fine():
    def fn(x, d):
        for k in d:
            d[k] = d[k] * 2
            x = x + d[k]
        return x

    check_program(fn, lambda: (torch.randn(4), {"a": 1, "b": 2}))


def test_list_mutated_then_graph_break_inside_loop():
    def fn(x, ks):
        for k in ks:
            ks.pop()
            if x.sum() > 0:
                x = x + k
            else:
                x = x - k
        return x

    check_program(fn, lambda: (torch.randn(4), [1, 2, 3, 4]))


# --- values read from a container the trace then changed, live at a graph break (seed 560) ------


def test_tensor_read_from_list_before_item_replaced_keeps_old_value():
    def fn(x, xs):
        t = xs[0]
        xs[0] = x * 2
        if x.sum() > 0:
            x = x + 1
        return x, t

    check_program(fn, lambda: (torch.randn(4), [torch.randn(4), torch.randn(4)]))


def test_tensor_read_from_list_before_pop_survives_graph_break():
    def fn(x, xs):
        t = xs[1]
        xs.pop(0)
        if x.sum() > 0:
            x = x + t
        return x, t

    check_program(fn, lambda: (torch.randn(4), [torch.randn(4), torch.randn(4)]))


def test_inner_list_read_before_outer_list_replaced_keeps_old_object():
    def fn(x, xss):
        inner = xss[0]
        xss[0] = [9]
        if x.sum() > 0:
            x = x + 1
        return x, inner

    check_program(fn, lambda: (torch.randn(4), [[1, 2], [3]]))


def test_int_read_from_list_before_item_replaced_keeps_old_value():
    def fn(x, ks):
        k = ks[0]
        ks[0] = 7
        if x.sum() > 0:
            x = x + k
        return x, k

    check_program(fn, lambda: (torch.randn(4), [1, 2]))


# --- dict displays with a repeated key (seed 560) -----------------------------------------------


def test_dict_display_repeated_key_keeps_last_value():
    def fn(x, n):
        d = {"a": 6, "a": n}  # noqa: F601 - the repeated key under test
        return x * len(d), d

    check_program(fn, lambda: (torch.randn(4), 3))


def test_const_key_dict_display_repeated_key_keeps_first_position():
    def fn(x, n):
        d = {"a": 6, "b": 1, "a": n}  # noqa: F601 - the repeated key under test
        return x, list(d.items())

    check_program(fn, lambda: (torch.randn(4), 3))


# --- IndexError messages name the operation, as CPython's do (seed 1734) -------------------------


def test_index_error_messages_match_eager():
    def fn(x, ks, t, i):
        out = []
        for op in (lambda: ks[i], lambda: t[i], lambda: ks.pop(i)):
            try:
                op()
            except IndexError as e:
                out.append(str(e))
        try:
            ks[i] = 1
        except IndexError as e:
            out.append(str(e))
        return x, out

    check_program(fn, lambda: (torch.randn(4), [1, 2], (1, 2), 5))


# --- side effects replayed in an order that keeps their targets (seed 1867) ---------------------

G_LIST = [1, 2]


def test_global_list_appended_then_rebound_leaves_new_target_alone():
    def fn(x, ks):
        global G_LIST
        G_LIST.append(3)
        G_LIST = ks
        return x + len(G_LIST)

    original = G_LIST

    def setup():
        global G_LIST
        original[:] = [1, 2]
        G_LIST = original

    check_program(
        fn, lambda: (torch.randn(4), [7]), setup=setup, observe=lambda: (original, G_LIST)
    )
