"""Integer constants that lowering derives from sizes (a cat's part bound and clamp, the first
position of a slice or an embedding read) are read by CPU kernels from their dims array
(codegen/common/runtime_constants.h), so a decode loop compiles no kernel after its first lengths
(before: a literal, an LLVM compile per token). CPU kernels whose index math divides read their
divisors' magic numbers from the dims too (tests/python/dynamic/test_cpu_runtime_divisors.py).
Every result is checked against eager. The CUDA side, where divisors are dims numbers too:
tests/python/cuda/test_cuda_kernel_reuse.py and tests/python/passes/test_cuda_runtime_constants.py."""

import pytest
import torch

import torchlite
from torchlite import _C, config

pytestmark = pytest.mark.skipif(
    not _C.has_llvm, reason="this build has no LLVM: CPU graphs run op by op"
)


@pytest.fixture(autouse=True)
def _private_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    torchlite.reset()


def _decode_step(past, new, wpe):
    kv = torch.cat([past, new], dim=2)
    pos = wpe[past.shape[2] + torch.arange(new.shape[2])]
    return kv * 2, pos + 1


def _run(compiled, fn, *args):
    before = _C.llvm_compiles()
    with torch.no_grad():
        out = compiled(*args)
    torch.testing.assert_close(out, fn(*args))
    return _C.llvm_compiles() - before


def test_a_decode_loop_compiles_no_cpu_kernel_after_its_first_lengths():
    # before: the cat's bound and clamp and the position were literals, an LLVM compile per
    # length
    wpe = torch.randn(64, 16)
    compiled = torchlite.compile(_decode_step)
    past = torch.randn(2, 2, 5, 16)
    compiles = []
    for _ in range(10):
        new = torch.randn(2, 2, 1, 16)
        compiles.append(_run(compiled, _decode_step, past, new, wpe))
        past = torch.cat([past, new], dim=2)
    # NOTE: lengths below the head size (16): a bound or clamp equal to it is one constant less
    assert sum(compiles[3:]) == 0, compiles
