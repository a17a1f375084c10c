"""Issue 26: CUDA modules are unloaded once no compiled graph uses their kernels (as the CPU JIT
frees a kernel's code with its last user), at the next compile or torchlite.reset(). Needs a
GPU."""

import gc

import pytest
import torch

import torchlite
from torchlite import _C

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def _needs_gpu(monkeypatch):
    if not torch.cuda.is_available() or not _C.cuda_driver_available()[0]:
        pytest.skip("no CUDA device")
    monkeypatch.setattr(torchlite.config, "cache_dir", "")


def fresh_function(i: int):
    """A new code object each call, with a kernel body of its own (the constant differs)."""
    scope = {"torch": torch}
    exec(f"def g_{i}(x):\n    return torch.sigmoid(x * {i + 0.25}) - {i}\n", scope)  # noqa: S102
    return scope[f"g_{i}"]


def check(f, i, n=1000):
    x = torch.randn(n, device="cuda")
    with torch.no_grad():
        torch.testing.assert_close(torchlite.compile(f)(x), torch.sigmoid(x * (i + 0.25)) - i)


def settle():
    gc.collect()
    torchlite.reset()  # unloads the modules whose last user is gone
    torch.cuda.synchronize()


def test_modules_are_unloaded_with_the_functions_that_used_them():
    settle()
    base = _C.live_cuda_modules()
    fns = [fresh_function(i) for i in range(4)]
    for i, f in enumerate(fns):
        check(f, i)
    assert _C.live_cuda_modules() >= base + 4
    del fns, f
    settle()
    assert _C.live_cuda_modules() == base


def test_identical_kernels_share_a_module_until_the_last_user_dies():
    settle()
    base = _C.live_cuda_modules()
    a, b = fresh_function(5), fresh_function(5)  # two code objects, one kernel body
    check(a, 5)
    check(b, 5)
    assert _C.live_cuda_modules() == base + 1
    del a
    gc.collect()
    # NOTE: not settle(): reset() would drop b's entries too. The next compile unloads what
    # is queued; b's module must not be among them (b still uses it).
    check(fresh_function(6), 6)
    assert _C.live_cuda_modules() == base + 2
    check(b, 5)  # still loaded: runs without a reload
    del b
    settle()
    assert _C.live_cuda_modules() == base


def test_kernel_compiled_again_after_its_module_was_unloaded():
    settle()
    base = _C.live_cuda_modules()
    check(fresh_function(9), 9)
    settle()
    assert _C.live_cuda_modules() == base
    check(fresh_function(9), 9)  # same body: loaded again, not the unloaded module's functions
    settle()
    assert _C.live_cuda_modules() == base


def test_many_compile_drop_cycles_keep_modules_bounded():
    settle()
    base = _C.live_cuda_modules()
    for i in range(40):
        check(fresh_function(100 + i), 100 + i, n=257)
        if i % 10 == 9:
            gc.collect()
    settle()
    assert _C.live_cuda_modules() == base
