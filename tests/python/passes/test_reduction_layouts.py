"""Reductions in every layout against eager: channels-last spatial means, batch-norm training
statistics in channels-last, column sums, multi-axis reductions, short rows and odd sizes; the
fusion cost model's refusals (kernel counts); and the CUDA schedule each layout gets (emitted
and compiled to PTX by NVRTC, no GPU needed)."""

import pytest
import torch
import torch.nn.functional as F
from helpers import check, nvrtc_missing

import torchlite
from torchlite import _C


def _cl(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype).to(memory_format=torch.channels_last)


def spatial_mean(x):
    return F.silu(x).mean((2, 3), keepdim=True)


def squeeze_excite(x, w1, w2):
    s = F.silu(x).mean((2, 3))
    g = torch.sigmoid(F.relu(s @ w1) @ w2)
    return x * g[:, :, None, None]


def bn_train_silu(x):
    v, m = torch.var_mean(x, (0, 2, 3), keepdim=True, correction=0)
    return F.silu((x - m) * torch.rsqrt(v + 1e-5))


needs_cpu_kernels = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op, unsplit"
)


def check_cl(fn, *args, **kwargs):
    """`check` without the fresh-input call, whose inputs would not be channels-last."""
    return check(fn, *args, fresh=False, **kwargs)


def summary(fn, *args):
    graph = torchlite.explain(fn)(*args).graphs[0]
    return _C.partition_summary(graph)


@pytest.mark.parametrize("shape", [(2, 32, 7, 7), (3, 40, 9, 5), (1, 3, 17, 1)])
def test_channels_last_spatial_mean_matches_eager(shape):
    check_cl(spatial_mean, _cl(*shape))


def test_channels_last_spatial_mean_bfloat16_matches_eager():
    check_cl(spatial_mean, _cl(4, 24, 10, 10, dtype=torch.bfloat16), atol=2e-2, rtol=2e-2)


def test_squeeze_excitation_pooling_matches_eager():
    check_cl(squeeze_excite, _cl(2, 16, 9, 9), torch.randn(16, 4), torch.randn(4, 16))


@pytest.mark.parametrize("shape", [(4, 8, 6, 6), (3, 5, 7, 11)])
def test_batch_norm_statistics_in_channels_last_match_eager(shape):
    check_cl(bn_train_silu, _cl(*shape), atol=1e-4, rtol=1e-4)


@needs_cpu_kernels
def test_long_batch_norm_rows_keep_their_epilogue_apart_and_match_eager():
    x = _cl(16, 32, 56, 56)  # 32 channels of 50176 points: rows too long to stay on chip
    s = summary(bn_train_silu, x)
    # Split statistics (partials, then one kernel folding the mean's and the variance's
    # partials: fuse.cpp's sibling reductions), then the epilogue on its own.
    assert s["kernel_count"] == 3
    assert "reduce=0" in s["kernels"][-1]  # the normalise + SiLU epilogue is a pointwise kernel
    assert all("reduce=0" not in k for k in s["kernels"][:-1])
    check_cl(bn_train_silu, x, atol=1e-4, rtol=1e-4)


def test_short_rows_keep_their_epilogue_fused():
    assert summary(bn_train_silu, _cl(4, 8, 6, 6))["kernel_count"] == 1
    assert summary(lambda x: F.layer_norm(x, (4096,)), torch.randn(64, 4096))["kernel_count"] == 1
    assert summary(lambda x: torch.softmax(x, -1), torch.randn(8, 1000))["kernel_count"] == 1


@pytest.mark.parametrize("shape", [(1000, 37), (257, 3), (64, 128), (5, 1)])
def test_column_sums_match_eager(shape):
    check(lambda x: x.sum(0), torch.randn(*shape), atol=1e-4, rtol=1e-5)  # summation order


def test_column_argmax_and_max_match_eager():
    check(lambda x: (x.argmax(0), x.amax(0)), torch.randn(300, 19))
    x = torch.randint(0, 3, (300, 19)).float()  # ties: the first index wins
    check(lambda x: x.argmin(0), x)


@pytest.mark.parametrize(
    "dims,shape", [((0, 2), (8, 5, 33)), ((0, 2, 3), (3, 6, 5, 7)), ((1, 3), (4, 9, 3, 11))]
)
def test_multi_axis_reductions_match_eager(dims, shape):
    check(lambda x: x.sum(dims) * 2, torch.randn(*shape), atol=1e-4, rtol=1e-5)
    check_cl(lambda x: x.amax(dims), _cl(*shape) if len(shape) == 4 else torch.randn(*shape))


@pytest.mark.parametrize("shape", [(4096, 3), (3, 1000), (17, 16)])
def test_short_rows_match_eager(shape):
    check(lambda x: (x.sum(-1), x.sum(0)), torch.randn(*shape), atol=1e-4, rtol=1e-5)


# ---- the CUDA schedules, compiled to PTX without a GPU ----


_MISSING = nvrtc_missing()
needs_nvrtc = pytest.mark.skipif(bool(_MISSING), reason=f"NVRTC not loadable: {_MISSING}")


def _cuda_kernels(fn, *args):
    graph = torchlite.explain(fn)(*args).graphs[0]
    return _C.cuda_kernel_sources(graph, "compute_90", compile=True)


@needs_nvrtc
def test_squeeze_excitation_pooling_gets_a_tiled_schedule_on_cuda():
    # N x C = 64 x 32 rows of 56 x 56 strided bf16 points: 16 rows a tile (a 32-byte sector),
    # 64 lane groups splitting each row, combined by a tree in shared memory.
    ((_, source, _, launch),) = _cuda_kernels(
        spatial_mean, _cl(64, 32, 56, 56, dtype=torch.bfloat16)
    )
    assert launch["block"] == 1024
    assert launch["grid"] == 2048 // 16
    assert "slice = threadIdx.x / 16" in source
    assert "r += 64" in source
    assert "if (slice < s)" in source


@needs_nvrtc
def test_contiguous_rows_keep_a_warp_or_block_a_row_on_cuda():
    ((_, source, _, _),) = _cuda_kernels(lambda x: F.layer_norm(x, (1024,)), torch.randn(512, 1024))
    assert "slice" not in source
    assert "__shfl_xor_sync" in source


def _cuda_text(fn, *args):
    """CUDA C and launch of each kernel, emitted without NVRTC."""
    graph = torchlite.explain(fn)(*args).graphs[0]
    return [(s, launch) for _, s, _, launch in _C.cuda_kernel_sources(graph, "compute_90", False)]


@pytest.mark.parametrize("rows", [4096, 37])
def test_rows_shorter_than_a_warp_share_one(rows):
    # ConvNeXt's layer norm over 40 bf16 channels: 5 packs of 8 a row, so 8 lanes a row and four
    # rows a warp (three shuffle rounds); 37 rows leave the last warp's last rows past the end.
    x, w = torch.randn(rows, 40, dtype=torch.bfloat16), torch.randn(40, dtype=torch.bfloat16)
    ((source, launch),) = _cuda_text(lambda x, w: F.layer_norm(x, (40,), w, w), x, w)
    vector = source[source.index("_v(") :]
    assert "const unsigned lane = threadIdx.x & 7;" in vector
    assert "row0" in vector and "* 4)" in vector
    assert "for (int s = 4; s > 0; s >>= 1)" in vector
    assert ("if (row < 37)" in vector) == (rows == 37)
    warps = (rows + 3) // 4
    assert launch["grid"] == (warps * 32 + launch["block"] - 1) // launch["block"]
    scalar = source[: source.index("_v(")]
    assert "for (int s = 16; s > 0; s >>= 1)" in scalar  # 40 single elements: a whole warp


def test_tiles_over_many_rows_take_256_lanes_a_block():
    # The same layer norm over a channels-first tensor permuted to channels-last.
    x = torch.randn(32, 40, 56, 56, dtype=torch.bfloat16)
    w = torch.randn(40, dtype=torch.bfloat16)
    fn = lambda x, w: F.layer_norm(x.permute(0, 2, 3, 1), (40,), w, w)
    ((source, launch),) = _cuda_text(fn, x, w)
    assert "slice = threadIdx.x /" in source
    assert launch["block"] == 256
    # Its output runs along the row (channels-last): staged in shared memory, written out whole.
    assert "__shared__ unsigned short st0[" in source
    assert "out0[" in source.split("the tile's outputs are in shared memory")[1]


@needs_nvrtc
@pytest.mark.parametrize("shape", [(32, 96, 56, 56), (3, 40, 7, 9), (2, 768, 7, 7)])
def test_tiles_with_staged_outputs_compile(shape):
    x = torch.randn(*shape, dtype=torch.bfloat16)
    w = torch.randn(shape[1], dtype=torch.bfloat16)
    fn = lambda x, w: F.layer_norm(x.permute(0, 2, 3, 1), (shape[1],), w, w)
    assert _cuda_kernels(fn, x, w)


@needs_nvrtc
def test_tiled_argmax_combines_indices_through_shared_memory():
    kernels = _cuda_kernels(lambda x: x.argmax(2), _cl(8, 64, 40, 3).permute(0, 2, 3, 1))
    sources = "\n".join(k[1] for k in kernels)
    assert "shi" in sources


# ---- split reductions (few results, long rows): partials, then a fold ----


def _kernels(fn, *args):
    torchlite.reset()
    before = torchlite.counters()["kernels"]
    torchlite.compile(fn)(*args)
    return torchlite.counters()["kernels"] - before


@needs_cpu_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_column_sum_and_mean_match_eager(dtype):
    x = torch.randn(1 << 16, 24, dtype=dtype)
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-3, "rtol": 1e-4}
    check(lambda x: (x.sum(0), x.mean(0, keepdim=True), x.sum(-2)), x, **tol)
    assert _kernels(lambda x: x.sum(0), x) == 2


def test_split_whole_tensor_sum_matches_eager():
    check(lambda x: (x.sum(), torch.mean(x)), torch.randn(3, 1 << 16), atol=1e-2, rtol=1e-4)


@needs_cpu_kernels
@pytest.mark.parametrize("correction", [0, 1])
def test_split_var_mean_in_channels_last_matches_eager(correction):
    x = _cl(16, 8, 48, 48) * 3 + 5  # |mean| > std: the combination must not cancel

    def fn(x):
        v, m = torch.var_mean(x, (0, 2, 3), correction=correction, keepdim=True)
        return v, m, (x - m) * torch.rsqrt(v + 1e-5)

    check_cl(fn, x, atol=1e-4, rtol=1e-4)
    assert _kernels(fn, x) >= 3  # partials, the fold, the epilogue


def test_split_var_mean_positional_and_without_keepdim_matches_eager():
    check(lambda x: torch.var_mean(x, 0), torch.randn(1 << 16, 5), atol=1e-4, rtol=1e-4)
    check(lambda x: torch.var_mean(x, [0, 1], True), torch.randn(512, 64, 3), atol=1e-4, rtol=1e-4)


@needs_cpu_kernels
def test_short_reductions_are_not_split():
    assert _kernels(lambda x: x.sum(0), torch.randn(1000, 37)) == 1
