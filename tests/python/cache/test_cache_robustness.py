"""Issue 26 items 4-6: a bad cache entry costs one recompile, never a failure or a hang; the
cache has a size cap with least-recently-used eviction and a command to inspect and clear it."""

import os
import subprocess
import sys
import time

import pytest
from conftest import ROOT, entries, needs_cpu_kernels, run_child

import torchlite
from torchlite import _C, settings

pytestmark = needs_cpu_kernels


@pytest.fixture
def use_cache(monkeypatch):
    """Points this process's disk cache at a folder (for _C._disk_cache_* calls)."""

    def use(folder):
        monkeypatch.setattr(torchlite.config, "cache_dir", str(folder))
        settings.apply_process_settings()

    yield use
    monkeypatch.undo()
    settings.apply_process_settings()


def test_entry_that_does_not_link_is_discarded_and_recompiled(tmp_path, use_cache):
    a, b = tmp_path / "a", tmp_path / "b"
    run_child({"TORCHLITE_CACHE_DIR": str(a)}, args=(2.0, 64))
    run_child({"TORCHLITE_CACHE_DIR": str(b)}, args=(3.0, 64))
    (entry_a,), (entry_b,) = entries(a), entries(b)
    key_a, key_b = entry_a.stem, entry_b.stem
    assert key_a != key_b
    # A valid, authenticated entry whose object lacks the symbol key_a's kernel needs
    # (e.g. written by an older torchlite): it must not kill this or any later process.
    use_cache(b)
    other_object = _C._disk_cache_load("cpu", key_b)
    use_cache(a)
    _C._disk_cache_store("cpu", key_a, other_object)
    assert _C._disk_cache_load("cpu", key_a) == other_object
    c, err = run_child({"TORCHLITE_CACHE_DIR": str(a)}, args=(2.0, 64))
    assert "failed to link" not in err
    assert c["cache_hits"] == 0
    assert _C._disk_cache_load("cpu", key_a) != other_object  # replaced by the right object
    c, _ = run_child({"TORCHLITE_CACHE_DIR": str(a)}, args=(2.0, 64))
    assert c["cache_hits"] == c["kernels"] > 0


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
def test_odd_file_at_an_entry_path_costs_one_recompile(tmp_path, plant):
    cache = tmp_path / "cache"
    run_child({"TORCHLITE_CACHE_DIR": str(cache)})
    (entry,) = entries(cache)
    entry.unlink()
    plant(entry)
    start = time.monotonic()
    # NOTE: a FIFO used to block open() forever; the timeout turns a hang into a failure.
    c, err = run_child({"TORCHLITE_CACHE_DIR": str(cache)}, timeout=90)
    assert c["cache_hits"] == 0 and c["kernels"] > 0, err
    assert time.monotonic() - start < 90


def test_size_cap_evicts_least_recently_used_entries(tmp_path, use_cache):
    cache = tmp_path / "cache"
    use_cache(cache)
    old = time.time() - 3600
    filler = [f"{i:064x}" for i in range(12)]
    for i, key in enumerate(filler):
        _C._disk_cache_store("cpu", key, os.urandom(100_000))
        path = _C._disk_cache_path("cpu", key)
        os.utime(path, (old + i, old + i))  # filler[0] least recently used
    recent = filler[-1]
    os.utime(_C._disk_cache_path("cpu", recent), None)
    assert _C.disk_cache_info(str(cache))["bytes"] > 1 << 20
    run_child({"TORCHLITE_CACHE_DIR": str(cache), "TORCHLITE_CACHE_MAX_MB": "1"})
    left = {p.stem for p in entries(cache)}
    assert _C.disk_cache_info(str(cache))["bytes"] <= 1 << 20
    assert filler[0] not in left and recent in left
    assert left - set(filler), "the new kernel's entry was stored"


def _cli(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHLITE_")}
    env["PYTHONPATH"] = str(ROOT)
    cmd = [sys.executable, "-m", "torchlite.cache", *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)


def test_cache_command_shows_and_clears_the_cache(tmp_path):
    cache = tmp_path / "cache"
    c, _ = run_child({"TORCHLITE_CACHE_DIR": str(cache)})
    r = _cli("info", "--dir", str(cache))
    assert r.returncode == 0, r.stderr
    assert f"cache folder: {cache}" in r.stdout
    assert f"entries: {c['kernels']} CPU objects, 0 CUDA images" in r.stdout
    r = _cli("clear", "--dir", str(cache))
    assert r.returncode == 0 and f"removed {c['kernels']} file(s)" in r.stdout
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
    info = torchlite.cache.info()
    assert info["dir"] == str(cache) and info["cuda_entries"] == 1 and info["problem"] == ""
    assert torchlite.cache.clear() == 1
