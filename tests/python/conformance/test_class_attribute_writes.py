"""Class-attribute writes in traced code (issue 22), captured as Dynamo captures them: replayed
after the graph as a setattr on the class, read back by the rest of the trace (through the class
and through its instances), instead of a graph break. Each program runs eagerly and compiled
(conformance_check.check_program), the class's state is compared after every call (`observe`),
and a second identical call (the class attribute reset by `setup`) must hit the cache.

PYTEST_DONT_REWRITE: the programs' own asserts keep their plain messages.
"""

import collections

import torch
from conformance_check import check_captured_program
from torch import nn

import torchlite


class Registry:
    counter = 0
    scale = 2.0
    mode = "train"


class Counted(nn.Module):
    calls = 0

    def forward(self, x):
        type(self).calls += 1
        return x * self.calls


class Base(nn.Module):
    last_width = None


class Child(Base):
    def forward(self, x):
        Base.last_width = x.shape[-1]
        return x * 2 + self.last_width


def reset():
    Registry.counter = 0
    Registry.scale = 2.0
    Registry.mode = "train"
    Counted.calls = 0
    Base.last_width = None


def observe():
    return (Registry.counter, Registry.scale, Registry.mode, Counted.calls, Base.last_width)


def t43():
    return (torch.randn(4, 3),)


def run(fn, **options):
    return check_captured_program(fn, t43, setup=reset, observe=observe, **options)


def test_class_counter_written_and_read_back():
    def fn(x):
        Registry.counter = Registry.counter + 1
        Registry.counter += 1
        return x * Registry.counter

    run(fn)


def test_counter_through_type_of_self_read_through_the_instance():
    m = Counted()

    def fn(x):
        return m(x)

    run(fn)


def test_class_attribute_set_to_a_size_and_read_through_a_subclass_instance():
    m = Child()

    def fn(x):
        return m(x)

    run(fn)


def test_class_flag_and_string_written():
    def fn(x):
        Registry.mode = "eval"
        Registry.scale = 0.5
        y = x * Registry.scale
        return y if Registry.mode == "eval" else -y

    run(fn)


def test_class_attribute_of_a_tensor_value_still_breaks():
    def fn(x):
        Registry.scale = x.sum()
        return x * 2

    run(fn, breaks=1)


def test_counter_most_common():
    # NOTE: heapq.nlargest makes an object() sentinel, which used to break the graph.
    def fn(x):
        c = collections.Counter(["a", "b", "b", "c", "b", "a"])
        (top, n), (second, m) = c.most_common()[:2]
        return x * n + m, top, second, c.most_common(1)

    check_captured_program(fn, t43)


def test_counter_of_sizes_most_common():
    def fn(x):
        c = collections.Counter(x.shape)
        return x.sum() * c.most_common(1)[0][1]

    check_captured_program(fn, lambda: (torch.randn(3, 3, 2),))


def test_class_counter_without_reset_stays_correct():
    # NOTE: the counter's value is guarded (it changes every call): correct on every call, and
    # eager from the cache limit on, never a stale replay.
    def fn(x):
        Registry.counter += 1
        return x + Registry.counter

    reset()
    compiled = torchlite.compile(fn)
    for i in range(1, 12):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), x + i)
        assert Registry.counter == i


@torchlite.disable
def opaque():
    """A call the trace cannot see into: a graph break where the program calls it."""


def test_class_attribute_written_before_a_break_is_read_after_it():
    def fn(x):
        Registry.mode = "eval"
        Registry.counter = x.shape[0]
        opaque()
        return x * Registry.counter if Registry.mode == "eval" else x

    run(fn, breaks=1)


def test_class_attribute_written_then_an_error_raised():
    def fn(x):
        Registry.counter = 7
        if x.shape[0] == 4:
            raise ValueError("four rows")
        return x

    run(fn, raises=ValueError)
