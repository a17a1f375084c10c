"""torch functions and Tensor methods captured whole (fullgraph) and equal to eager."""

import pytest
import torch
from helpers import check

DTYPES = [torch.float32, torch.float64]
SHAPES = [(4, 8), (2, 3, 5)]

# NOTE: unary/binary functions with unrestricted domains; `y` has the shape of `x`.
TORCH_FUNCTIONS = {
    "add": lambda x, y: torch.add(x, y),
    "add_alpha": lambda x, y: torch.add(x, y, alpha=2.5),
    "sub": lambda x, y: torch.sub(x, y),
    "mul": lambda x, y: torch.mul(x, y),
    "div": lambda x, y: torch.div(x, y.abs() + 1),
    "maximum": lambda x, y: torch.maximum(x, y),
    "minimum": lambda x, y: torch.minimum(x, y),
    "where": lambda x, y: torch.where(x > y, x, y),
    "exp": lambda x, y: torch.exp(x),
    "log_abs": lambda x, y: torch.log(x.abs() + 1),
    "sqrt_abs": lambda x, y: torch.sqrt(x.abs()),
    "rsqrt": lambda x, y: torch.rsqrt(x.abs() + 1),
    "sin_cos": lambda x, y: torch.sin(x) + torch.cos(y),
    "tanh": lambda x, y: torch.tanh(x),
    "sigmoid": lambda x, y: torch.sigmoid(x),
    "abs_neg": lambda x, y: torch.abs(-x),
    "clamp": lambda x, y: torch.clamp(x, -0.5, 0.5),
    "clamp_min": lambda x, y: torch.clamp_min(x, 0.1),
    "pow_scalar": lambda x, y: torch.pow(x, 2),
    "pow_tensor": lambda x, y: torch.pow(x.abs() + 0.5, y),
    "erf": lambda x, y: torch.erf(x),
    "sum": lambda x, y: torch.sum(x),
    "sum_dim": lambda x, y: torch.sum(x, dim=-1),
    "sum_keepdim": lambda x, y: torch.sum(x, dim=0, keepdim=True),
    "mean_dim": lambda x, y: torch.mean(x, dim=-1),
    "amax": lambda x, y: torch.amax(x, dim=-1),
    "max_dim": lambda x, y: torch.max(x, dim=-1),
    "argmax": lambda x, y: torch.argmax(x, dim=-1),
    "var_mean": lambda x, y: torch.var_mean(x, dim=-1),
    "std": lambda x, y: torch.std(x, dim=0),
    "prod": lambda x, y: torch.prod(x * 0.5 + 1, dim=-1),
    "cumsum": lambda x, y: torch.cumsum(x, dim=-1),
    "logsumexp": lambda x, y: torch.logsumexp(x, dim=-1),
    "cat": lambda x, y: torch.cat([x, y], dim=-1),
    "stack": lambda x, y: torch.stack([x, y]),
    "transpose": lambda x, y: torch.transpose(x, 0, -1) * 2,
    "flatten": lambda x, y: torch.flatten(x),
    "unsqueeze": lambda x, y: torch.unsqueeze(x, 1) + 1,
    "zeros_like": lambda x, y: torch.zeros_like(x) + torch.ones_like(y),
    "full_like": lambda x, y: torch.full_like(x, 3.0) * y,
    "lerp": lambda x, y: torch.lerp(x, y, 0.3),
    "addcmul": lambda x, y: torch.addcmul(x, x, y, value=0.5),
    "chunk": lambda x, y: torch.chunk(x, 2, dim=-1),
    "split": lambda x, y: torch.split(y, 1, dim=0),
    "sort": lambda x, y: torch.sort(x, dim=-1),
    "topk": lambda x, y: torch.topk(x, 2, dim=-1),
    "tril_2d": lambda x, y: torch.tril(x.flatten(0, -2)),
    "einsum": lambda x, y: torch.einsum("...i,...i->...", x, y),
    "nan_to_num": lambda x, y: torch.nan_to_num(x / (y * 0)),
}

TENSOR_METHODS = {
    "relu": lambda x, y: x.relu(),
    "add_method": lambda x, y: x.add(y, alpha=-1),
    "mul_scalar": lambda x, y: x.mul(3),
    "view": lambda x, y: x.view(-1),
    "reshape": lambda x, y: x.reshape(x.shape[0], -1),
    "permute": lambda x, y: x.permute(*reversed(range(x.dim()))),
    "t_contiguous": lambda x, y: x.transpose(0, 1).contiguous(),
    "expand": lambda x, y: x[:1].expand_as(x) + y,
    "sum_method": lambda x, y: x.sum(-1, keepdim=True),
    "mean_method": lambda x, y: x.mean(),
    "max_method": lambda x, y: x.max(),
    "norm": lambda x, y: x.norm(dim=-1),
    "softmax_method": lambda x, y: x.softmax(-1),
    "type_as": lambda x, y: (x > 0).type_as(y),
    "to_dtype": lambda x, y: x.to(torch.float16).to(x.dtype),
    "float_int": lambda x, y: (x * 10).int().float(),
    "masked_fill": lambda x, y: x.masked_fill(y > 0, -1.0),
    "clone_detach": lambda x, y: x.clone().detach() + y,
    "square": lambda x, y: x.square() - y.exp(),
    "squeeze": lambda x, y: x.unsqueeze(0).squeeze(0),
    "new_zeros": lambda x, y: x.new_zeros(x.shape) + x.new_ones(3).sum(),
    "flip": lambda x, y: x.flip(-1),
    "roll": lambda x, y: x.roll(1, dims=-1),
    "any_all": lambda x, y: ((x > 0).any(), (x > -10).all()),
    "gather": lambda x, y: x.gather(-1, x.argsort(dim=-1)),
}


def _inputs(shape, dtype):
    return torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(TORCH_FUNCTIONS))
def test_torch_function_matches_eager(name, dtype, shape):
    check(TORCH_FUNCTIONS[name], *_inputs(shape, dtype))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(TENSOR_METHODS))
def test_tensor_method_matches_eager(name, dtype, shape):
    check(TENSOR_METHODS[name], *_inputs(shape, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_factory_functions_with_trace_time_shape_match_eager(dtype):
    def fn(x):
        a = torch.zeros(x.shape[0], 3, dtype=x.dtype)
        b = torch.ones(x.shape, dtype=dtype)
        c = torch.arange(x.shape[-1], dtype=x.dtype)
        d = torch.full((2,), 7.0, dtype=x.dtype)
        e = torch.eye(3, dtype=x.dtype)
        return a, b * x + c, d, e, torch.tensor([1.0, 2.0], dtype=x.dtype)

    check(fn, torch.randn(4, 5, dtype=dtype))


def test_integer_tensors_match_eager():
    def fn(i, j):
        return i + j, i * 3, i // (j.abs() + 1), i % 3, (i - j).abs().sum(), i.max()

    check(fn, torch.randint(-5, 5, (3, 4)), torch.randint(-5, 5, (3, 4)))


def test_bool_tensor_reductions_match_eager():
    def fn(x):
        m = x > 0
        return m.sum(), m.float().mean(), torch.logical_and(m, ~m).any(), m.int().cumsum(0)

    check(fn, torch.randn(2, 3))
