"""A zero-element tensor from a factory that only fused kernels read (transformers' KV cache
starts as `torch.tensor([])` and is concatenated with the new keys) is never made by the compiled
graph: no kernel reads an element of it. Results still equal eager, and a factory whose tensor
another torch op reads, or the caller receives, is still called."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import torchlite

# NOTE: on CPU tensors only a build with LLVM fuses the cat into a kernel.
needs_cpu_kernels = pytest.mark.skipif(
    not torchlite._C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


class _Record(TorchDispatchMode):
    # NOTE: an observer of what the compiled code runs: without the mark, a frame called under a
    # mode runs eagerly (the mode must see every op).
    _torchlite_transparent_mode = True

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _ops_of_second_call(fn, *args):
    torchlite.reset()
    compiled = torchlite.compile(fn, fullgraph=True)
    with torch.no_grad():
        first = compiled(*args)
        with _Record() as rec:
            second = compiled(*args)
        expected = fn(*args)
    for out in (first, second):
        torch.testing.assert_close(out, expected)
    return rec.ops


def _cache_update(k):
    cache = torch.tensor([], dtype=k.dtype, device=k.device)
    return torch.cat([cache, k], dim=-2) * 2


@needs_cpu_kernels
@pytest.mark.parametrize("shape", [(2, 4, 8, 16), (1, 3, 5)])
def test_empty_cache_tensor_is_never_made(shape):
    ops = _ops_of_second_call(_cache_update, torch.randn(shape))
    assert "aten.lift_fresh.default" not in ops, ops
    assert ops == ["aten.empty_strided.default"], ops  # the kernel's output only


@pytest.mark.cuda
def test_empty_cuda_cache_tensor_is_never_made():
    ops = _ops_of_second_call(_cache_update, torch.randn(2, 12, 64, 64, device="cuda"))
    assert "aten.lift_fresh.default" not in ops, ops


@needs_cpu_kernels
def test_empty_factory_returned_to_the_caller_is_still_made():
    def fn(k):
        cache = torch.zeros(0, 16)
        return cache, torch.cat([cache, k]) * 2

    ops = _ops_of_second_call(fn, torch.randn(3, 16))
    assert "aten.zeros.default" in ops, ops


@needs_cpu_kernels
def test_empty_factory_read_by_a_torch_op_is_still_made():
    def fn(x):
        cache = torch.zeros(4, 0)
        return torch.mm(cache, x[:0]) + x  # mm of a 4x0 and a 0x4 matrix: zeros

    ops = _ops_of_second_call(fn, torch.randn(4, 4))
    assert "aten.zeros.default" in ops, ops
