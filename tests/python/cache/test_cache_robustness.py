"""Issue 26 items 4-6: a bad cache entry costs one recompile, never a failure or a hang; the
cache has a size cap with least-recently-used eviction and a command to inspect and clear it."""

import os
import subprocess
import sys
import time

import pytest
from conftest import ROOT, compile_once, entries, needs_cpu_kernels, run_child

import torchlite
from torchlite import _C

pytestmark = needs_cpu_kernels


def test_entry_that_does_not_link_is_discarded_and_recompiled(tmp_path, use_cache):
    a, b = tmp_path / "a", tmp_path / "b"
    use_cache(b)
    compile_once(3.0)
    (entry_b,) = entries(b)
    other_object = _C._disk_cache_load("cpu", entry_b.stem)
    use_cache(a)
    compile_once(2.0)
    (entry_a,) = entries(a)
    key_a = entry_a.stem
    # A valid, authenticated entry whose object lacks the symbol key_a's kernel needs (as one
    # written by an older torchlite could): it must not fail this or any later process.
    _C._disk_cache_store("cpu", key_a, other_object)
    assert _C._disk_cache_load("cpu", key_a) == other_object
    assert compile_once(2.0)["cache_hits"] == 0
    assert _C._disk_cache_load("cpu", key_a) != other_object  # replaced by the right object
    c, err = run_child({"TORCHLITE_CACHE_DIR": str(a)}, args=(2.0, 64))
    assert c["cache_hits"] == c["kernels"] > 0, err


def _make_fifo(p):
    os.mkfifo(p, 0o600)


def _make_folder(p):
    p.mkdir()
    (p / "inner").write_text("x")


def _make_huge(p):
    with open(p, "wb") as f:
        f.truncate(1 << 30)  # sparse: 1 GB that costs no disk
    p.chmod(0o600)


@pytest.mark.parametrize(
    "plant", [_make_fifo, _make_folder, _make_huge], ids=["fifo", "folder", "1GB"]
)
def test_odd_file_at_an_entry_path_costs_one_recompile(tmp_path, use_cache, plant):
    cache = tmp_path / "cache"
    use_cache(cache)
    compile_once()
    (entry,) = entries(cache)
    entry.unlink()
    plant(entry)
    start = time.monotonic()
    c = compile_once()  # NOTE: a FIFO used to block open() forever
    assert c["cache_hits"] == 0 and c["kernels"] > 0
    assert time.monotonic() - start < 60


def test_size_cap_evicts_least_recently_used_entries(tmp_path, use_cache):
    cache = tmp_path / "cache"
    use_cache(cache, max_mb=1)
    old = time.time() - 3600
    filler = [f"{i:064x}" for i in range(10)]
    for i, key in enumerate(filler):  # 10 x 100 KB: just under the cap
        _C._disk_cache_store("cpu", key, os.urandom(100_000))
        os.utime(_C._disk_cache_path("cpu", key), (old + i, old + i))  # filler[0]: LRU
    assert _C._disk_cache_load("cpu", filler[1]) is not None  # a hit makes it recent
    assert {p.stem for p in entries(cache)} == set(filler)
    _C._disk_cache_store("cpu", "f" * 64, os.urandom(100_000))  # past the cap
    compile_once()
    left = {p.stem for p in entries(cache)}
    assert _C.disk_cache_info(str(cache))["bytes"] <= 1 << 20
    assert filler[0] not in left and filler[1] in left and "f" * 64 in left
    assert left - set(filler) - {"f" * 64}, "the new kernel's entry was stored"


def _cli(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHLITE_")}
    env["PYTHONPATH"] = str(ROOT)
    cmd = [sys.executable, "-m", "torchlite.cache", *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)


def test_cache_command_shows_and_clears_the_cache(tmp_path, use_cache):
    cache = tmp_path / "cache"
    use_cache(cache)
    kernels = compile_once()["kernels"]
    r = _cli("info", "--dir", str(cache))
    assert r.returncode == 0, r.stderr
    assert f"cache folder: {cache}" in r.stdout
    assert f"entries: {kernels} CPU objects, 0 CUDA images" in r.stdout
    r = _cli("clear", "--dir", str(cache))
    assert r.returncode == 0 and f"removed {kernels} file(s)" in r.stdout
    assert entries(cache) == [] and (cache / "secret").exists()
    assert "entries: 0 CPU objects" in _cli("info", "--dir", str(cache)).stdout


def test_cache_command_refuses_an_untrusted_folder(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "keep").write_text("x")
    r = _cli("info", "--dir", str(shared))
    assert r.returncode == 1 and "writable by group or others" in r.stdout
    r = _cli("clear", "--dir", str(shared))
    assert r.returncode == 1 and "not clearing" in r.stderr
    assert (shared / "keep").exists()


def test_cache_functions_use_the_configured_folder(tmp_path, use_cache):
    cache = tmp_path / "cache"
    use_cache(cache)
    _C._disk_cache_store("cuda", "ab" * 32, b"image")
    assert _C._disk_cache_load("cuda", "ab" * 32) == b"image"
    info = torchlite.cache.info()
    assert info["dir"] == str(cache) and info["cuda_entries"] == 1 and info["problem"] == ""
    assert torchlite.cache.clear() == 1
    assert _C._disk_cache_load("cuda", "ab" * 32) is None
