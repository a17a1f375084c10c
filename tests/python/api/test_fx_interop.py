"""Graphs handed to `backend=` callables are valid torch.fx GraphModules: their code regenerates,
prints and runs, and the compiled function returns eager's values.

Each program exercises one kind of node the interpreter records (in-place ops, operator-module
functions, methods, torch.ops overloads, numpy/math constants, module calls, classes and
functions as arguments, Python scalars, container outputs, typing casts). `helpers.
fx_checking_backend` recompiles, prints and runs every graph; the same check runs over whole
test folders with `pytest --fx-backend-check`.
"""

import math
import operator
import typing
from collections import namedtuple

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import assert_same, clone_args, fresh_like, fx_checking_backend
from torch import fx

import torchlite

Pair = namedtuple("Pair", ["first", "second"])

_linear = torch.nn.Linear(4, 4)
_mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 4))
_offsets = torch.tensor([1.0, -2.0, 3.0, 0.5])


def _running_sum(x, y):
    acc = 0
    for row in (x, y):
        acc += row  # operator.iadd with a Python int as its target on the first step
    return acc


def _two_sums_from_zero(x, y):
    # T5's relative-position buckets: two accumulators start from the same int object 0.
    first = 0
    first += (x > 0).long() * 4
    second = 0
    second += y * 2
    first += torch.where(y > 0, 1, 2)
    return first, second


def _augmented_assignments(x, y):
    x += y
    x *= 2
    x -= 1.5
    x /= 3
    return x


def _setitem(x, y):
    x[0] = 1.0
    x[1:3, ::2] = y[:2, ::2]
    return x


def _inplace_overload(x, y):
    torch.ops.aten.add_.Tensor(x, y)
    return x * 2


def _nested_module(x, y):
    return _mlp(x) + _linear(y)


def _checkpointed(x, y):
    return torch.utils.checkpoint.checkpoint(torch.sin, x, use_reentrant=False) + y


def _float64_math(x, y):
    return (x.double() * math.tau).sum(dtype=torch.float64)


PROGRAMS = {
    # in-place ops and augmented assignment
    "inplace_methods": lambda x, y: (x.add_(y).mul_(2).add_(1.5), x),
    "augmented_assignment": _augmented_assignments,
    "iadd_python_int_target": _running_sum,
    "two_sums_from_zero": _two_sums_from_zero,
    "setitem": _setitem,
    "torch_ops_inplace_overload": _inplace_overload,
    # operator module functions
    "operator_functions": lambda x, y: operator.truediv(operator.add(x, y), operator.neg(y)),
    "operator_iadd_on_input": lambda x, y: operator.iadd(x, y),
    "negative_base_power": lambda x, y: (-2) ** x + (-0.5) ** y.abs(),
    "comparisons_and_invert": lambda x, y: (~(x > y)).float() + (x <= 0.5).float(),
    "matmul_operator": lambda x, y: x @ y.T,
    "rsub_and_rtruediv": lambda x, y: 1 - x + 2 / (y.abs() + 1),
    # methods
    "methods": lambda x, y: x.sin().sum(dim=-1, keepdim=True) * y.transpose(0, 1),
    "view_by_size": lambda x, y: x.view(x.size(0), -1) * x.shape[1],
    "new_zeros_of_size": lambda x, y: x.new_zeros(x.size()) + y,
    "dtype_conversions": lambda x, y: x.to(torch.float64) + y.type(torch.float64),
    "masked_fill_inf": lambda x, y: x.masked_fill(y > 0, float("-inf")).softmax(-1),
    "sort_values": lambda x, y: x.sort(dim=-1).values + y,
    # torch.ops overloads and packets
    "torch_ops_overload": lambda x, y: torch.ops.aten.add.Tensor(x, y),
    "torch_ops_default": lambda x, y: torch.ops.aten.relu.default(x) + y,
    "torch_ops_packet": lambda x, y: torch.ops.aten.mul(x, y),
    "torch_ops_list_arg": lambda x, y: torch.ops.aten.sum.dim_IntList(x, [0]) + y[0],
    # numpy and math constants
    "numpy_scalars": lambda x, y: x * np.float32(2.0) + np.float64(0.25) * y + np.int64(3),
    "numpy_pi": lambda x, y: x * np.pi,
    "math_constants": lambda x, y: x * math.pi + math.e - y * math.sqrt(x.shape[0]),
    "math_inf_nan": lambda x, y: torch.where(x > 0, math.inf, x).clamp(max=1e30) + y,
    "float64_math": _float64_math,
    # module calls
    "linear_module": lambda x, y: _linear(x).relu() + y,
    "nested_modules": _nested_module,
    "functional": lambda x, y: F.gelu(x) + F.softmax(y, dim=-1) + F.layer_norm(x, (4,)),
    # classes and functions as arguments
    "function_argument": _checkpointed,
    "class_argument": lambda x, y: x.as_subclass(torch.Tensor) + y,
    "dtype_and_device_arguments": lambda x, y: (
        torch.ones(4, dtype=torch.float64, device=x.device)
        + torch.zeros_like(x, dtype=torch.int32)
        + y
    ),
    "finfo": lambda x, y: x.clamp(min=torch.finfo(x.dtype).min) + torch.finfo(torch.float32).eps,
    "tensor_constant": lambda x, y: x + _offsets,
    "new_tensor": lambda x, y: x + torch.tensor([1.0, 2.0, 3.0, 4.0]),
    # Python scalars
    "python_scalars": lambda x, y: x + 3 * 2.5 - len(y) + True,
    "complex_scalar": lambda x, y: (x * 1j + y).abs(),
    # container outputs
    "tuple_output": lambda x, y: (x + 1, (y * 2, x - y)),
    "dict_output": lambda x, y: {"a": x + 1, "b": [y, y * 2]},
    "namedtuple_output": lambda x, y: Pair(x + 1, y),
    "return_types_output": lambda x, y: torch.max(x + y, dim=0),
    "scalar_output": lambda x, y: (x + y, 2.5, None),
    # typing casts
    "typing_cast_type": lambda x, y: typing.cast(torch.Tensor, x) + y,
    "typing_cast_any": lambda x, y: typing.cast(typing.Any, x) * 2 + y,
    "typing_cast_string": lambda x, y: typing.cast("torch.Tensor", x) - y,
    "jit_annotate": lambda x, y: torch.jit.annotate(typing.List[torch.Tensor], [x, y]),  # noqa: UP006
}


def _inputs():
    return (torch.randn(4, 4), torch.randn(4, 4))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_graph_handed_to_backend_recompiles_runs_and_matches_eager(name):
    fn = PROGRAMS[name]
    before = fx_checking_backend.graphs
    compiled = torchlite.compile(fn, backend=fx_checking_backend)
    args = _inputs()
    for i, call_args in enumerate([args, args, fresh_like(args)]):
        eager_args, compiled_args = clone_args(call_args), clone_args(call_args)
        expected = fn(*eager_args)
        actual = compiled(*compiled_args)
        assert_same(actual, expected, path=f"call {i} out")
        assert_same(compiled_args, eager_args, path=f"call {i} args after call")
    assert fx_checking_backend.graphs > before, "no graph reached the backend"


def _graph_of(fn, *args) -> fx.GraphModule:
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    torchlite.compile(fn, backend=backend, fullgraph=True)(*args)
    assert len(seen) == 1
    return seen[0]


def test_torch_ops_overload_is_the_target_backends_see():
    gm = _graph_of(lambda x, y: torch.ops.aten.add.Tensor(x, y), *_inputs())
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets == [torch.ops.aten.add.Tensor]
    assert "torch.ops.aten.add.Tensor(" in gm.code


def test_unprintable_constants_are_module_attributes():
    gm = _graph_of(
        lambda x, y: torch.utils.checkpoint.checkpoint(torch.sin, x, use_reentrant=False),
        *_inputs(),
    )
    attrs = [n for n in gm.graph.nodes if n.op == "get_attr"]
    assert [getattr(gm, n.target) for n in attrs] == [torch.sin]


def test_python_int_target_of_inplace_add_is_not_printed_as_a_statement():
    gm = _graph_of(_running_sum, *_inputs())
    compile(gm.code, "<fx>", "exec")
    assert not any(line.lstrip().startswith("0 +=") for line in gm.code.splitlines())


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.full((4,), 0.5))

    def forward(self, x, self_=None):
        return self.proj(x).relu() * self.scale + (0 if self_ is None else self_)


def test_module_graph_handed_to_backend_runs_and_matches_eager():
    block = _Block()
    before = fx_checking_backend.graphs
    compiled = torchlite.compile(block, backend=fx_checking_backend)
    for x in (torch.randn(3, 4), torch.randn(3, 4)):
        assert_same(compiled(x, self_=x), block(x, self_=x))
    assert fx_checking_backend.graphs > before
