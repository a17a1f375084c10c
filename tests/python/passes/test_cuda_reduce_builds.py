"""Max-autotune's other builds of CUDA reductions (checked without a GPU; the GPU test
tests/python/cuda/test_cuda_reduce_launches.py runs every build against eager).

A reduction's block size is a constant of its text: the threads of a block row, the rows a
block takes for thread and warp rows. The code generator lists the other sizes its text can be
built at (`other_blocks`: half and twice its own, 128 to 1024 threads) and builds them when
asked (`Target::reduce_block`, the `reduce_block` argument here); tile rows (lanes across
neighbouring rows) keep theirs, their block being the tile's lanes."""

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


def test_tile_rows_keep_their_block():
    x = torch.randn(64, 512)  # 512 columns of 64: 32 neighbouring columns a tile
    _, default, launch = _kernel(_column_sum, x)
    assert "slice" in default
    assert launch["other_blocks"] == []
    _, source, built = _kernel(_column_sum, x, reduce_block=512)
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
