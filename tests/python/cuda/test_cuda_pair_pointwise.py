"""Pair evaluation on the GPU (csrc/codegen/cuda/pair_text.cpp): pointwise vector entries take two
neighbouring 16-bit elements a step, an add/sub/mul of two 16-bit values runs as one bf16x2/f16x2
instruction, and outputs that are one (pointwise kernels, and the residual sum a layer norm reads)
are stored as their words. Eager rounds every op to its type, so these kernels store eager's exact
bits; the structure is checked without a GPU in tests/python/passes/test_cuda_vector_entries.py."""

import pytest
import torch
import torch.nn.functional as F
from helpers import compiled_on_cuda

pytestmark = pytest.mark.cuda

HALF = [torch.bfloat16, torch.float16]


def _bits_equal(actual, expected):
    for a, e in zip(actual, expected):
        assert torch.equal(a.view(torch.int16), e.view(torch.int16)), (a, e)


def _with_specials(x):
    flat = x.view(-1)
    flat[:5] = torch.tensor([float("inf"), float("-inf"), float("nan"), 6e4, -0.0])
    return x


def _chain(x, y, b):
    s = x * 0.5 + y  # mul by an exact constant, then an add: two pair ops
    return s * y - b, s  # two outputs, both pair ops' words


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(
    "shape,offset",
    [((64, 1024), 0), ((3, 5, 24), 0), ((7, 1000), 0), ((64, 1024), 1), ((1001,), 0)],
    ids=["rows", "odd-outer", "1000-wide", "misaligned", "tail"],
)
def test_pair_chains_store_eagers_bits(dtype, shape, offset):
    n = torch.Size(shape).numel()
    x = torch.randn(n + offset, device="cuda", dtype=dtype)[offset:].view(shape)
    y = _with_specials(torch.randn(shape, device="cuda", dtype=dtype) * 100)
    b = torch.randn(shape[-1], device="cuda", dtype=dtype)  # broadcast along the rows
    compiled, _ = compiled_on_cuda(_chain, x, y, b, atol=0, rtol=0)
    with torch.no_grad():
        _bits_equal(compiled(x, y, b), _chain(x, y, b))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))


def _swiglu(g, u):
    return F.silu(g) * u


@pytest.mark.parametrize("dtype", HALF + [torch.float32])
@pytest.mark.parametrize("fn", [_gelu_tanh, _swiglu], ids=["gelu_tanh", "swiglu"])
@pytest.mark.parametrize("shape", [(8, 3072), (5, 7, 40), (3, 1000)])
def test_gelu_and_swiglu_match_eager(dtype, fn, shape):
    args = [
        torch.randn(shape, device="cuda", dtype=dtype) * 3 for _ in range(fn.__code__.co_argcount)
    ]
    tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3}.get(dtype)
    _, made = compiled_on_cuda(fn, *args, atol=tol, rtol=tol)
    assert made == 1


def _add_layer_norm(x, r, w, b):
    h = x + r
    return h, F.layer_norm(h, (x.shape[-1],), w, b)


@pytest.mark.parametrize("dtype", HALF + [torch.float32])
@pytest.mark.parametrize("rows,width", [(37, 40), (4096, 768), (5, 1000), (37, 1024), (5, 4096)])
def test_add_layer_norm_sum_bits_and_norm_match_eager(dtype, rows, width):
    x, r = (torch.randn(rows, width, device="cuda", dtype=dtype) for _ in range(2))
    w, b = (torch.randn(width, device="cuda", dtype=dtype) for _ in range(2))
    tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3}.get(dtype)
    compiled, made = compiled_on_cuda(_add_layer_norm, x, r, w, b, atol=tol, rtol=tol)
    assert made == 1
    with torch.no_grad():
        h, _ = compiled(x, r, w, b)
    assert torch.equal(h, x + r)  # the sum is eager's, bit for bit
