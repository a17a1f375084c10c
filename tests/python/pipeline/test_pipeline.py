"""compile_graph (csrc/pipeline): one driver for the frame hook and torch.compile(backend=
"torchlite"), the verifier naming the pass that broke the graph, one trace file per pass."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import torchlite
from torchlite import _C, config

needs_cpu_kernels = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))

# Runs one model through one path in a fresh process (fresh kernel caches, so the kernel
# counter counts every kernel) and prints what the pipeline did as JSON.
_PATH_SCRIPT = textwrap.dedent(
    """
    import glob, json, sys
    import torch, torch.nn.functional as F
    import torchlite
    from torchlite import backends

    def f(x, w, m, v):
        y = torch.relu(F.batch_norm(F.conv2d(x, w, padding=1), m, v, training=False))
        return torch.softmax(F.conv2d(y, w, padding=1) * 2 + 1, -1)

    path, debug_dir, device = sys.argv[1], sys.argv[2], sys.argv[3]
    torchlite.config.trace = True
    torchlite.config.debug_dir = debug_dir
    opts = {"fold_batch_norm": True, "channels_last": True}
    if path == "frame":
        g = torchlite.compile(f, options=opts)
    else:
        torch._dynamo.register_backend(backends.dynamo_backend, name="torchlite_test")
        g = torch.compile(f, backend="torchlite_test", options=opts)
    torch.manual_seed(0)
    args = (torch.randn(2, 4, 8, 8), torch.randn(4, 4, 3, 3), torch.randn(4), torch.rand(4) + 0.5)
    args = tuple(a.to(device) for a in args)
    with torch.no_grad():
        torch.testing.assert_close(g(*args), f(*args), rtol=1e-4, atol=1e-4)
    (folder,) = [p for p in glob.glob(debug_dir + "/run-*/*/pipeline.txt")]
    folder = folder[: -len("pipeline.txt")]
    c = torchlite.counters()
    print(json.dumps({
        "pipeline": open(folder + "pipeline.txt").read(),
        "kernels": open(folder + "lowered.txt").read(),
        "counters": {k: c[k] for k in ("kernels", "batch_norms_folded", "channels_last_convs")},
    }))
    """
)


def _run_path(path, tmp_path, device):
    env = dict(os.environ, PYTHONPATH=ROOT, TORCHLITE_CACHE_DIR=str(tmp_path / f"cache_{path}"))
    out = subprocess.run(
        [sys.executable, "-c", _PATH_SCRIPT, path, str(tmp_path / path), device],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _untimed(pipeline_text):
    """pipeline.txt without its timings (they differ run to run)."""
    return re.sub(r" (\(|in )\d+\.\d ms\)?", "", pipeline_text)


@pytest.mark.parametrize(
    "device",
    [pytest.param("cpu", marks=needs_cpu_kernels), pytest.param("cuda", marks=pytest.mark.cuda)],
)
def test_frame_and_torch_compile_paths_run_the_same_passes_kernels_and_counters(tmp_path, device):
    frame, fx = _run_path("frame", tmp_path, device), _run_path("fx", tmp_path, device)
    assert _untimed(frame["pipeline"]) == _untimed(fx["pipeline"])
    assert "07_torchlite.fold_batch_norm.txt: ran" in frame["pipeline"]
    assert frame["kernels"] == fx["kernels"]
    assert frame["counters"] == fx["counters"]
    assert frame["counters"]["channels_last_convs"] == 2
    assert frame["counters"]["batch_norms_folded"] == 1


def _reorder(graph):
    """A faulty pass: moves the last op before the first input, so it reads values not yet made."""
    ops = [n for n in graph.nodes() if n["op"] in ("call_function", "call_method")]
    first = next(n for n in graph.nodes() if n["op"] == "placeholder")
    graph.move_before(ops[-1]["name"], first["name"])


@pytest.fixture
def faulty_pass():
    _C.register_test_pass("test.reorder", _reorder)
    yield "test.reorder"
    _C.unregister_test_pass("test.reorder")


def _fn(x):
    return torch.relu(x * 2).sin() + 1


@needs_cpu_kernels
def test_verify_names_the_pass_that_broke_the_graph(monkeypatch, faulty_pass):
    monkeypatch.setattr(config, "verify", True)
    with pytest.raises(torchlite.InternalError, match="broken after pass 'test.reorder'"):
        torchlite.compile(_fn)(torch.randn(8))


@needs_cpu_kernels
def test_verify_through_options_names_the_pass(faulty_pass):
    with pytest.raises(torchlite.InternalError, match="broken after pass 'test.reorder'"):
        torchlite.compile(_fn, options={"verify": True})(torch.randn(8))


@needs_cpu_kernels
def test_verify_on_the_torch_compile_path_names_the_pass(faulty_pass):
    from torchlite import backends

    torch._dynamo.reset()
    try:
        compiled = torch.compile(_fn, backend=backends.dynamo_backend, options={"verify": True})
        with pytest.raises(Exception, match="broken after pass 'test.reorder'"):
            compiled(torch.randn(8))
    finally:
        torch._dynamo.reset()


def test_registered_passes_run_in_pipeline_order(faulty_pass):
    names = _C.pass_names()
    assert names[0] == "torchlite.functionalize" and names[-1] == "torchlite.partition"
    assert names[-2] == "test.reorder"  # registered before partition
    with pytest.raises(ValueError, match="already registered"):
        _C.register_test_pass("test.reorder", _reorder)


@needs_cpu_kernels
def test_trace_writes_one_file_per_pass_and_the_mode(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "trace", True)
    monkeypatch.setattr(config, "debug_dir", str(tmp_path))
    x = torch.randn(16)
    torch.testing.assert_close(torchlite.compile(_fn, mode="max-autotune")(x), _fn(x))
    (pipeline,) = tmp_path.glob("run-*/*/pipeline.txt")
    text = pipeline.read_text()
    assert text.startswith("mode: max-autotune\n")
    ran = [line.split(":")[0].strip() for line in text.splitlines() if ": ran (" in line]
    assert ran == [
        "01_torchlite.functionalize.txt",
        "02_torchlite.merge_duplicates.txt",
        "03_torchlite.decompose_attention.txt",
        "06_torchlite.pad_matmuls.txt",
        "08_torchlite.channels_last.txt",
        "10_torchlite.conv_weight_layouts.txt",
        "11_torchlite.split_reductions.txt",
        "13_torchlite.move_reshapes.txt",
        "14_torchlite.small_products.txt",
        "15_torchlite.matmul_operands.txt",
        "16_torchlite.matmul_epilogues.txt",  # max-autotune: CUDA products (no-op on the CPU)
        "17_torchlite.recompute_producers.txt",
        "18_torchlite.partition.txt",
    ]
    written = sorted(p.name for p in pipeline.parent.glob("[0-9][0-9]_*.txt"))
    assert written == ["00_input.txt", *ran]
    assert "kernel " in (pipeline.parent / "18_torchlite.partition.txt").read_text()
    # each pass and the kernel build carry their time (the cold-start breakdown)
    assert re.search(r"01_torchlite.functionalize.txt: ran \(\d+\.\d ms\)", text)
    assert re.search(r"kernels: 1 built in \d+\.\d ms", text)
