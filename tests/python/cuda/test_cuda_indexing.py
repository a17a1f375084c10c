"""Indexing by tensor values fused into CUDA kernels (csrc/passes/lower_data.cpp): embedding
lookups and index_select read their rows inside the kernels that use them, with eager's exact
values; a bad index stops the kernel with a device-side assert, as eager's CUDA kernels do."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import torchlite

pytestmark = pytest.mark.cuda


def _op_names(fn, *args):
    """The CPU events of one call, in order (with repeats)."""
    with profile(activities=[ProfilerActivity.CPU]) as p:
        fn(*args)
        torch.cuda.synchronize()
    return [e.name for e in p.events()]


def _embed_then_norm(ids, wte, wpe, w, b):
    # GPT-2's prologue: token and position embeddings, summed, then the first layer norm
    pos = torch.arange(ids.shape[-1], device=ids.device)[None]
    h = F.embedding(ids, wte) + F.embedding(pos, wpe)
    return h, F.layer_norm(h, (h.shape[-1],), w, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(2, 16), (3, 37)])
def test_embeddings_fuse_into_the_layer_norm_after_them(dtype, shape):
    d = 96
    kw = {"device": "cuda", "dtype": dtype}
    ids = torch.randint(0, 1000, shape, device="cuda")
    args = (ids, torch.randn(1000, d, **kw), torch.randn(64, d, **kw))
    args += (torch.randn(d, **kw), torch.randn(d, **kw))
    torchlite.reset()
    compiled = torchlite.compile(_embed_then_norm, fullgraph=True)
    with torch.no_grad():
        h, y = compiled(*args)
        eh, ey = _embed_then_norm(*args)
        assert torch.equal(h, eh)  # a row copy and one rounded add: eager's bits
        torch.testing.assert_close(y, ey)
        ops = _op_names(compiled, *args)
    assert not set(ops) & {"aten::embedding", "aten::index_select", "aten::arange"}, ops
    launches = [op for op in ops if op.startswith("cuLaunchKernel")]  # Ex on sm_90+
    assert len(launches) == 1, ops  # lookups, sum and norm: one kernel


def test_index_select_along_an_inner_dim_fuses():
    x = torch.randn(6, 50, 8, device="cuda")
    idx = torch.tensor([3, 0, 49, 7, 7], device="cuda")
    fn = lambda x, i: x.index_select(1, i) * 2
    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=True)
    with torch.no_grad():
        assert torch.equal(compiled(x, idx), fn(x, idx))
        assert "aten::index_select" not in _op_names(compiled, x, idx)


_BAD_INDEX = """
import sys, torch, torch.nn.functional as F, torchlite
w = torch.randn(10, 8, device="cuda")
ids = torch.tensor([[1, {bad}, 2]], device="cuda")
fn = lambda i, w: F.embedding(i, w) * 2
f = torchlite.compile(fn) if sys.argv[1] == "compiled" else fn
try:
    f(ids, w)
    torch.cuda.synchronize()
except RuntimeError as e:
    print("RuntimeError:", str(e).splitlines()[0])
    sys.exit(0)
print("no error")
"""


@pytest.mark.parametrize("bad", [10, -1])
def test_a_bad_index_stops_the_kernel_as_eager_does(bad):
    script = textwrap.dedent(_BAD_INDEX.format(bad=bad))
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    out = {}
    for mode in ("eager", "compiled"):
        run = subprocess.run(
            [sys.executable, "-c", script, mode],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stdout[-1000:] + run.stderr[-2000:]
        out[mode] = (run.stdout.strip().splitlines() or ["no output"])[-1]
    # the same error class and cause; the wording around it is the reporting layer's
    for line in out.values():
        assert line.startswith("RuntimeError:") and "device-side assert" in line, out
