"""torch.compile's modes: each accepted and equal to eager, CUDA graphs a reported no-op on
the CPU, an unknown mode a ValueError. The CUDA side is tests/python/cuda/test_cuda_graphs.py."""

import pytest
import torch
from torch import nn

import torchlite
from torchlite import settings


def f(x, y):
    return torch.softmax(x * 2 + y, dim=-1).sum(0)


@pytest.mark.parametrize("mode", list(settings.PRESETS))
def test_every_mode_runs_and_matches_eager(mode):
    compiled = torchlite.compile(f, mode=mode)
    for _ in range(3):
        x, y = torch.randn(4, 8), torch.randn(4, 8)
        torch.testing.assert_close(compiled(x, y), f(x, y))


def test_modes_preset_cuda_graphs_as_torch_does():
    on = {m for m in settings.PRESETS if settings.resolve(m, None)["cuda_graphs"]}
    assert on == {"reduce-overhead", "max-autotune"}
    assert settings.resolve("default", {"cuda_graphs": True})["cuda_graphs"] is True


def test_cuda_graphs_on_a_cpu_model_is_a_reported_no_op():
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).eval()
    torchlite.reset_counters()
    with torch.no_grad():
        x = torch.randn(3, 8)
        report = torchlite.explain(model, options={"cuda_graphs": True})(x)
        compiled = torchlite.compile(model, mode="reduce-overhead")
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
    assert report.cuda_graphs == ["not used: the graph runs on the CPU"]
    assert "CUDA graphs:" in str(report)
    c = torchlite.counters()
    assert c["cuda_graph_recordings"] == 0 and c["cuda_graph_replays"] == 0


@pytest.mark.parametrize("compiled_backward", [True, False])
def test_cuda_graphs_on_a_cpu_training_step_say_why_per_half(compiled_backward):
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    options = {"cuda_graphs": True, "compiled_backward": compiled_backward}
    x = torch.randn(3, 8)
    report = torchlite.explain(model, options=options)(x)
    if compiled_backward:
        cpu = "not used: the graph runs on the CPU"
        assert report.cuda_graphs == [f"forward: {cpu}; backward: {cpu}"]
    else:
        assert report.cuda_graphs == [
            "not used: the graph records autograd and runs op by op (compiled_backward is off)"
        ]
    compiled = torchlite.compile(model, options=options)
    for _ in range(3):
        expected = torch.autograd.grad(model(x).square().sum(), list(model.parameters()))
        got = torch.autograd.grad(compiled(x).square().sum(), list(model.parameters()))
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e)


def test_default_mode_reports_nothing_about_cuda_graphs():
    report = torchlite.explain(f)(torch.randn(4, 8), torch.randn(4, 8))
    assert report.cuda_graphs == [] and "CUDA graphs" not in str(report)


@pytest.mark.parametrize("api", ["compile", "explain"])
def test_unknown_mode_is_a_value_error(api):
    call = torchlite.compile if api == "compile" else torchlite.explain
    with pytest.raises(ValueError, match="unknown mode 'fast'.*reduce-overhead"):
        call(f, mode="fast")
