"""Max-autotune's other builds of CUDA reductions (checked without a GPU; the GPU test
tests/python/cuda/test_cuda_reduce_launches.py runs every build against eager).

A reduction's block size is a constant of its text: the threads of a block row, the rows a
block takes for thread and warp rows. The code generator lists the other sizes its text can be
built at (`other_blocks`: half and twice its own, 128 to 1024 threads) and builds them when
asked (`Target::reduce_block`, the `reduce_block` argument here); tile rows (lanes across
neighbouring rows, each row split between slices) list the blocks of half and twice their
slices."""

import re

import pytest
import torch

import torchlite
from torchlite import _C


def _kernel(fn, *args, reduce_block=0):
    """(name, source, launch) of the one kernel of the one graph `fn` captures."""
    torchlite.reset()
    with torch.no_grad():
        (graph,) = torchlite.explain(fn)(*args).graphs
    ((name, source, _, launch),) = _C.cuda_kernel_sources(
        graph, "compute_90", False, reduce_block=reduce_block
    )
    return name, source, launch


def _bounds(source, entry):
    return int(re.search(r"__launch_bounds__\((\d+)[\d, ]*\) " + entry + r"\(", source).group(1))


def _softmax(x):
    return torch.softmax(x, -1)


def _row_sum(x):
    return x.sum(-1)


def _column_sum(x):
    return x.sum(0)


# (function, input shape, the code generator's block, its other builds)
CASES = {
    "block row": (_softmax, (64, 4096), 128, [256]),
    "long block row": (_softmax, (16, 20000), 1024, [512]),
    "warp rows": (_softmax, (8192, 768), 256, [128, 512]),
    "thread rows": (_row_sum, (100000, 8), 256, [128, 512]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_reductions_list_their_other_builds_and_build_them(case):
    fn, shape, own, others = CASES[case]
    x = torch.randn(*shape)
    name, default, launch = _kernel(fn, x)
    assert (launch["block"], launch["other_blocks"]) == (own, others)
    assert _bounds(default, name) == own
    for block in others:
        _, source, built = _kernel(fn, x, reduce_block=block)
        assert built["block"] == block, case
        assert _bounds(source, name) == block
        if launch["vector_name"]:  # the vector entry takes the block too
            assert _bounds(source, launch["vector_name"]) == block
        if case.endswith("block row"):
            # a block a row: the grid stays one block a row, the row's loop steps by the block
            assert built["grid"] == launch["grid"] == shape[0]
        else:
            # rows a block: the same rows in fewer or more blocks
            assert built["grid"] == pytest.approx(launch["grid"] * own / block, abs=1)
            assert f"blockIdx.x * {block} + threadIdx.x" in source
        assert source != default


def _slices(source):
    """The slices a tile splits each row between: the step of its row loop."""
    return int(re.search(r"r = slice; r < \w+; r \+= (\d+)\)", source).group(1))


def _column_layer_norm(x):
    return torch.nn.functional.layer_norm(x.transpose(1, 2), (x.shape[1],)).transpose(1, 2)


# (function, input shape, dtype, the code generator's block and slices, its other builds)
TILES = {
    "column sum": (_column_sum, (64, 512), torch.float32, 64, 8, [32, 128]),
    "column softmax": (
        lambda x: torch.softmax(x, 0),
        (512, 64),
        torch.float32,
        512,
        64,
        [256, 1024],
    ),
    # twice the slices would leave 2 points a slice of the 64: only half is listed
    "column softmax bf16": (
        lambda x: torch.softmax(x, 0),
        (512, 64),
        torch.bfloat16,
        1024,
        64,
        [512],
    ),
    "spatial mean": (lambda x: x.mean(1), (8, 49, 256), torch.bfloat16, 64, 4, [32, 128]),
    "channel layer norm": (_column_layer_norm, (8, 49, 256), torch.float32, 32, 4, [16, 64]),
}


@pytest.mark.parametrize("case", list(TILES))
def test_tile_rows_list_other_splits_of_a_row_and_build_them(case):
    """A tile's block is its rows times the slices each row is split between (the cost model's
    split factor): its other builds are half and twice the slices over the same tile rows, so
    the grid (a block a tile) stays and only the split changes."""
    fn, shape, dtype, own, slices, others = TILES[case]
    x = torch.randn(*shape, dtype=dtype)
    name, default, launch = _kernel(fn, x)
    assert "slice" in default
    assert (launch["block"], _slices(default), launch["other_blocks"]) == (own, slices, others)
    for block in others:
        _, source, built = _kernel(fn, x, reduce_block=block)
        assert (built["block"], built["grid"]) == (block, launch["grid"]), case
        assert _bounds(source, name) == block
        assert _slices(source) == slices * block // own
        # the tree combining the slices starts at half of them
        assert f"unsigned s = {slices * block // own // 2}; s > 0" in source


@pytest.mark.parametrize("bad", [96, 256, 2048])
def test_a_tile_build_that_is_not_listed_is_ignored(bad):
    x = torch.randn(64, 512)  # tiles of 8 columns x 8 slices; 32 and 128 listed
    _, default, launch = _kernel(_column_sum, x)
    _, source, built = _kernel(_column_sum, x, reduce_block=bad)
    assert (built["block"], built["grid"]) == (launch["block"], launch["grid"])
    assert source == default


@pytest.mark.parametrize("bad", [100, 2048])
def test_a_block_the_text_cannot_take_is_ignored(bad):
    x = torch.randn(8192, 768)
    _, default, launch = _kernel(_softmax, x)
    _, source, built = _kernel(_softmax, x, reduce_block=bad)
    assert built["block"] == launch["block"] and source == default


def test_pointwise_kernels_list_the_block_sizes_tried():
    x = torch.randn(1 << 16)
    _, _, launch = _kernel(lambda x: (x * 2).sigmoid(), x)
    assert launch["block"] == 256 and launch["other_blocks"] == [128, 512]
