"""Every launch max-autotune may pick for a CUDA reduction computes eager's result: each build
the code generator lists (`other_blocks`: a block row's threads, thread and warp rows' rows a
block, tiles' slices a row), through its scalar and its vector entry, at the code generator's grid and at fewer
blocks (each block then takes several rows in turn)."""

import pytest
import torch

import torchlite
from torchlite import _C

pytestmark = pytest.mark.cuda


def _softmax(x):
    return torch.softmax(x, -1)


def _layer_norm(x):
    return torch.nn.functional.layer_norm(x.softmax(-1) + x, (x.shape[-1],)) * 2


def _row_sum(x):
    return x.sum(-1)


def _column_sum(x):
    return x.sum(0)


def _column_softmax(x):
    return torch.softmax(x, 0)


def _spatial_mean(x):
    return x.mean(1)


CASES = [
    (_softmax, (64, 4096)),  # a block a row (128 threads; 256 tried)
    (_layer_norm, (16, 20000)),  # a block a row (1024 threads; 512 tried)
    (_layer_norm, (8192, 768)),  # a warp a row (256 threads a block; 128 and 512 tried)
    (_softmax, (3000, 40)),  # several rows a warp
    (_row_sum, (100000, 8)),  # a thread a row
    (_column_sum, (64, 512)),  # tiles of neighbouring columns: half and twice the slices tried
    (_column_softmax, (512, 64)),  # tiles, a value per element written back
    (_spatial_mean, (8, 49, 256)),  # tiles over 49 points (a spatial mean, channels last)
]


def _arch():
    major, minor = torch.cuda.get_device_capability()
    return f"compute_{major}{minor}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn, shape", CASES)
def test_every_build_entry_and_grid_matches_eager(fn, shape, dtype):
    torchlite.reset()
    x = torch.randn(*shape, dtype=dtype)
    with torch.no_grad():
        (graph,) = torchlite.explain(fn)(x).graphs
    ((name, _, _, launch),) = _C.cuda_kernel_sources(graph, _arch(), False)
    assert launch["other_blocks"], launch
    xc = x.cuda()
    expected = fn(xc)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    for block in [0, *launch["other_blocks"]]:
        ((_, source, _, built),) = _C.cuda_kernel_sources(graph, _arch(), False, reduce_block=block)
        entries = [""] + ([built["vector_name"]] if built["vector_name"] else [])
        for vector in entries:
            for grid in {built["grid"], max(1, built["grid"] // 4)}:
                out = torch.full_like(expected, float("nan"))
                _C._cuda_launch_source(
                    source,
                    name,
                    [xc, out],
                    grid=grid,
                    block=built["block"],
                    shared_bytes=built["shared_bytes"],
                    dependent_launch=built["dependent_launch"],
                    vector_name=vector,
                    vector_fallback_name=built["vector_fallback_name"] if vector else "",
                )
                torch.cuda.synchronize()
                what = f"block {built['block']} grid {grid} {vector or 'scalar'}"
                torch.testing.assert_close(out, expected, **tol, msg=lambda m, w=what: f"{w}: {m}")
