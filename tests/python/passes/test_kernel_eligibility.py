"""Which graphs run as fused kernels: values autograd must track stay torch ops, but reading a
parameter (or a view of one, which reports requires_grad even under no_grad) does not stop
fusion."""

import pytest
import torch
from torch import nn

import torchlite

needs_cpu_kernels = pytest.mark.skipif(
    not torchlite._C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


class LayerScale(nn.Module):
    """timm's ConvNeXt block tail: a per-channel parameter reshaped to broadcast."""

    def __init__(self, channels):
        super().__init__()
        self.gamma = nn.Parameter(torch.rand(channels) + 0.5)

    def forward(self, x):
        return torch.relu(x * self.gamma.reshape(1, -1, 1, 1) + 1).sigmoid()


@needs_cpu_kernels
@pytest.mark.parametrize("shape", [(2, 8, 5, 5), (1, 8, 3, 7)])
def test_a_reshaped_parameter_under_no_grad_still_fuses(shape):
    m = LayerScale(shape[1])
    x = torch.randn(shape)
    torchlite.reset()
    before = torchlite.counters()["kernels"]
    compiled = torchlite.compile(m)
    with torch.no_grad():
        expected = m(x)
        actual = compiled(x)
    torch.testing.assert_close(actual, expected)
    assert not actual.requires_grad
    assert torchlite.counters()["kernels"] > before


def test_with_grad_enabled_the_graph_stays_differentiable():
    m = LayerScale(4)
    x = torch.randn(2, 4, 3, 3)
    torchlite.reset()
    compiled = torchlite.compile(m)
    out = compiled(x)
    assert out.requires_grad
    out.sum().backward()
    got = m.gamma.grad.clone()
    m.gamma.grad = None
    m(x).sum().backward()
    torch.testing.assert_close(got, m.gamma.grad)
