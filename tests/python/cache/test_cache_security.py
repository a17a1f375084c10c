"""Issue 26 items 1-3: nobody else can plant code in the kernel cache or redirect trace dumps.

Two-user tests play the attacker as `nobody` (needs root); the others simulate a hostile folder
by its mode, so they run everywhere. The victim is this process unless a fresh process is the
point of the test."""

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from conftest import (
    as_attacker,
    compile_once,
    entries,
    needs_cpu_kernels,
    needs_two_users,
    run_child,
)

import torchlite

pytestmark = needs_cpu_kernels


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


@pytest.fixture
def shared_tmp():
    """A root-owned sticky folder (like /tmp) another user can reach."""
    base = Path(tempfile.mkdtemp(prefix="tl-two-users-"))
    base.chmod(0o755)
    sticky = base / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    yield sticky
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def trace_into(monkeypatch):
    def trace(folder):
        monkeypatch.setattr(torchlite.config, "trace", True)
        monkeypatch.setattr(torchlite.config, "debug_dir", str(folder))

    return trace


@needs_two_users
def test_cache_folder_created_by_another_user_is_not_used(shared_tmp, use_cache):
    cache = shared_tmp / "cache"
    # The attacker creates the victim's cache folder first and plants an entry and a secret.
    as_attacker(
        f"mkdir -m 777 {cache} {cache}/cpu && head -c 32 /dev/urandom > {cache}/secret && "
        f"printf 'planted' > {cache}/cpu/{'a' * 64}.o"
    )
    use_cache(cache)
    with pytest.warns(RuntimeWarning, match="not using the kernel cache .*owned by another user"):
        c = compile_once()
    assert c["cache_hits"] == 0 and c["kernels"] > 0
    # The victim wrote nothing into the attacker's folder.
    assert all(p.stat().st_uid != os.geteuid() for p in cache.rglob("*"))


def test_cache_folder_writable_by_others_is_not_used(tmp_path, use_cache):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    use_cache(cache)
    with pytest.warns(RuntimeWarning, match="not using the kernel cache .*writable by group or"):
        compile_once()
    assert compile_once()["cache_hits"] == 0
    assert list(cache.iterdir()) == []


def test_parent_folder_writable_by_others_makes_the_cache_unused(tmp_path, use_cache):
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)  # whoever can write here can rename the cache folder and put theirs
    use_cache(parent / "cache")
    with pytest.warns(RuntimeWarning, match=f"not using the kernel cache .*{parent} is writable"):
        compile_once()


def test_entry_without_this_users_mac_is_never_loaded(tmp_path, use_cache):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    use_cache(theirs)
    compile_once()  # the same kernel under another secret (another user's cache)
    use_cache(mine)
    compile_once()
    (entry,) = entries(mine)
    (foreign,) = entries(theirs)
    assert entry.name == foreign.name  # the key is public: derived from the kernel alone
    planted = foreign.read_bytes()
    entry.write_bytes(planted)
    assert compile_once()["cache_hits"] == 0  # refused, compiled again...
    assert entry.read_bytes() != planted  # ...and rewritten under this user's secret
    c = compile_once()
    assert c["cache_hits"] == c["kernels"] > 0


def test_cache_and_dump_folders_are_private_under_umask_000(tmp_path, use_cache, trace_into):
    cache, dbg = tmp_path / "a" / "cache", tmp_path / "b" / "dbg"
    use_cache(cache)
    trace_into(dbg)
    old = os.umask(0)
    try:
        compile_once()
    finally:
        os.umask(old)
    made = [cache.parent, cache, *cache.rglob("*"), dbg.parent, dbg, *dbg.rglob("*")]
    assert any(p.suffix == ".ll" for p in made) and (cache / "secret").exists()
    for p in made:
        assert _mode(p) == (0o700 if p.is_dir() else 0o600), p


def test_trace_refuses_a_debug_dir_others_can_write(tmp_path, trace_into):
    dbg = tmp_path / "dbg"
    dbg.mkdir()
    dbg.chmod(0o777)
    trace_into(dbg)
    with pytest.warns(RuntimeWarning, match="not writing trace output"):
        compile_once()
    assert list(dbg.iterdir()) == []


def _plant_old_dump_names(folder: Path, victim: Path):
    """Symlinks at the names the trace used to write to (predictable, in a shared folder)."""
    return (
        f"ln -s {victim} {folder}/0_f_line1 && ln -s {victim} {folder}/kernels && "
        f"ln -s {victim}/precious {folder}/pipeline.txt"
    )


def _check_dumps_went_to_a_fresh_folder(folder: Path, victim: Path):
    assert (victim / "precious").read_text() == "keep me"
    assert [p.name for p in victim.iterdir()] == ["precious"]
    (run,) = folder.glob("run-*")
    assert _mode(run) == 0o700 and run.stat().st_uid == os.geteuid()
    assert list(run.glob("*/pipeline.txt")) and list(run.glob("kernels/*.ll"))


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim"
    v.mkdir()
    (v / "precious").write_text("keep me")
    return v


@needs_two_users
def test_trace_never_writes_through_symlinks_another_user_planted(shared_tmp, victim, trace_into):
    as_attacker(_plant_old_dump_names(shared_tmp, victim))
    trace_into(shared_tmp)
    compile_once()
    _check_dumps_went_to_a_fresh_folder(shared_tmp, victim)
    # A debug folder the attacker made is refused outright.
    theirs = shared_tmp / "theirs"
    as_attacker(f"mkdir -m 777 {theirs} && " + _plant_old_dump_names(theirs, victim))
    trace_into(theirs)
    with pytest.warns(RuntimeWarning, match="not writing trace output.*owned by another user"):
        compile_once()
    assert [p.name for p in victim.iterdir()] == ["precious"]


def test_trace_writes_into_a_fresh_folder_per_process(tmp_path, victim):
    dbg = tmp_path / "dbg"
    dbg.mkdir(mode=0o700)
    for name in ("0_f_line1", "kernels"):
        (dbg / name).symlink_to(victim)
    env = {"TORCHLITE_TRACE": "1", "TORCHLITE_DEBUG_DIR": str(dbg)}
    run_child(env)
    _check_dumps_went_to_a_fresh_folder(dbg, victim)
    run_child(env)
    assert len(list(dbg.glob("run-*"))) == 2
