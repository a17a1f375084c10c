"""Graphs on a CUDA device that also make CPU tensors (timm's edgenext builds a mask with
`~torch.zeros(shape)` on the CPU and moves it with `.to(device)`): the CUDA ops still compile to
kernels, the CPU values and the ops that read them run through torch, and results equal eager's.
Before, the second device sent the whole graph op by op (edgenext compiled zero kernels)."""

import pytest
import torch
from helpers import compiled_on_cuda

pytestmark = pytest.mark.cuda


def _mask_then_pointwise(x):
    # edgenext's PositionalEncodingFourier: a CPU mask, moved to x's device, summed along rows.
    inv_mask = ~torch.zeros(x.shape[0], x.shape[2], x.shape[3]).to(
        device=x.device, dtype=torch.bool
    )
    y_embed = inv_mask.cumsum(1, dtype=torch.float32)
    return torch.sigmoid(x * 2 + 1) * x + y_embed.unsqueeze(1) / (
        y_embed[:, -1:, :].unsqueeze(1) + 1e-6
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 8, 7, 7), (3, 16, 12, 5)])
def test_cpu_tensor_in_a_cuda_graph_leaves_the_rest_compiled(shape, dtype):
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    _, kernels = compiled_on_cuda(_mask_then_pointwise, x, atol=tol, rtol=tol)
    assert kernels > 0, "the CUDA ops of a graph that also makes a CPU tensor compiled no kernel"


def test_cpu_scalar_tensor_argument_is_read_by_torch_not_a_kernel():
    # A 0-d CPU tensor mixed into CUDA math (torch allows it): its readers stay extern.
    def f(x, s):
        return (x * s).relu() + torch.tanh(x) * 3

    x = torch.randn(33, 65, device="cuda")
    s = torch.tensor(1.5)
    _, kernels = compiled_on_cuda(f, x, s, atol=1e-5, rtol=1e-5)
    assert kernels > 0
