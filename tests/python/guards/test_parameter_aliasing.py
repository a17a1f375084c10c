"""An argument that is (or views) a module's parameter or buffer while the graph writes one of
them. The STORAGE_ALIASING guard leaves attribute inputs out; these stay right because in-place
ops on inputs and attributes are never functionalized (passes/functionalize.h), are fusion
barriers (passes/graph_info.cpp is_barrier) and run as torch's own ops in graph order, so every
read after a write sees memory as eager does, and torch's own overlap checks raise as in eager.
Each module is compiled on unrelated inputs first, then called with the aliasing argument."""

import copy

import pytest
import torch

import torchlite


class BufferWrite(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.randn(6))
        self.w = torch.nn.Parameter(torch.randn(6))

    def forward(self, x):
        a = x * 3  # read before the write, fused with the read after it if it could be
        self.b.add_(1)
        return a + x, x * 2, x.sum()


class ArgumentWrite(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6))
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x):
        a = self.w * 3
        x.mul_(2)
        return a + self.w, self.lin(torch.ones(2, 6))


class BatchNormStats(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(6)

    def forward(self, x):
        before = x + 0
        h = self.bn(torch.arange(18.0).reshape(3, 6))
        return before, h, x + 0


class SliceWrite(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6))

    def forward(self, x):
        self.w[0:2] = x * 1
        return self.w + x.sum()


CASES = [
    (BufferWrite, 6, lambda m: m.b),
    (BufferWrite, 3, lambda m: m.b[2:5]),
    (ArgumentWrite, 6, lambda m: m.w),
    (ArgumentWrite, 6, lambda m: m.lin.weight[1]),
    (ArgumentWrite, 3, lambda m: m.w[::2]),
    (BatchNormStats, 6, lambda m: m.bn.running_mean),
    (SliceWrite, 2, lambda m: m.w[3:5]),
    (SliceWrite, 2, lambda m: m.w[1:3]),  # overlaps what it writes: raises in eager
]


@pytest.mark.parametrize(("module", "size", "aliased"), CASES)
def test_argument_aliasing_a_parameter_the_graph_writes_matches_eager(module, size, aliased):
    eager = module()
    compiled_module = copy.deepcopy(eager)
    torchlite.reset()
    compiled = torchlite.compile(compiled_module)
    with torch.no_grad():
        x = torch.randn(size)
        expected_first = eager(x.clone())
        torch.testing.assert_close(compiled(x.clone()), expected_first)
        try:
            expected = eager(aliased(eager))
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match=str(e)[:40]):
                compiled(aliased(compiled_module))
        else:
            torch.testing.assert_close(compiled(aliased(compiled_module)), expected)
    for (name, e), c in zip(eager.state_dict().items(), compiled_module.state_dict().values()):
        torch.testing.assert_close(c, e, msg=name)
