"""pow with a constant exponent: the exponents ATen special-cases (2, 3, 0.5, -0.5, -1, -2)
lower to multiplications, sqrt, rsqrt and reciprocals (no pow call per element, as in GPT-2's
tanh gelu), others to pow; all equal eager."""

import pytest
import torch

import torchlite
from torchlite import _C

SPECIAL = (2, 3, 0.5, -0.5, -1, -2)


def _kernel_text(fn, x):
    graph = torchlite.explain(fn)(x).graphs[0]
    summary = _C.partition_summary(graph)
    assert summary["kernel_count"] == 1
    return summary["kernels"][0]


@pytest.mark.parametrize("exponent", SPECIAL + (1.7, 4))
def test_constant_exponents_lower_as_aten_computes_them(exponent):
    text = _kernel_text(lambda x: x.pow(exponent) + 1, torch.rand(4, 8) + 0.5)
    if exponent in SPECIAL:
        assert "pow(" not in text, text
    else:
        assert "pow(" in text, text


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("exponent", SPECIAL + (1.7,))
@pytest.mark.parametrize("shape", [(7,), (3, 33)])
def test_constant_exponents_match_eager(exponent, dtype, shape):
    def fn(x):
        return torch.pow(x * 1.5, exponent) + x

    x = (torch.rand(shape) + 0.25).to(dtype)
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for _ in range(2):
        x = (torch.rand(shape) + 0.25).to(dtype)
        torch.testing.assert_close(compiled(x), fn(x))
