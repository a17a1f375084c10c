"""Programmatic dependent launch in the generated CUDA C (checked without a GPU; the GPU tests in
tests/python/cuda/test_cuda_launcher.py run chains of dependent kernels against eager):

- for sm_90 and later every entry (scalar and vector; pointwise and row reductions) waits for the
  prior grid before anything else (`tl_after_prior_grid()`), and the launch dict says the runtime
  may overlap it with the previous kernel;
- before sm_90 there is no wait and the kernel is launched plainly;
- the PTX for sm_90 carries the griddepcontrol instructions."""

import re

import pytest
import torch
import torch.nn.functional as F
from helpers import nvrtc_missing

import torchlite
from torchlite import _C

BF16 = torch.bfloat16


def _softmax_ln(x, w, b):
    return F.layer_norm(torch.softmax(x * 0.125, -1) + x, x.shape[-1:], w, b)


def _pointwise(x):
    return torch.sigmoid(x * 2 + 1).relu() * x - torch.tanh(x)


def _sum_rows(x):
    return (x * x).sum(-1)


CASES = {
    "block_rows": (
        _softmax_ln,
        lambda: (
            torch.randn(16, 4096, dtype=BF16),
            torch.randn(4096, dtype=BF16),
            torch.randn(4096, dtype=BF16),
        ),
    ),
    "pointwise": (_pointwise, lambda: (torch.randn(64, 256),)),
    "warp_rows": (_sum_rows, lambda: (torch.randn(64, 96),)),
}


_MISSING = nvrtc_missing()


def _kernels(fn, args, arch, compile=False):
    torchlite.reset()
    with torch.no_grad():
        (graph,) = torchlite.explain(fn)(*args).graphs
    return _C.cuda_kernel_sources(graph, arch, compile)


def _entries(source):
    """name -> the first statement of each entry's body."""
    out = {}
    for m in re.finditer(
        r'extern "C" __global__ void __launch_bounds__\([\d, ]+\) (\w+)\([^)]*\) \{\n\s*([^\n]*)',
        source,
    ):
        out[m.group(1)] = m.group(2)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_sm90_entries_wait_for_the_prior_grid_first(case):
    fn, make = CASES[case]
    kernels = _kernels(fn, make(), "compute_90")
    assert kernels
    for name, source, ptx, launch in kernels:
        entries = _entries(source)
        assert name in entries, source
        for entry in (launch["vector_name"], launch["vector_fallback_name"]):
            assert not entry or entry in entries
        for entry, first in entries.items():
            assert first == "tl_after_prior_grid();", (entry, first)
        assert launch["dependent_launch"] is True


@pytest.mark.skipif(bool(_MISSING), reason=f"NVRTC not loadable: {_MISSING}")
@pytest.mark.parametrize("arch", ["compute_90", "compute_80"])
def test_ptx_has_griddepcontrol_only_from_sm90(arch):
    fn, make = CASES["block_rows"]
    ((_, _, ptx, _),) = _kernels(fn, make(), arch, compile=True)
    text = ptx.decode()
    has = "griddepcontrol.wait" in text and "griddepcontrol.launch_dependents" in text
    assert has == (arch == "compute_90")


@pytest.mark.parametrize("case", sorted(CASES))
def test_before_sm90_kernels_are_launched_plainly(case):
    fn, make = CASES[case]
    for _, source, _, launch in _kernels(fn, make(), "compute_80"):
        assert "tl_after_prior_grid();" not in source
        assert launch["dependent_launch"] is False
