"""Fused CUDA kernels against eager: pointwise, broadcast, half types, reductions, strided and
misaligned inputs, side streams and device indices other than 0."""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from helpers import compiled_on_cuda, counters

import torchlite

pytestmark = pytest.mark.cuda


def _check(fn, *args, atol=None, rtol=None, kernels=True):
    """Compiled equals eager on two calls; with `kernels`, at least one CUDA kernel ran."""
    compiled, made = compiled_on_cuda(fn, *args, atol=atol, rtol=rtol)
    if kernels:
        assert made > 0, "no fused kernel was compiled"
    return compiled


def chain(x):
    return torch.sigmoid(x * 2 + 1).relu() * x - torch.tanh(x)


@pytest.mark.parametrize("n", [1, 7, 1000, 1 << 20, (1 << 20) + 3])
def test_pointwise_chain_matches_eager(n):
    _check(chain, torch.randn(n, device="cuda"))


def test_broadcast_matches_eager():
    fn = lambda a, b, c: (a + b) * c - a.exp()
    a = torch.randn(64, 1, 32, device="cuda")
    b = torch.randn(1, 48, 32, device="cuda")
    c = torch.randn(32, device="cuda")
    _check(fn, a, b, c)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_match_eager(dtype):
    x = torch.randn(4097, 33, device="cuda", dtype=dtype)
    y = torch.randn(33, device="cuda", dtype=dtype)
    tol = {"atol": 1e-2, "rtol": 1e-2} if dtype == torch.bfloat16 else {"atol": 1e-3, "rtol": 1e-3}
    _check(lambda x, y: torch.nn.functional.gelu(x * y + 1), x, y, **tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_outputs_store_eagers_bits_nan_included(dtype):
    """16-bit outputs rounded once and two at a time: the very bits eager stores, NaN's too
    (CUDA's conversion gives 0x7FFF for a bfloat16 NaN, which the CPU spells 0x7FC0)."""
    x = torch.randn(64, 1024, device="cuda", dtype=dtype)
    x[3, 5:9] = float("nan")
    fn = lambda x: (x * 3 + 1).sqrt() * x
    compiled = _check(fn, x, atol=0, rtol=0)
    with torch.no_grad():
        actual, expected = compiled(x), fn(x)
    assert expected.isnan().any()
    bits = lambda t: t.view(torch.int16)
    assert torch.equal(bits(actual), bits(expected))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("offset", [0, 1])
def test_pair_evaluation_stores_eagers_bits(dtype, offset):
    """Row kernels over 16-bit floats add, subtract and multiply two elements per instruction
    in their vector entry (offset 0; offset 1 takes the scalar entry): every element and the
    row max carry eager's exact bits, inf, NaN and values that overflow included."""
    fn = lambda x, y: ((t := (x * 0.125 + y) - x * 2), t.amax(-1))
    x = torch.randn(64 * 1024 + offset, device="cuda", dtype=dtype)[offset:].view(64, 1024)
    y = torch.randn(64, 1024, device="cuda", dtype=dtype) * 1000
    x[1, :4] = torch.tensor([float("inf"), float("-inf"), float("nan"), 6e4])
    y[2, 8:12] = torch.tensor([float("nan"), -6e4, 1e-7, -0.0])
    compiled = _check(fn, x, y, atol=0, rtol=0)
    with torch.no_grad():
        actual, expected = compiled(x, y), fn(x, y)
    for a, e in zip(actual, expected):
        assert torch.equal(a.view(torch.int16), e.view(torch.int16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_and_min_propagate_nan_as_eager(dtype):
    """Row max/min and elementwise maximum/minimum (one max.NaN instruction on sm_80+)."""
    x = torch.randn(256, 1000, device="cuda", dtype=dtype)
    y = torch.randn(256, 1000, device="cuda", dtype=dtype)
    x[7, 100] = float("nan")
    y[9, 3] = float("nan")
    fn = lambda x, y: (torch.maximum(x, y) - torch.minimum(x, y), x.amax(-1), y.amin(-1))
    out = _check(fn, x, y)(x, y)
    assert out[0][7, 100].isnan() and out[1][7].isnan() and out[2][9].isnan()


def test_int_and_bool_match_eager():
    a = torch.randint(-50, 50, (1000,), device="cuda")
    b = torch.randint(1, 7, (1000,), device="cuda")
    _check(lambda a, b: ((a * 3 + b) // b, (a > b) & (a % 2 == 0)), a, b)


@pytest.mark.parametrize("shape", [(8, 100), (64, 4096), (3, 70000)])
def test_softmax_matches_eager(shape):
    _check(
        lambda x: torch.softmax(x * 0.125, -1),
        torch.randn(shape, device="cuda"),
        atol=1e-5,
        rtol=1e-4,
    )


def test_layer_norm_of_softmax_matches_eager_in_bf16():
    x = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    fn = lambda x, w, b: torch.nn.functional.layer_norm(
        torch.softmax(x * 0.125, -1) + x, (4096,), w, b
    )
    _check(fn, x, w, b, atol=5e-2, rtol=2e-2)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sum_and_argmax_match_eager(dim):
    x = torch.randn(300, 517, device="cuda")
    _check(
        lambda x: (x.sum(dim), (x * 2).argmax(dim), x.amax(dim, keepdim=True)),
        x,
        atol=1e-4,
        rtol=1e-4,
    )


def test_full_reduction_matches_eager():
    _check(lambda x: (x * x).sum(), torch.randn(1 << 20, device="cuda"), atol=1e-2, rtol=1e-4)


def test_non_contiguous_inputs_match_eager():
    x = torch.randn(256, 512, device="cuda")
    _check(chain, x.t())
    _check(chain, x[:, ::3])
    _check(lambda x: torch.softmax(x, -1), x.t(), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("offset", [1, 2, 3])
def test_misaligned_inputs_take_the_scalar_entry(offset):
    base = torch.randn(4096 + offset, device="cuda")
    _check(chain, base[offset:])
    _check(lambda a, b: a * b + 1, base[offset:], torch.randn(4096, device="cuda"))


def _row_fn(x, w):
    ln = torch.nn.functional.layer_norm(torch.softmax(x, -1) + x, (x.shape[-1],), w)
    return ln, x.sum(-1), (x * w).amax(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(37, 768), (100, 200), (64, 4096), (5, 20000)])
@pytest.mark.parametrize("offset", [0, 1])
def test_row_reductions_match_eager_in_both_entries(dtype, shape, offset):
    """Warp rows (768; 200: a last pack past the row's end), block rows held in registers
    (4096) and re-read (20000); offset 1 misaligns every row, so the scalar entry runs."""
    rows, n = shape
    x = torch.randn(rows * n + offset, device="cuda", dtype=dtype)[offset:].view(rows, n)
    w = torch.randn(n, device="cuda", dtype=dtype)
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 6e-2, "rtol": 2e-2}
    _check(_row_fn, x, w, **tol)


@pytest.mark.parametrize("channels", [16, 12, 64])
def test_channels_last_batch_norm_matches_eager(channels):
    """Per-channel parameters broadcast over a channels-last activation: packs of 8 bf16 when
    the channels are whole packs (16, 64), the scalar entry otherwise (12)."""
    x = torch.randn(8, channels, 9, 9, device="cuda", dtype=torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    p = [torch.randn(channels, 1, 1, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    v = torch.rand(channels, 1, 1, device="cuda", dtype=torch.bfloat16) + 0.5

    def fn(x, m, v, w, b, res):
        return torch.relu((x - m) * torch.rsqrt(v + 1e-5) * w + b + res)

    _check(fn, x, p[0], v, p[1], p[2], torch.randn_like(x), atol=5e-2, rtol=2e-2)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_max_pool2d_is_a_kernel_equal_to_eager(channels_last, dtype):
    """resnet's stem pool (3x3, stride 2, padding 1): the relu before it is one kernel, the pool
    another (torch's is not called), bitwise equal to eager, NaN propagating, in either layout."""
    x = torch.randn(4, 64, 56, 56, device="cuda", dtype=dtype)
    x[0, 3, 10, 10] = float("nan")
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    torchlite.reset_counters()
    compiled = _check(lambda x: F.max_pool2d(torch.relu(x), 3, 2, 1), x, atol=0, rtol=0)
    assert counters()["kernels"] == 2
    assert compiled(x).stride() == F.max_pool2d(x, 3, 2, 1).stride()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kernel_size": 2},
        {"kernel_size": 3, "stride": 2, "ceil_mode": True},
        {"kernel_size": (3, 2), "stride": (1, 2), "padding": (1, 0), "dilation": (2, 1)},
    ],
)
def test_max_pool2d_window_shapes_channels_last(kwargs):
    x = torch.randn(2, 24, 13, 11, device="cuda", dtype=torch.float16)
    x = x.to(memory_format=torch.channels_last)
    _check(lambda x: F.max_pool2d(x * 2, **kwargs), x, atol=0, rtol=0)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(
    "kwargs",
    [
        {"kernel_size": 3, "stride": 1, "padding": 1, "count_include_pad": False},
        {"kernel_size": 2},
        {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    ],
)
def test_avg_pool2d_fuses_with_its_consumer(channels_last, dtype, kwargs):
    """poolformer's `x + (pool(y) - y) * s` of a produced y: y's kernel, then the pool with the
    subtraction and residual as one kernel (torch's pool is not called)."""
    x = torch.randn(4, 64, 28, 27, device="cuda", dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)

    def fn(x):
        y = torch.tanh(x * 2)
        p = F.avg_pool2d(y, **kwargs)
        return p - y[..., : p.shape[-2], : p.shape[-1]] * 0.5

    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torchlite.reset_counters()
    _check(fn, x, atol=tol, rtol=tol)
    assert counters()["kernels"] == 2


def test_runs_on_a_side_stream():
    x = torch.randn(1 << 22, device="cuda")
    compiled = torchlite.compile(chain)
    with torch.no_grad():
        expected = chain(x)
        compiled(x)  # compiles outside the timed region below
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s), torch.no_grad():
        y = torch.empty_like(x)
        torch.cuda._sleep(50_000_000)  # a kernel on another stream would read y before the copy
        y.copy_(x)
        out = compiled(y)
    s.synchronize()
    torch.testing.assert_close(out, expected)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_runs_on_device_one():
    x = torch.randn(10000, device="cuda:1")
    compiled = _check(chain, x)
    assert compiled(x).device == torch.device("cuda:1")
    assert torch.cuda.current_device() == 0


def test_mixed_devices_run_op_by_op():
    x = torch.randn(100, device="cuda")
    y = torch.randn(100)
    _check(lambda x, y: (x * 2 + 1, y * 2 + 1), x, y, kernels=False)


def test_trace_writes_cu_files_with_launch_config(tmp_path):
    script = (
        "import torch, torchlite\n"
        "f = torchlite.compile(lambda x: torch.sigmoid(x * 2 + 1))\n"
        "with torch.no_grad(): f(torch.randn(1000, device='cuda'))\n"
        "torch.cuda.synchronize()\n"
    )
    env = dict(
        os.environ,
        TORCHLITE_TRACE="1",
        TORCHLITE_DEBUG_DIR=str(tmp_path / "dbg"),
        TORCHLITE_CACHE_DIR=str(tmp_path / "cache"),
    )
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=300)
    cu = list((tmp_path / "dbg").rglob("*.cu"))
    assert cu, "no .cu file written"
    text = cu[0].read_text()
    assert "// launch: grid=" in text and "__global__" in text


def test_second_process_reads_cubins_from_the_disk_cache(tmp_path):
    script = (
        "import torch, torchlite\n"
        "f = torchlite.compile(lambda x: torch.softmax(x * 2, -1) + 1)\n"
        "with torch.no_grad(): y = f(torch.randn(64, 100, device='cuda'))\n"
        "torch.cuda.synchronize()\n"
        "c = torchlite.counters(); print(c['kernels'], c['cache_hits'])\n"
    )
    env = dict(os.environ, TORCHLITE_CACHE_DIR=str(tmp_path / "cache"))
    run = lambda: subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout.split()
    kernels, hits = map(int, run()[-2:])
    assert kernels >= 1 and hits == 0
    cubins = list((tmp_path / "cache" / "cuda").glob("*.cubin"))
    assert len(cubins) >= 1
    kernels, hits = map(int, run()[-2:])
    assert hits >= 1
    # A corrupt file is a miss: compiled again, not loaded.
    for c in cubins:
        c.write_bytes(b"garbage")
    kernels, hits = map(int, run()[-2:])
    assert hits == 0


def test_kernels_repeated_per_layer_compile_once(tmp_path, monkeypatch):
    """Four identical blocks (separated by matmuls, which stay torch calls) give kernels that
    differ only in their names: the body is compiled once (later copies count as cache hits) and
    every copy still computes its own layer."""
    monkeypatch.setattr(torchlite.config, "cache_dir", str(tmp_path))
    blocks = [torch.nn.LayerNorm(64, device="cuda") for _ in range(4)]
    weights = [torch.randn(64, 64, device="cuda") / 8 for _ in range(4)]
    for i, b in enumerate(blocks):
        with torch.no_grad():
            b.weight.normal_(1.0, 0.1 * (i + 1))

    def fn(x):
        for b, w in zip(blocks, weights):
            y = torch.nn.functional.gelu(b(x) * 1.5 + 0.25, approximate="tanh").pow(3)
            x = (y - x) @ w
        return x

    torchlite.reset()
    before = counters()
    _check(fn, torch.randn(32, 64, device="cuda"), atol=1e-3, rtol=1e-3)
    after = counters()
    built = after["kernels"] - before["kernels"]
    assert built >= 4
    assert after["cache_hits"] - before["cache_hits"] >= 3 * built // 4
