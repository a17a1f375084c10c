"""Training graphs fuse as inductor's do around linears and layer norms:
- a training forward's layer norm is var_mean and pointwise math in generated kernels (torch's
  native_layer_norm was an extern call between kernels), the residual add before it and the
  half cast after it (`ln(x).view(-1, C).to(bf16)` before a linear under autocast) in its kernel;
- a bias gradient `grad.view(-1, C).sum(0)` reduces the value before the reshape
  (passes/move_reshapes.h), so it fuses with the kernel computing it (gelu's backward) or runs
  in one pass with the layer norm's weight and bias gradients (passes/fuse.cpp,
  merge_sibling_reductions).
- tanh's and sigmoid's backward (`(1 - y * y).conj_physical()`) stays in one kernel: conj_physical
  of a real tensor is its value, not an extern copy (GPT-2's tanh-approximated gelu).
Launch counts show what fused; every gradient is checked against eager in float32, float64 and
bfloat16 autocast at several sizes."""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import aten_ops
from train_check import compiled_backward_used

import torchlite
from torchlite import _C

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


class _Block(torch.nn.Module):
    """GPT-2's MLP half: x + proj(gelu(fc(ln(x)))), with biases."""

    def __init__(self, c: int, hidden: int) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(c)
        self.fc = torch.nn.Linear(c, hidden)
        self.proj = torch.nn.Linear(hidden, c)

    def forward(self, x):
        b, t, c = x.shape
        h = self.fc(self.ln(x).view(-1, c))
        h = self.proj(F.gelu(h, approximate="tanh"))
        return x + h.view(b, t, c)


class _Stack(torch.nn.Module):
    def __init__(self, c: int, hidden: int, depth: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(_Block(c, hidden) for _ in range(depth))
        self.ln_f = torch.nn.LayerNorm(c)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)


def _autocast(dtype):
    return torch.autocast("cpu", dtype=dtype, enabled=dtype is not None)


def _step(model, x, autocast):
    with _autocast(autocast):
        out = model(x)
    out.float().square().mean().backward()
    return out


def _check_gradients(model, x, autocast, **tol):
    """One compiled step's output and gradients against eager's, from the same weights."""
    x_eager = x.detach().clone().requires_grad_()
    out_eager = _step(model, x_eager, autocast)
    expected = [p.grad.clone() for p in model.parameters()] + [x_eager.grad]
    model.zero_grad(set_to_none=True)
    torchlite.reset()
    compiled = torchlite.compile(model)
    x_tl = x.detach().clone().requires_grad_()
    out = _step(compiled, x_tl, autocast)
    assert compiled_backward_used(out)
    torch.testing.assert_close(out, out_eager, **tol)
    got = [p.grad for p in model.parameters()] + [x_tl.grad]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, **tol)
    model.zero_grad(set_to_none=True)
    return compiled


def _launches(compiled, model, x, autocast):
    """Generated kernel launches of one warm step (forward and backward)."""
    for _ in range(2):
        _step(compiled, x, autocast)
    model.zero_grad(set_to_none=True)
    torchlite.reset_counters()
    _step(compiled, x, autocast)
    model.zero_grad(set_to_none=True)
    return torchlite.counters()["kernel_launches"]


_CASES = [
    # (batch, tokens, channels, hidden, dtype of the weights, autocast, tolerances)
    (2, 8, 16, 64, torch.float32, None, {}),
    (3, 5, 24, 40, torch.float32, None, {}),
    (2, 7, 16, 48, torch.float64, None, {}),
    (2, 8, 32, 64, torch.float32, torch.bfloat16, {"atol": 2e-2, "rtol": 2e-2}),
    (1, 9, 24, 72, torch.float32, torch.bfloat16, {"atol": 2e-2, "rtol": 2e-2}),
]


@pytest.mark.parametrize("b,t,c,hidden,dtype,autocast,tol", _CASES)
def test_block_gradients_match_eager(b, t, c, hidden, dtype, autocast, tol):
    torch.manual_seed(0)
    model = _Stack(c, hidden, 2).to(dtype)
    for p in model.parameters():  # NOTE: layer norms away from 1 and 0, so their grads count
        torch.nn.init.normal_(p, 0.5, 0.3)
    x = torch.randn(b, t, c, dtype=dtype)
    _check_gradients(model, x, autocast, **tol)


@pytest.mark.parametrize("autocast", [None, torch.bfloat16])
def test_training_layer_norm_runs_in_generated_kernels(autocast):
    torch.manual_seed(0)
    model = _Stack(16, 32, 2)
    x = torch.randn(2, 8, 16)
    compiled = _check_gradients(model, x, autocast, atol=2e-2, rtol=2e-2)
    for _ in range(2):
        _step(compiled, x, autocast)
    ops = aten_ops(lambda: _step(compiled, x, autocast))
    model.zero_grad(set_to_none=True)
    assert ops["aten::native_layer_norm"] == 0, ops
    assert ops["aten::layer_norm"] == 0, ops


@pytest.mark.parametrize("autocast,most", [(torch.bfloat16, 27), (None, 14)])
def test_block_step_launches_fewer_kernels(autocast, most):
    torch.manual_seed(0)
    model = _Stack(32, 64, 2)
    x = torch.randn(2, 8, 32)
    compiled = _check_gradients(model, x, autocast, atol=2e-2, rtol=2e-2)
    # NOTE: per block, forward: the residual add with the layer norm (and, under autocast,
    # the bf16 cast after it), the gelu; backward: the layer norm's row kernel, one column
    # kernel for its weight and bias gradients and the bias gradient of the linear after it,
    # the gelu's backward with fc's bias gradient. Before: 31 launches (autocast), 17.
    # NOTE: 26 under autocast while training graphs' examples were not views of one another:
    # a view of the incoming gradient was then a copy, stored whole by the norm's row kernel
    # for a column kernel that computed the input gradient; now the row kernel computes the
    # input gradient and the column sums run in two kernels (one launch more, a full-size
    # copy less).
    assert _launches(compiled, model, x, autocast) <= most


def new_gelu(x):
    """transformers' NewGELUActivation (GPT-2's MLP)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3.0))))


class _TanhMLP(torch.nn.Module):
    def __init__(self, c: int, hidden: int) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(c, hidden)
        self.proj = torch.nn.Linear(hidden, c)

    def forward(self, x):
        return self.proj(new_gelu(self.fc(x))) + torch.sigmoid(x) * x


@pytest.mark.parametrize("autocast", [None, torch.bfloat16])
@pytest.mark.parametrize("b,t,c,hidden", [(2, 8, 16, 64), (3, 5, 24, 40)])
def test_tanh_and_sigmoid_backward_run_no_copies(autocast, b, t, c, hidden):
    torch.manual_seed(0)
    model = _TanhMLP(c, hidden)
    x = torch.randn(b, t, c)
    compiled = _check_gradients(model, x, autocast, atol=2e-2, rtol=2e-2)
    for _ in range(2):
        _step(compiled, x, autocast)
    ops = aten_ops(lambda: _step(compiled, x, autocast))
    model.zero_grad(set_to_none=True)
    assert ops["aten::conj_physical"] == 0, ops
    # NOTE: the gelu's gradient, its recomputed tanh and fc's bias gradient are one kernel
    # (before: 13 launches under autocast, 6 without). One more: backward recomputes the
    # gelu's output for proj's weight gradient instead of the forward saving it
    # (recompute_matmul_inputs; 11 and 4 without).
    assert _launches(compiled, model, x, autocast) <= (12 if autocast else 5)
