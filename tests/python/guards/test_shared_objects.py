"""One object reached through several names (the config every layer holds, the same list passed
twice): its contents are guarded once, the other names are guarded to be that object, and
mutations through one name are seen through the others, as in eager."""

import torch
from helpers import assert_same, counters
from torch import nn

import torchlite


class Config:
    def __init__(self, scale, shift):
        self.scale = scale
        self.shift = shift


class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config

    def forward(self, x):
        return x * self.config.scale + self.config.shift


class Stack(nn.Module):
    def __init__(self, n=6):
        super().__init__()
        self.config = Config(2.0, 1.0)
        self.layers = nn.ModuleList([Layer(self.config) for _ in range(n)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _guards(fn, *args):
    return "\n".join(torchlite.explain(fn)(*args).guards)


def test_a_config_shared_by_layers_is_guarded_once():
    m = Stack()
    guards = _guards(m, torch.randn(4))
    assert len([g for g in guards.splitlines() if ".scale ==" in g]) == 1, guards
    # forward() never reads the stack's own config: layers 1-5 are guarded to hold layer 0's
    assert guards.count("IDENTITY") == 5, guards


def test_a_shared_config_changed_after_compiling_recompiles_for_every_layer():
    m = Stack()
    fn = torchlite.compile(m)
    x = torch.randn(5)
    assert_same(fn(x), m(x))
    m.config.scale = 3.0  # seen by every layer: the one guarded name covers all six
    before = counters()["frames"]
    assert_same(fn(x), m(x))
    assert counters()["frames"] == before + 1


def test_a_layer_given_its_own_config_recompiles():
    m = Stack()
    fn = torchlite.compile(m)
    x = torch.randn(5)
    assert_same(fn(x), m(x))
    m.layers[3].config = Config(2.0, 1.0)  # equal values, another object
    m.layers[3].config.scale = -1.0
    assert_same(fn(x), m(x))


def _two_configs(x, a, b):
    return x * a.scale + x * b.scale


def test_objects_that_were_one_and_then_two_recompile():
    fn = torchlite.compile(_two_configs)
    x = torch.randn(3)
    c = Config(2.0, 0.0)
    assert_same(fn(x, c, c), _two_configs(x, c, c))
    d = Config(5.0, 0.0)
    assert_same(fn(x, c, d), _two_configs(x, c, d))
    e, f = Config(7.0, 0.0), Config(7.0, 0.0)
    assert_same(fn(x, e, f), _two_configs(x, e, f))
    assert_same(fn(x, e, e), _two_configs(x, e, e))


def _write_through_one_read_through_other(x, a, b):
    a.scale = 3.0
    return x * b.scale


def test_an_attribute_written_through_one_name_is_read_through_the_other():
    x = torch.randn(3)
    eager_c, c = Config(2.0, 0.0), Config(2.0, 0.0)
    expected = _write_through_one_read_through_other(x, eager_c, eager_c)
    assert_same(torchlite.compile(_write_through_one_read_through_other)(x, c, c), expected)
    assert c.scale == 3.0


def _append_then_count(x, xs, ys):
    xs.append(1)
    return x * len(ys)


def test_a_list_appended_through_one_name_is_seen_through_the_other():
    x = torch.randn(3)
    fn = torchlite.compile(_append_then_count)
    for n in range(3):
        eager_list, lst = [0] * n, [0] * n
        expected = _append_then_count(x, eager_list, eager_list)
        assert_same(fn(x, lst, lst), expected)
        assert lst == eager_list
    a, b = [0, 0], [0]
    assert_same(fn(x, a, b), x * 1)
    assert a == [0, 0, 1] and b == [0]


def _dict_through_two_names(x, d, e):
    d["k"] = 4.0
    return x * e["k"]


def test_a_dict_written_through_one_name_is_read_through_the_other():
    x = torch.randn(3)
    d = {"k": 1.0}
    out = torchlite.compile(_dict_through_two_names)(x, d, d)
    assert_same(out, x * 4.0)
    assert d == {"k": 4.0}
