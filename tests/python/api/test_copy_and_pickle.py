"""Issue 26 item 12: compiled modules pickle (torch.save) and deep-copy, and modules holding a
compiled function deep-copy, as with torch.compile."""

import copy
import io
import pickle

import torch
from torch import nn

import torchlite
from torchlite import OptimizedModule


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2


@torchlite.compile
def scaled_tanh(x):
    return torch.tanh(x) * 3


def plain(x):
    return torch.sigmoid(x) + 1


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.act = torchlite.compile(plain)

    def forward(self, x):
        return self.act(self.lin(x))


def test_pickle_of_a_compiled_module_gives_a_compiled_copy():
    m = Net()
    cm = torchlite.compile(m)
    x = torch.randn(3, 8)
    torch.testing.assert_close(cm(x), m(x))
    back = pickle.loads(pickle.dumps(cm))
    assert isinstance(back, OptimizedModule) and back._orig_mod is not m
    for k, v in m.state_dict().items():
        torch.testing.assert_close(back.state_dict()[k], v)
    x = torch.randn(5, 8)
    before = torchlite.counters()["frames"]
    torch.testing.assert_close(back(x), m(x))
    assert torchlite.counters()["frames"] > before  # it runs compiled, not eagerly


def test_torch_save_and_load_of_a_compiled_module():
    m = Net()
    buf = io.BytesIO()
    torch.save(torchlite.compile(m, options={"functionalize": False}), buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=False)
    x = torch.randn(2, 8)
    torch.testing.assert_close(back(x), m(x))
    assert back._wrap_call.args["options"] == {"functionalize": False}


def test_deepcopy_of_a_compiled_module_is_independent():
    m = Net()
    cm = torchlite.compile(m)
    twin = copy.deepcopy(cm)
    with torch.no_grad():
        twin.lin.weight.add_(1.0)
    x = torch.randn(4, 8)
    torch.testing.assert_close(cm(x), m(x))
    torch.testing.assert_close(twin(x), twin._orig_mod(x))
    assert not torch.equal(twin(x), cm(x))


def test_deepcopy_of_a_module_holding_a_compiled_function():
    h = Holder()
    twin = copy.deepcopy(h)
    assert twin.act is h.act  # functions are shared by deepcopy, as torch.compile's are
    assert twin.lin.weight is not h.lin.weight
    x = torch.randn(2, 8)
    torch.testing.assert_close(twin(x), torch.sigmoid(twin.lin(x)) + 1)


def test_a_compiled_module_level_function_pickles_by_reference():
    assert pickle.loads(pickle.dumps(scaled_tanh)) is scaled_tanh
    x = torch.randn(6)
    torch.testing.assert_close(scaled_tanh(x), torch.tanh(x) * 3)
