"""torchlite as a torch.compile backend: Dynamo's graphs run through torchlite's compiler and
match eager; what it cannot represent falls back to gm.forward."""

import importlib.metadata

import pytest
import torch
from torch import fx, nn

import torchlite
from torchlite import _C, backends


def _torchlite_backend_name() -> str:
    """The name torch.compile resolves through the torch_dynamo_backends entry point.

    NOTE: where torchlite is not installed as a distribution (a source checkout on PYTHONPATH),
    the entry point does not exist, so the backend is registered explicitly under that name.
    """
    names = [e.name for e in importlib.metadata.entry_points(group="torch_dynamo_backends")]
    if "torchlite" not in names and "torchlite" not in torch._dynamo.list_backends():
        torch._dynamo.register_backend(backends.dynamo_backend, name="torchlite")
    return "torchlite"


BACKEND = _torchlite_backend_name()


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def pointwise_chain(x, y):
    return (torch.relu(x * 2 + y).sin() - x.exp()).abs() / 3


def softmax(x):
    return torch.softmax(x, -1), x.softmax(dim=0)


def with_graph_break(x):
    y = torch.tanh(x) + 1
    print("graph break")
    return torch.sigmoid(y) * x


def test_entry_point_resolves_to_dynamo_backend():
    assert "torchlite" in torch._dynamo.list_backends()
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("torchlite") is backends.dynamo_backend


def test_pointwise_chain_matches_eager_and_runs_fused_kernels():
    x, y = torch.randn(64, 33), torch.randn(64, 33)
    before = torchlite.counters()["kernels"]
    out = torch.compile(pointwise_chain, backend=BACKEND)(x, y)
    torch.testing.assert_close(out, pointwise_chain(x, y))
    # A build without LLVM (the GPU machine has no LLVM headers) runs the graph op by op.
    if torchlite._C.has_llvm:
        assert torchlite.counters()["kernels"] > before
    else:
        assert torchlite.counters()["kernels"] == before


def test_softmax_matches_eager():
    x = torch.randn(16, 40)
    torch.testing.assert_close(torch.compile(softmax, backend=BACKEND)(x), softmax(x))


def test_mlp_under_no_grad_matches_eager():
    mlp = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    x = torch.randn(5, 8)
    compiled = torch.compile(mlp, backend=BACKEND)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), mlp(x))


def test_graph_break_splits_into_graphs_that_match_eager(capsys):
    from torch._dynamo.utils import counters

    counters.clear()
    x = torch.randn(7, 3)
    out = torch.compile(with_graph_break, backend=BACKEND)(x)
    assert capsys.readouterr().out.count("graph break") == 1
    torch.testing.assert_close(out, with_graph_break(x))
    assert counters["stats"]["unique_graphs"] == 2


def test_training_graph_keeps_autograd():
    lin = nn.Linear(4, 3)
    x = torch.randn(2, 4)
    out = torch.compile(lambda t: lin(t).relu().sum(), backend=BACKEND)(x)
    out.backward()
    expected = torch.autograd.grad(lin(x).relu().sum(), lin.weight)[0]
    torch.testing.assert_close(lin.weight.grad, expected)


def test_dynamic_shapes_fall_back_and_stay_correct():
    f = torch.compile(pointwise_chain, backend=BACKEND, dynamic=True)
    for n in (3, 5):
        x, y = torch.randn(n, 4), torch.randn(n, 4)
        torch.testing.assert_close(f(x, y), pointwise_chain(x, y))


def _traced(fn):
    gm = fx.symbolic_trace(fn)
    return gm, backends.dynamo_backend(gm, [])


def test_symbolic_trace_graph_without_metadata_runs_op_by_op():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.full((3,), 2.0))
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(x) * self.scale + x.size(0)

    m = M()
    gm = fx.symbolic_trace(m)
    compiled = backends.dynamo_backend(gm, [])
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), m(x))
    torch.testing.assert_close(compiled([x]), m(x))  # boxed calling convention


def test_graph_from_fx_reads_get_attr_tensors_as_extra_inputs():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("bias", torch.ones(4))

        def forward(self, x):
            return (x + self.bias,)

    gm = fx.symbolic_trace(M())
    graph, extra = _C.graph_from_fx(gm)
    assert len(extra) == 1 and extra[0] is gm.bias
    assert [n["op"] for n in graph.nodes()].count("placeholder") == 2


def test_dict_output_falls_back_to_gm_forward():
    gm, compiled = _traced(lambda x: {"y": x + 1})
    assert compiled == gm.forward
