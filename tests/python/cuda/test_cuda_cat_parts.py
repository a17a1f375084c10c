"""cat with computed parts on the GPU (csrc/passes/lower_data.cpp `cat`, the packed gathers of
csrc/codegen/cuda/kernel_text.cpp): rotary's rotate_half and cats along the innermost or an outer
axis, with aligned and misaligned inputs and parts that are not whole packs, equal eager forward
and in training, in one kernel where the parts' producers fuse."""

import pytest
import torch
import torch.nn.functional as F
from helpers import compiled_on_cuda
from llama_block import Block, rotary, rotate_half_backward, step, swiglu_backward

import torchlite

pytestmark = pytest.mark.cuda


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(q, cos, sin):
    return q * cos + rotate_half(q) * sin


def rope_of_qkv(qkv, cos, sin):
    b, s, _ = qkv.shape
    q, k, v = qkv.view(b, s, 3, 4, -1).unbind(2)
    q, k = (rope(t.transpose(1, 2), cos, sin) for t in (q, k))
    return q + k * v.transpose(1, 2)


def tol(dtype):
    return {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "shape,offset", [((2, 4, 16, 64), 0), ((2, 3, 5, 14), 0), ((2, 4, 8, 64), 1)]
)
def test_rotary_is_one_kernel_and_matches_eager(dtype, shape, offset):
    n = torch.Size(shape).numel()
    q = torch.randn(n + offset, device="cuda", dtype=dtype)[offset:].view(shape)
    cos = torch.randn(shape[-2:], device="cuda", dtype=dtype)
    sin = torch.randn(shape[-2:], device="cuda", dtype=dtype)
    _, made = compiled_on_cuda(rope, q, cos, sin, **tol(dtype))
    assert made == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_of_a_transposed_projection_matches_eager(dtype):
    qkv = torch.randn(2, 16, 3 * 4 * 32, device="cuda", dtype=dtype)
    cos = torch.randn(16, 32, device="cuda", dtype=dtype)
    sin = torch.randn(16, 32, device="cuda", dtype=dtype)
    compiled_on_cuda(rope_of_qkv, qkv, cos, sin, **tol(dtype))


CATS = {
    "inner": lambda x, y: torch.cat([x.sin(), -y, x * 2], -1),
    "outer": lambda x, y: torch.cat([x.cos(), (x - y).abs()], 0) + 1,
    "middle": lambda x, y: torch.cat([x.unsqueeze(1) * 3, y.unsqueeze(1).exp()], 1),
    "stack": lambda x, y: torch.stack([x.sin(), y * 2, x - y], 1),
}


@pytest.mark.parametrize("name", sorted(CATS))
@pytest.mark.parametrize("cols", [64, 13])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cat_of_computed_parts_is_one_kernel(name, cols, dtype):
    x = torch.randn(37, cols, device="cuda", dtype=dtype)
    y = torch.randn(37, cols, device="cuda", dtype=dtype)
    _, made = compiled_on_cuda(CATS[name], x, y, **tol(dtype))
    assert made == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_training_gradients_match_eager(dtype):
    qkv = torch.randn(2, 16, 3 * 4 * 32, device="cuda", dtype=dtype)
    cos = torch.randn(16, 32, device="cuda", dtype=dtype)
    sin = torch.randn(16, 32, device="cuda", dtype=dtype)

    def grads(fn):
        x = qkv.clone().requires_grad_()
        out = fn(x, cos, sin)
        (g,) = torch.autograd.grad(out.float().square().sum(), x)
        return out, g

    torchlite.reset()
    out, g = grads(torchlite.compile(rope_of_qkv))
    eout, eg = grads(rope_of_qkv)
    torch.testing.assert_close(out, eout, **tol(dtype))
    torch.testing.assert_close(g, eg, **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels", [(64, 64, 96, 32), (16, 8, 24), (12, 20), (4, 28)], ids=str)
def test_channels_last_channel_cat_matches_eager(dtype, channels):
    # inception's four-branch cat: packs read only their own part when every bound is on a
    # pack boundary (test_cuda_vector_entries.py checks the text), every part otherwise.
    parts = [
        torch.randn(3, c, 5, 7, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
        for c in channels
    ]
    _, made = compiled_on_cuda(
        lambda *ps: torch.cat([torch.relu(p) * (i + 1) for i, p in enumerate(ps)], 1),
        *parts,
        **tol(dtype),
    )
    assert made == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels", [(64, 64, 96, 32), (16, 8, 24), (64, 64)], ids=str)
def test_a_channel_cat_of_batch_norm_branches_matches_eager(dtype, channels):
    # inception_v3's Mixed blocks: each branch's eval batch norm + ReLU fuse into the cat, which
    # takes the scalar entry (kernel_text.cpp vector_width: more gathered buffers than packs).
    args = []
    for c in channels:
        x = torch.randn(3, c, 5, 7, device="cuda", dtype=dtype)
        args.append(x.to(memory_format=torch.channels_last))
        args += [torch.randn(c, device="cuda", dtype=dtype) for _ in range(4)]
        args[-3] = args[-3].abs() + 0.5  # the running variance

    def branches(*a):
        outs = [
            torch.relu(F.batch_norm(a[i], a[i + 1], a[i + 2], a[i + 3], a[i + 4], False, 0.1, 1e-3))
            for i in range(0, len(a), 5)
        ]
        return torch.cat(outs, 1)

    _, made = compiled_on_cuda(branches, *args, **tol(dtype))
    assert made == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 4, 16, 64), (2, 3, 5, 14)])
def test_a_value_both_halves_read_computes_in_the_cat(dtype, shape):
    # passes/fuse.cpp `recomputable`: g * sin is computed in each half, not stored and gathered
    g = torch.randn(shape, device="cuda", dtype=dtype)
    cos = torch.randn(shape[-2:], device="cuda", dtype=dtype)
    sin = torch.randn(shape[-2:], device="cuda", dtype=dtype)
    _, made = compiled_on_cuda(rotate_half_backward, g, cos, sin, **tol(dtype))
    assert made == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("pad", [(8, 16), (3, 5), (0, 8)], ids=str)
def test_padding_along_the_innermost_axis_matches_eager(dtype, pad):
    x = torch.randn(4, 6, 32, device="cuda", dtype=dtype)
    compiled_on_cuda(lambda x: F.pad(x.sin(), pad) + 1, x, **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cols", [128, 22])
def test_a_gate_cast_both_halves_read_computes_in_the_cat(dtype, cols):
    gu = torch.randn(3, 37, cols, device="cuda", dtype=dtype)
    g = torch.randn(3, 37, cols // 2, device="cuda", dtype=dtype)
    _, made = compiled_on_cuda(swiglu_backward, gu, g, **tol(dtype))
    assert made == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_llama_block_training_matches_eager(dtype):
    torch.manual_seed(0)
    block = Block(64, 4, 96).to(device="cuda", dtype=dtype)
    cos, sin = (t.cuda() for t in rotary(16, 16, dtype))
    x = torch.randn(2, 16, 64, device="cuda", dtype=dtype)
    out_e, grads_e = step(block, x, cos, sin)
    block.zero_grad(set_to_none=True)
    torchlite.reset()
    out_c, grads_c = step(torchlite.compile(block), x, cos, sin)
    t = {"atol": 3e-2, "rtol": 3e-2} if dtype == torch.bfloat16 else {"atol": 1e-4, "rtol": 1e-4}
    torch.testing.assert_close(out_c, out_e, **t)
    for got, want in zip(grads_c, grads_e):
        torch.testing.assert_close(got, want, **t)
