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


# The first kernel lets the next launch start at once, then works for a while before writing;
# the second waits for it (griddepcontrol.wait, a no-op before sm_90) before reading.
PRIOR_AND_DEPENDENT = r"""
extern "C" __global__ void slow_fill(const float* seed, float* out) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = seed[0];
  for (int k = 0; k < 4000; ++k) v = v * 0.999f + 0.001f;
  out[i] = v + (float)(i %% 1000);
}
extern "C" __global__ void twice(const float* in, float* out) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < %d) out[i] = 2.0f * in[i];
}
"""


def test_dependent_launch_waits_for_the_prior_kernel():
    n = 1 << 22
    src = PRIOR_AND_DEPENDENT % n
    seed = torch.full((1,), 3.0, device="cuda")
    mid, out = torch.empty(n, device="cuda"), torch.empty(n, device="cuda")
    for trial in range(5):
        seed.fill_(float(trial))
        mid.fill_(float("nan"))
        out.fill_(float("nan"))
        _C._cuda_launch_source(src, "slow_fill", [seed, mid], grid=n // 256, block=256)
        _C._cuda_launch_source(
            src, "twice", [mid, out], grid=n // 256, block=256, dependent_launch=True
        )
        torch.testing.assert_close(out, 2 * mid, rtol=0, atol=0)
        assert not mid.isnan().any()


def _chain(x, w):
    a = torch.softmax(x * 0.5, -1)  # row kernel
    b = a.sum(0)  # reads every row of a: a column reduction
    c = torch.relu(x + b) @ w  # pointwise kernel, then cuBLAS
    return torch.nn.functional.layer_norm(c * 2 - 1, c.shape[-1:])  # row kernel after cuBLAS


@pytest.mark.parametrize("side_stream", [False, True])
def test_chains_of_dependent_kernels_match_eager_back_to_back(side_stream):
    """Generated kernels read what the kernel before them wrote (launched to overlap its tail on
    sm_90+): forty calls back to back, no synchronisation between them, each checked."""
    torchlite.reset()
    compiled = torchlite.compile(_chain)
    xs = [torch.randn(2048, 512, device="cuda") for _ in range(4)]
    w = torch.randn(512, 256, device="cuda") / 16
    stream = torch.cuda.Stream() if side_stream else torch.cuda.current_stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        outs = [compiled(xs[i % 4], w) for i in range(40)]
    stream.synchronize()
    for i, out in enumerate(outs):
        torch.testing.assert_close(out, _chain(xs[i % 4], w), rtol=1e-4, atol=1e-4)


def test_compiled_kernels_replay_in_a_cuda_graph():
    """Launches captured into a CUDA graph (programmatic edges on sm_90+) replay correctly."""
    torchlite.reset()
    compiled = torchlite.compile(_chain)
    x = torch.randn(2048, 512, device="cuda")
    w = torch.randn(512, 256, device="cuda") / 16
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # compile and warm up outside the capture
            compiled(x, w)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = compiled(x, w)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.testing.assert_close(out, _chain(x, w), rtol=1e-4, atol=1e-4)


# A vector entry with a register cap that uses local memory (a dynamically indexed array), one
# without, and their uncapped copies: the runtime launches the copy only where the cap spills.
CAPPED_ENTRIES = r"""
extern "C" __global__ void mark(const int* idx, float* out) { out[threadIdx.x] = 0.0f; }
extern "C" __global__ void __launch_bounds__(128, 16) spills_v(const int* idx, float* out) {
  float scratch[64];
  for (int k = 0; k < 64; ++k) scratch[k] = (float)k;
  out[threadIdx.x] = 1.0f + 0.0f * scratch[idx[threadIdx.x] & 63];
}
extern "C" __global__ void __launch_bounds__(128, 16) clean_v(const int* idx, float* out) {
  out[threadIdx.x] = 1.0f;
}
extern "C" __global__ void spills_vr(const int* idx, float* out) { out[threadIdx.x] = 2.0f; }
extern "C" __global__ void clean_vr(const int* idx, float* out) { out[threadIdx.x] = 2.0f; }
"""


@pytest.mark.parametrize("capped, expect", [("spills", 2.0), ("clean", 1.0)])
def test_register_capped_entry_falls_back_only_where_it_spills(capped, expect):
    idx = torch.randint(0, 64, (128,), device="cuda", dtype=torch.int32)
    out = torch.full((128,), -1.0, device="cuda")
    _C._cuda_launch_source(
        CAPPED_ENTRIES,
        "mark",
        [idx, out],
        grid=1,
        block=128,
        vector_name=capped + "_v",
        vector_fallback_name=capped + "_vr",
    )
    torch.testing.assert_close(out, torch.full_like(out, expect))
