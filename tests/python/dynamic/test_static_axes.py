"""A frame compiled for every size tells its kernels which sizes are the model's own
(pipeline::PassContext::static_sizes -> ir::Kernel::static_axes, `static=` in lowered.txt):
its parameters' sizes and its graph's int constants (`view(b, t, 12, 8)`), not the batch or
the sequence length, nor a size the trace read from an input. The CUDA code generator writes
those as literals (tests/python/passes/test_cuda_static_axes.py); here, on the CPU, which axes
are marked, and results against eager at every size."""

import re

import pytest
import torch
import torch.nn.functional as F

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


# The CPU code generator writes the model's constant sizes as literals too (codegen/cpu/
# emission_key.h `literal_site`): a row whose length is a model constant has a constant trip
# count when whole, reductions over constant axes have constant trip counts, and the constants
# are part of the kernel's emission key, so graphs whose constants differ never share code.


class _BiasBlock(torch.nn.Module):
    """A bias + GELU (rows of the hidden width, kept apart from the rows by the bias), a
    softmax and a sum over the hidden width, a transposed read: every CPU kernel form."""

    def __init__(self, width, heads=2):
        super().__init__()
        self.heads = heads
        self.proj = torch.nn.Linear(24, width, bias=False)
        self.bias = torch.nn.Parameter(torch.randn(width))

    def forward(self, x):
        b, t, _ = x.shape
        h = F.gelu(self.proj(x) + self.bias)
        s = torch.softmax(h, -1) * h.sum(-1, keepdim=True)
        per_head = h.view(b, t, self.heads, -1).transpose(1, 2).amax(-1)  # [b, heads, t]
        return s + per_head.mean(1).unsqueeze(-1), per_head


def _check(model, x, dtype):
    tol = {"atol": 3e-2, "rtol": 3e-2} if dtype == torch.bfloat16 else {}
    with torch.no_grad():
        for o, r in zip(model[1](x), model[0](x), strict=True):
            torch.testing.assert_close(o, r, **tol)


@pytest.mark.parametrize("width", [64, 96, 36, 50])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_constant_widths_match_eager_at_odd_lengths_and_split_rows(width, dtype, monkeypatch):
    # widths that are whole vectors (64, 96) and that are not (36, 50); lengths odd and prime,
    # and long enough (3 x 257 x width) that the runtime splits rows across threads, so both
    # the whole-row loop and the partial rows run
    monkeypatch.setattr(config, "verify", True)  # every reuse checked against its own text
    torch.manual_seed(width)
    model = _BiasBlock(width).to(dtype)
    compiled = torchlite.compile(model)
    for b, t in ((2, 5), (1, 7), (3, 13), (2, 9), (3, 257), (1, 31)):
        _check((model, compiled), torch.randn(b, t, 24, dtype=dtype), dtype)


def _runtime_kernel_texts(tmp_path):
    """The unoptimised LLVM IR of every kernel that reads a dims array (runtime sizes)."""
    return [
        p.read_text()
        for p in sorted(tmp_path.glob("trace/run-*/kernels/*.ll"))
        if not p.name.endswith(".opt.ll") and "%dim0 = load" in p.read_text()
    ]


def test_cpu_kernels_write_model_constants_as_literals(tmp_path):
    model = _BiasBlock(96)
    compiled = torchlite.compile(model)
    for t in (5, 7, 11):
        _check((model, compiled), torch.randn(2, t, 24), torch.float32)
    texts = _runtime_kernel_texts(tmp_path)
    assert texts
    gelu = [s for s in texts if "erf" in s]
    assert gelu, [s.splitlines()[0] for s in texts]
    for text in gelu:
        # the rows (b * t) are the one runtime size; 96 is a trip count and a stride
        assert "%dim1 = load" not in text, text
        assert re.search(r"icmp \w+ i64 %\w+, 96\b", text), text
        assert re.search(r"mul nsw i64 %\w+, 96\b", text), text


def test_graphs_whose_constants_differ_share_no_code_and_new_lengths_reuse_it():
    # NOTE: not under config.verify: its check emits every reused kernel once more
    models, emitted = {}, {}
    for width in (96, 80):  # both kept alive: their kernels stay linked
        torch.manual_seed(width)
        model = _BiasBlock(width)
        models[width] = (model, torchlite.compile(model))
        emitted[width] = []
    for t in (5, 7, 11, 29, 6, 17):
        for width, pair in models.items():
            before = _C.llvm_emits()
            _check(pair, torch.randn(2, t, 24), torch.float32)
            emitted[width].append(_C.llvm_emits() - before)
    for emits in emitted.values():
        # the second length emits the runtime-size kernels; later lengths reuse every one
        assert emits[1] > 0 and emits[2:] == [0, 0, 0, 0], emitted
    # the same graph with another hidden width: its runtime-size kernels that hold the width
    # (bias + GELU, softmax, the sums over it) are its own; the per-head maximum and the mean
    # over heads (no model constant marked) are shared with the first graph's
    assert 0 < emitted[80][1] < emitted[96][1], emitted


def test_lengths_and_batches_equal_to_model_constants_compile_no_kernel():
    """A length or batch that equals a model constant (the width 96, the input width 24 of the
    projection's weight, 2) at some call: the kernels compiled at other sizes still serve it
    (their literals hold there), and kernels compiled there serve the later sizes."""
    torch.manual_seed(0)
    model = _BiasBlock(96)
    compiled = torchlite.compile(model)
    compiles = []
    for b, t in ((2, 5), (2, 7), (2, 96), (3, 24), (2, 11), (4, 2), (5, 48), (2, 13)):
        before = _C.llvm_compiles()
        _check((model, compiled), torch.randn(b, t, 24), torch.float32)
        compiles.append(_C.llvm_compiles() - before)
    assert compiles[1] > 0 and compiles[2:] == [0] * 6, compiles
