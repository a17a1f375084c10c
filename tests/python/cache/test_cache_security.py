"""Issue 26 items 1-3: nobody else can plant code in the kernel cache or redirect trace dumps.

Two-user tests play the attacker as `nobody` (needs root); the others simulate a hostile folder
by its mode, so they run everywhere."""

import os
import stat
import tempfile
from pathlib import Path

import pytest
from conftest import as_attacker, entries, needs_cpu_kernels, needs_two_users, run_child

pytestmark = needs_cpu_kernels


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


@pytest.fixture
def shared_tmp():
    """A folder under the system temp that another user can traverse (mode 0755)."""
    base = Path(tempfile.mkdtemp(prefix="tl-two-users-"))
    base.chmod(0o755)
    yield base
    import shutil

    shutil.rmtree(base, ignore_errors=True)


@needs_two_users
def test_cache_folder_created_by_another_user_is_not_used(shared_tmp):
    sticky = shared_tmp / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # a /tmp-like folder: anyone may create, nobody may replace
    cache = sticky / "cache"
    # The attacker creates the victim's cache folder first and plants an entry in it.
    as_attacker(
        f"mkdir -m 777 {cache} {cache}/cpu && head -c 4096 /dev/urandom > {cache}/secret && "
        f"printf 'planted' > {cache}/cpu/{'a' * 64}.o"
    )
    c, err = run_child({"TORCHLITE_CACHE_DIR": str(cache)})
    assert "not using the kernel cache" in err and "owned by another user" in err
    assert c["cache_hits"] == 0
    # The victim wrote nothing into the attacker's folder.
    assert all(p.stat().st_uid != os.geteuid() for p in cache.rglob("*"))


def test_cache_folder_writable_by_others_is_not_used(tmp_path):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    for _ in range(2):
        c, err = run_child({"TORCHLITE_CACHE_DIR": str(cache)})
        assert "not using the kernel cache" in err and "writable by group or others" in err
        assert c["cache_hits"] == 0
    assert list(cache.iterdir()) == []


def test_parent_folder_writable_by_others_makes_the_cache_unused(tmp_path):
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)  # whoever can write here can rename the cache folder and put theirs
    _, err = run_child({"TORCHLITE_CACHE_DIR": str(parent / "cache")})
    assert "not using the kernel cache" in err and str(parent) in err


def test_entry_without_this_users_mac_is_never_loaded(tmp_path):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    run_child({"TORCHLITE_CACHE_DIR": str(mine)})
    run_child({"TORCHLITE_CACHE_DIR": str(theirs)})  # the same kernel under another secret
    (entry,) = entries(mine)
    (foreign,) = entries(theirs)
    assert entry.name == foreign.name  # the key is public: derived from the kernel alone
    planted = foreign.read_bytes()
    entry.write_bytes(planted)
    c, _ = run_child({"TORCHLITE_CACHE_DIR": str(mine)})
    assert c["cache_hits"] == 0  # refused, compiled again...
    assert entry.read_bytes() != planted  # ...and the entry rewritten under this user's secret
    c, _ = run_child({"TORCHLITE_CACHE_DIR": str(mine)})
    assert c["cache_hits"] == c["kernels"] > 0


def test_cache_and_dump_folders_are_private_under_umask_000(tmp_path):
    cache, dbg = tmp_path / "a" / "cache", tmp_path / "b" / "dbg"
    run_child(
        {
            "TORCHLITE_CACHE_DIR": str(cache),
            "TORCHLITE_TRACE": "1",
            "TORCHLITE_DEBUG_DIR": str(dbg),
        },
        umask=0,
    )
    made = [cache.parent, cache, *cache.rglob("*"), dbg.parent, dbg, *dbg.rglob("*")]
    assert any(p.suffix == ".ll" for p in made) and (cache / "secret").exists()
    for p in made:
        assert _mode(p) == (0o700 if p.is_dir() else 0o600), p


def test_trace_refuses_a_debug_dir_others_can_write(tmp_path):
    dbg = tmp_path / "dbg"
    dbg.mkdir()
    dbg.chmod(0o777)
    _, err = run_child({"TORCHLITE_TRACE": "1", "TORCHLITE_DEBUG_DIR": str(dbg)})
    assert "not writing trace output" in err
    assert list(dbg.iterdir()) == []


def _plant_old_dump_names(folder: Path, victim: Path):
    """Symlinks at every name the trace used to write to (predictable, shared folder)."""
    return (
        f"ln -s {victim} {folder}/0_f_line4 && ln -s {victim} {folder}/kernels && "
        f"ln -s {victim}/precious {folder}/pipeline.txt"
    )


def _check_dumps_went_to_a_fresh_folder(folder: Path, victim: Path):
    assert (victim / "precious").read_text() == "keep me"
    assert [p.name for p in victim.iterdir()] == ["precious"]
    (run,) = folder.glob("run-*")
    assert _mode(run) == 0o700 and run.stat().st_uid == os.geteuid()
    assert list(run.glob("*/pipeline.txt")) and list(run.glob("kernels/*.ll"))


@needs_two_users
def test_trace_never_writes_through_symlinks_another_user_planted(shared_tmp, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    sticky = shared_tmp / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    as_attacker(_plant_old_dump_names(sticky, victim))
    run_child({"TORCHLITE_TRACE": "1", "TORCHLITE_DEBUG_DIR": str(sticky)})
    _check_dumps_went_to_a_fresh_folder(sticky, victim)
    # A debug folder the attacker made is refused outright.
    theirs = sticky / "theirs"
    as_attacker(f"mkdir -m 777 {theirs} && " + _plant_old_dump_names(theirs, victim))
    _, err = run_child({"TORCHLITE_TRACE": "1", "TORCHLITE_DEBUG_DIR": str(theirs)})
    assert "not writing trace output" in err and "owned by another user" in err
    assert [p.name for p in victim.iterdir()] == ["precious"]


def test_trace_writes_into_a_fresh_folder_per_process(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    dbg = tmp_path / "dbg"
    dbg.mkdir(mode=0o700)
    for name in ("0_f_line4", "kernels"):
        (dbg / name).symlink_to(victim)
    run_child({"TORCHLITE_TRACE": "1", "TORCHLITE_DEBUG_DIR": str(dbg)})
    _check_dumps_went_to_a_fresh_folder(dbg, victim)
    run_child({"TORCHLITE_TRACE": "1", "TORCHLITE_DEBUG_DIR": str(dbg)})
    assert len(list(dbg.glob("run-*"))) == 2
