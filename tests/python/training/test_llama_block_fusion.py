"""A Llama-style block (RMSNorm, fused qkv projection unbound into rotary q/k and v, SDPA,
SwiGLU) trains compiled with its gradients equal eager's, and its backward's cat parts compute
what they share in the cat's kernel (csrc/passes/fuse.cpp `recomputable`): rotary's
`g * sin`, read by both halves of rotate_half's gradient, and SwiGLU's float copy of the
gate, read by both halves of the gate/up gradient, are no kernels of their own."""

import pytest
import torch
from llama_block import Block, rotary, step
from train_check import compiled_backward_used

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


@pytest.mark.parametrize(
    "dtype,d,heads,inter,seq",
    [
        (torch.float32, 32, 2, 48, 8),
        (torch.float32, 64, 4, 40, 5),
        (torch.bfloat16, 32, 4, 24, 6),
    ],
)
def test_llama_block_trains_as_eager_with_shared_cat_producers_fused(dtype, d, heads, inter, seq):
    torch.manual_seed(0)
    block = Block(d, heads, inter).to(dtype)
    cos, sin = rotary(seq, d // heads, dtype)
    x = torch.randn(2, seq, d, dtype=dtype)
    out_e, grads_e = step(block, x, cos, sin)
    block.zero_grad(set_to_none=True)
    torchlite.reset()
    torchlite.reset_counters()
    compiled = torchlite.compile(block)
    out_c, grads_c = step(compiled, x, cos, sin)
    assert compiled_backward_used(out_c)
    tol = {"atol": 3e-2, "rtol": 3e-2} if dtype == torch.bfloat16 else {"atol": 1e-4, "rtol": 1e-4}
    torch.testing.assert_close(out_c, out_e, **tol)
    for got, want in zip(grads_c, grads_e):
        torch.testing.assert_close(got, want, **tol)
    # forward 5 (q's and k's rotary in one kernel: both read the projection's storage, which
    # the training graph's examples now say), backward 6 (RMSNorms' row and weight-gradient
    # kernels, SwiGLU's gradient cat, the q/k/v gradients' stack). Before: 6 + 9, the gate's
    # float copy and both rotary `g * sin` products stored by kernels of their own.
    # NOTE: 11 with recompute_matmul_inputs off; on, backward recomputes the SwiGLU product
    # (and, float32, the first RMSNorm's output) for the weight gradients instead of the forward
    # saving them: one or two kernels more, two or three activations fewer held for backward.
    assert torchlite.counters()["kernels"] <= 13
