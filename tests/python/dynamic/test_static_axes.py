"""A frame compiled for every size tells its kernels which sizes are the model's own
(pipeline::PassContext::static_sizes -> ir::Kernel::static_axes, `static=` in lowered.txt):
its parameters' sizes and its graph's int constants (`view(b, t, 12, 8)`), not the batch or
the sequence length, nor a size the trace read from an input. The CUDA code generator writes
those as literals (tests/python/passes/test_cuda_static_axes.py); here, on the CPU, which axes
are marked, and results against eager at every size."""

import re

import pytest
import torch

import torchlite
from torchlite import _C, config

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


@pytest.fixture(autouse=True)
def _private_dirs(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path / "trace"))
    torchlite.reset()


def _kernel_lines(tmp_path):
    lines = []
    for p in sorted(tmp_path.glob("trace/run-*/*/lowered.txt")):
        lines += [ln for ln in p.read_text().splitlines() if ln.startswith("kernel ")]
    return lines


def _static_axes(line):
    m = re.search(r"static=([\d,]+)", line)
    return [int(v) for v in m.group(1).split(",")] if m else []


class _Heads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 96)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.proj(x).view(b, t, 12, 8)
        return torch.softmax(h.view(b, t, 96), -1) + h.sum(-1).amax(-1, keepdim=True)


def test_parameter_sizes_and_view_constants_are_static_axes(tmp_path):
    model = _Heads()
    compiled = torchlite.compile(model)
    with torch.no_grad():
        for t in (5, 7, 9, 1, 11):
            x = torch.randn(2, t, 64)
            torch.testing.assert_close(compiled(x), model(x))
    lines = _kernel_lines(tmp_path)
    runtime = [ln for ln in lines if "sizes=runtime" in ln]
    assert runtime, lines
    for ln in runtime:
        shape = [int(v) for v in re.search(r"\[([\d,]+)\]", ln).group(1).split(",")]
        axes = _static_axes(ln)
        assert len(axes) == len(shape), ln
        # the batch (2) and the length (7) change; 96, 12 and 8 are the model's
        assert [s for s, a in zip(shape, axes) if a] == [s for s in shape if s in (96, 12, 8)], ln
    # static compiles (the first size) mark nothing
    assert all("static=" not in ln for ln in lines if "sizes=runtime" not in ln)


def test_inputs_sizes_are_not_static_without_parameters(tmp_path):
    # a softmax over an input's last dimension: every size of the input may change
    compiled = torchlite.compile(lambda x: torch.softmax(x * 2, -1), dynamic=True)
    for shape in ((4, 96), (5, 96), (5, 40)):
        x = torch.randn(shape)
        torch.testing.assert_close(compiled(x), torch.softmax(x * 2, -1))
    lines = [ln for ln in _kernel_lines(tmp_path) if "sizes=runtime" in ln]
    assert lines and all("static=" not in ln for ln in lines), lines


def test_a_marked_parameter_dimension_is_not_static(tmp_path):
    w = torch.nn.Parameter(torch.randn(48), requires_grad=False)
    torchlite.mark_dynamic(w, 0)

    def fn(x):
        return torch.softmax(x * w, -1)

    compiled = torchlite.compile(fn, dynamic=True)
    x = torch.randn(4, 48)
    torch.testing.assert_close(compiled(x), fn(x))
    lines = [ln for ln in _kernel_lines(tmp_path) if "sizes=runtime" in ln]
    assert lines and all("static=" not in ln for ln in lines), lines


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_results_match_eager_over_batches_and_lengths(dtype):
    model = _Heads().to(dtype)
    compiled = torchlite.compile(model, dynamic=True)
    tol = {"atol": 3e-2, "rtol": 3e-2} if dtype == torch.bfloat16 else {}
    with torch.no_grad():
        for b, t in ((2, 5), (1, 7), (3, 1), (3, 13), (5, 64)):
            x = torch.randn(b, t, 64, dtype=dtype)
            torch.testing.assert_close(compiled(x), model(x), **tol)
