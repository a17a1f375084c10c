"""torch.nn.LSTM / GRU / RNN modules captured whole: their forward checks `_flat_weight_refs`
(weakrefs to the parameters) on every call, then runs the fused aten op on `_flat_weights`.
Each case checks values against eager, one graph (fullgraph) and no capture on repeated calls."""

import pytest
import torch
from helpers import check_module, counters

import torchlite

RNNS = [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN]


@pytest.mark.parametrize("cls", RNNS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
def test_bidirectional_two_layer_rnn_is_one_graph(cls, batch_first, with_state):
    torch.manual_seed(0)
    rnn = cls(6, 8, num_layers=2, bidirectional=True, batch_first=batch_first).eval()
    x = torch.randn(3, 5, 6)
    args = (x,)
    if with_state:
        h = torch.randn(4, 5 if not batch_first else 3, 8)
        args = (x, (h, torch.randn_like(h)) if cls is torch.nn.LSTM else h)
    with torch.no_grad():
        check_module(rnn, *args)


def test_rnn_in_a_model_keeps_its_cache_and_follows_a_replaced_weight():
    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(4, 6, batch_first=True)
            self.gru = torch.nn.GRU(6, 5, batch_first=True, bidirectional=True)
            self.head = torch.nn.Linear(10, 3)

        def forward(self, x):
            y, _ = self.lstm(x)
            z, h = self.gru(torch.relu(y))
            return self.head(z).softmax(-1), h

    torch.manual_seed(0)
    model = Tagger().eval()
    compiled = torchlite.compile(model, fullgraph=True)
    x = torch.randn(2, 7, 4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        before = counters()
        for _ in range(2):
            x = torch.randn(2, 7, 4)
            torch.testing.assert_close(compiled(x), model(x))
        assert counters()["graphs"] == before["graphs"]
        # NOTE: a new Parameter object: the weakref to the old one no longer matches, as eager's
        # `_weights_have_changed` sees; the result must use the new weight.
        model.gru.weight_hh_l0 = torch.nn.Parameter(torch.randn_like(model.gru.weight_hh_l0))
        model.gru._init_flat_weights()
        torch.testing.assert_close(compiled(x), model(x))


def _graph_inputs(graph) -> list[str]:
    header = str(graph).splitlines()[0]  # graph(%a, %b):
    return [name.strip(" %") for name in header[len("graph(") : -2].split(",") if name.strip()]


def test_weakref_referents_and_attributes_only_compared_are_not_graph_inputs():
    # NOTE: the forward compares each `_flat_weight_refs[i]()` with the attribute by identity;
    # those reads are decided by guards, so only the input and `_flat_weights` enter the graph.
    lstm = torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True).eval()
    with torch.no_grad():
        report = torchlite.explain(lstm)(torch.randn(3, 2, 4))
    assert report.graph_count == 1
    inputs = _graph_inputs(report.graphs[0])
    assert len(inputs) == 1 + len(lstm._flat_weights), inputs
    assert not [name for name in inputs if "refs" in name]


def test_a_tensor_only_tested_by_identity_is_guarded_not_an_input():
    def fn(x, y):
        return x * 2 if x is y else x - 1

    x = torch.randn(4)
    compiled = torchlite.compile(fn, fullgraph=True)
    for a, b in [(x, x), (x, torch.randn(3)), (x, x), (torch.randn(4), torch.randn(5))]:
        torch.testing.assert_close(compiled(a, b), fn(a, b))
    report = torchlite.explain(fn)(x, torch.randn(3))
    assert _graph_inputs(report.graphs[0]) == ["x"]
