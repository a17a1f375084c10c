"""The CUDA runtime apart from the code generator: a hand-written kernel compiled by NVRTC,
cached on disk and launched on torch's current stream."""

import pytest
import torch

import torchlite
from torchlite import _C

pytestmark = pytest.mark.cuda

SAXPY = r"""
extern "C" __global__ void saxpy(const float* x, const float* y, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < %d) out[i] = 2.0f * x[i] + y[i];
}
"""


def test_driver_loads_when_torch_sees_a_gpu():
    ok, why = _C.cuda_driver_available()
    assert ok, why


def test_hand_written_kernel_runs_on_the_current_stream():
    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        _C._cuda_launch_source(SAXPY % n, "saxpy", [x, y, out], grid=(n + 255) // 256, block=256)
    s.synchronize()
    torch.testing.assert_close(out, 2 * x + y)


def test_second_load_of_the_same_source_reuses_the_module():
    n = 1000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    before = torchlite.counters()["kernels"]
    for _ in range(2):
        _C._cuda_launch_source(SAXPY % n, "saxpy", [x, y, out], grid=4, block=256)
    assert torchlite.counters()["kernels"] - before == 2
    torch.testing.assert_close(out, 2 * x + y)


def test_compile_error_names_the_kernel_and_shows_the_log():
    x = torch.zeros(4, device="cuda")
    with pytest.raises(ValueError, match=r"(?s)NVRTC failed to compile kernel broken.*undefined"):
        _C._cuda_launch_source(
            'extern "C" __global__ void broken(float* x) { x[0] = undefined_name; }',
            "broken",
            [x],
            grid=1,
            block=1,
        )


def test_unknown_entry_raises_with_cuda_message():
    x = torch.zeros(4, device="cuda")
    with pytest.raises(RuntimeError, match="cuModuleGetFunction failed for missing"):
        _C._cuda_launch_source(
            'extern "C" __global__ void present(float* x) {}', "missing", [x], grid=1, block=1
        )
