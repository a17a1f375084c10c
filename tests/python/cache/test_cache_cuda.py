"""Issue 26 on the GPU: CUBINs share the CPU objects' disk cache, so the same rules hold for
them (a foreign entry is never loaded; one the driver rejects costs one recompile). Needs a GPU:
without one, CUDA kernels are not loaded, so the cache is exercised through _C._disk_cache_*
in test_cache_robustness.py and tests/cpp/runtime/disk_cache_test.cpp."""

import pytest
from conftest import entries, run_child

from torchlite import _C

pytestmark = pytest.mark.cuda

CUDA_CHILD = r"""
import json, torch, torchlite
f = torchlite.compile(lambda x: torch.softmax(x * 2, -1) + 1)
x = torch.randn(64, 100, device="cuda")
with torch.no_grad():
    torch.testing.assert_close(f(x), torch.softmax(x * 2, -1) + 1)
torch.cuda.synchronize()
print(json.dumps(torchlite.counters()))
"""


def test_cubin_from_another_secret_is_not_loaded(tmp_path):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    run_child({"TORCHLITE_CACHE_DIR": str(mine)}, code=CUDA_CHILD, args=())
    run_child({"TORCHLITE_CACHE_DIR": str(theirs)}, code=CUDA_CHILD, args=())
    pairs = list(zip(entries(mine, "cuda", ".cubin"), entries(theirs, "cuda", ".cubin")))
    assert pairs and all(a.name == b.name for a, b in pairs)
    for a, b in pairs:
        a.write_bytes(b.read_bytes())
    c, _ = run_child({"TORCHLITE_CACHE_DIR": str(mine)}, code=CUDA_CHILD, args=())
    assert c["cache_hits"] == 0
    c, _ = run_child({"TORCHLITE_CACHE_DIR": str(mine)}, code=CUDA_CHILD, args=())
    assert c["cache_hits"] >= 1


def test_cubin_the_driver_rejects_is_discarded_and_recompiled(tmp_path, use_cache):
    cache = tmp_path / "cache"
    run_child({"TORCHLITE_CACHE_DIR": str(cache)}, code=CUDA_CHILD, args=())
    keys = [p.stem for p in entries(cache, "cuda", ".cubin")]
    use_cache(cache)
    for k in keys:  # authenticated, but not an image the driver can load
        _C._disk_cache_store("cuda", k, b"not a cubin")
    c, err = run_child({"TORCHLITE_CACHE_DIR": str(cache)}, code=CUDA_CHILD, args=())
    assert c["cache_hits"] == 0, err
    assert all(_C._disk_cache_load("cuda", k) != b"not a cubin" for k in keys)
