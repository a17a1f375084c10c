"""mode="max-autotune" grid choices (runtime/cuda_autotune.h) on the CPU, with a fake timer in
place of CUDA events: which grids are tried (reductions never more blocks than their default),
the faster one kept only past the 3% margin, and the choice read back from the disk cache
without timing, also by another process."""

import os

import pytest
from helpers import run_python

from torchlite import _C


@pytest.fixture
def cache(use_cache, tmp_path):
    use_cache(tmp_path / "cache")
    return tmp_path / "cache"


def _timer(times, tried):
    def time_us(grid):
        tried.append(grid)
        return times.get(grid, 100.0)

    return time_us


def test_the_fastest_grid_is_kept_and_cached(cache):
    tried = []
    grid, cached, report = _C._autotune_choose_grid(
        "kernel-a", "gpu", 264, 100000, _timer({528: 80.0, 1056: 90.0}, tried)
    )
    assert (grid, cached) == (528, False)
    # the default first and again after every grid; the winner then timed twice more beside it
    assert sorted(tried[:7]) == [33, 66, 132, 264, 264, 528, 1056]
    assert tried[0] == tried[6] == 264 and tried[7:] == [528, 264, 528, 264]
    assert "-> grid 528" in report
    again = []
    grid, cached, report = _C._autotune_choose_grid(
        "kernel-a", "gpu", 264, 100000, _timer({}, again)
    )
    assert (grid, cached, again) == (528, True, [])
    assert "disk cache" in report


def test_a_reduction_tries_only_fewer_blocks_and_needs_a_clear_gain(cache):
    tried = []
    grid, _, _ = _C._autotune_choose_grid(
        "reduction-b", "gpu", 4096, 4096, _timer({512: 98.0, 2048: 99.0}, tried)
    )
    assert max(tried) == 4096 and sorted(set(tried)) == [512, 1024, 2048, 4096]
    assert grid == 4096  # 2% faster is within the noise margin: the default stays


def test_the_key_gpu_and_default_grid_all_separate_choices(cache):
    _C._autotune_choose_grid("kernel-c", "gpu-1", 264, 10000, _timer({132: 10.0}, []))
    for key, gpu, default in (
        ("kernel-d", "gpu-1", 264),
        ("kernel-c", "gpu-2", 264),
        ("kernel-c", "gpu-1", 528),
    ):
        tried = []
        _C._autotune_choose_grid(key, gpu, default, 10000, _timer({}, tried))
        assert tried, (key, gpu, default)


def test_another_process_reads_the_choice_without_timing(cache):
    _C._autotune_choose_grid("kernel-e", "gpu", 264, 10000, _timer({66: 10.0}, []))
    script = (
        "from torchlite import _C\n"
        "def never(grid): raise AssertionError('timed again')\n"
        "print(_C._autotune_choose_grid('kernel-e', 'gpu', 264, 10000, never)[:2])\n"
    )
    env = dict(os.environ, TORCHLITE_CACHE_DIR=str(cache))
    out = run_python(script, env)
    assert out.strip().splitlines()[-1] == "(66, True)"


# Pointwise kernels are built at several block sizes under max-autotune: each build's grids
# are timed and the fastest (build, grid) pair kept, cached like the grid alone.
BUILDS = [("block 256", 264, 4000), ("block 128", 528, 8000), ("block 512", 132, 2000)]


def _launch_timer(times, tried):
    def time_us(variant, grid):
        tried.append((variant, grid))
        return times.get((variant, grid), 100.0)

    return time_us


def test_every_build_is_timed_and_the_fastest_launch_cached(cache):
    tried = []
    variant, grid, cached, report = _C._autotune_choose_launch(
        "pw-a", "gpu", BUILDS, _launch_timer({(1, 1056): 70.0, (2, 132): 80.0}, tried)
    )
    assert (variant, grid, cached) == (1, 1056, False)
    assert {v for v, _ in tried} == {0, 1, 2}
    assert tried[0] == (0, 264)  # the default first: the others are measured against it
    assert sorted(g for v, g in tried if v == 2) == [16, 33, 66, 132, 264, 528]
    assert "-> block 128 grid 1056" in report
    again = []
    out = _C._autotune_choose_launch("pw-a", "gpu", BUILDS, _launch_timer({}, again))
    assert out[:3] == (1, 1056, True) and again == []
    assert "block 128 grid 1056 (disk cache)" in out[3]


def test_another_build_needs_a_clear_gain_too(cache):
    variant, grid, _, _ = _C._autotune_choose_launch(
        "pw-b", "gpu", BUILDS, _launch_timer({(2, 264): 98.0}, [])
    )
    assert (variant, grid) == (0, 264)


def test_other_builds_or_gpus_are_separate_choices(cache):
    _C._autotune_choose_launch("pw-c", "gpu", BUILDS, _launch_timer({(1, 528): 10.0}, []))
    for gpu, builds in (("gpu-2", BUILDS), ("gpu", BUILDS[:2]), ("gpu", [BUILDS[0]])):
        tried = []
        _C._autotune_choose_launch("pw-c", gpu, builds, _launch_timer({}, tried))
        assert tried, (gpu, builds)


def test_one_build_is_the_grid_choice(cache):
    # NOTE: reductions have one build: their choice is the grid-only one, cached alike
    _C._autotune_choose_grid("red-d", "gpu", 4096, 4096, _timer({1024: 10.0}, []))
    out = _C._autotune_choose_launch("red-d", "gpu", [("", 4096, 4096)], _launch_timer({}, []))
    assert out[:3] == (0, 1024, True)


def test_another_process_reads_the_launch_without_timing(cache):
    _C._autotune_choose_launch("pw-e", "gpu", BUILDS, _launch_timer({(2, 66): 10.0}, []))
    script = (
        "from torchlite import _C\n"
        "def never(variant, grid): raise AssertionError('timed again')\n"
        f"print(_C._autotune_choose_launch('pw-e', 'gpu', {BUILDS!r}, never)[:3])\n"
    )
    env = dict(os.environ, TORCHLITE_CACHE_DIR=str(cache))
    out = run_python(script, env)
    assert out.strip().splitlines()[-1] == "(2, 66, True)"


def test_a_default_timed_faster_at_the_end_is_kept(cache):
    # NOTE: a GPU clocking up during the trials: every timing faster than the one before. The
    # last candidates beat the default's first time by more than the margin, not its second.
    calls = []

    def drifting(variant, grid):
        calls.append((variant, grid))
        return 100.0 - 1.5 * len(calls)

    variant, grid, _, report = _C._autotune_choose_launch("pw-f", "gpu", BUILDS, drifting)
    assert (variant, grid) == (0, 264), report
    assert calls[0] == calls[-1] == (0, 264) and len(calls) == 19
    assert "block 256 grid 264 again:" in report


def test_a_launch_bound_kernel_keeps_its_default_untried(cache):
    # A default launch under 5 us is mostly launch gap in a replay: no other grid or build is
    # tried, however much faster the trials alone would look, and the choice is cached.
    tried = []
    variant, grid, cached, report = _C._autotune_choose_launch(
        "pw-short", "gpu", BUILDS, _launch_timer({(0, 264): 3.0, (1, 1056): 1.0}, tried)
    )
    assert (variant, grid, cached) == (0, 264, False)
    assert tried == [(0, 264)]
    assert "kept -> block 256 grid 264" in report
    out = _C._autotune_choose_launch("pw-short", "gpu", BUILDS, _launch_timer({}, []))
    assert out[:3] == (0, 264, True)
    tried = []
    grid, _, _ = _C._autotune_choose_grid("short", "gpu", 264, 10000, _timer({264: 4.0}, tried))
    assert (grid, tried) == (264, [264])


# A warp-row reduction built at its own 256 threads a block and at 128 and 512 (rows a block),
# with its scalar entry beside the vector one: each build tries only fewer blocks than its own
# grid (one a row group), and the scalar entry is a launch like any other.
REDUCTION = [
    ("block 256", 1024, 1024),
    ("block 128", 2048, 2048),
    ("block 512", 512, 512),
    ("block 256 scalar", 1024, 1024),
]


def test_reduction_builds_try_only_fewer_blocks_and_the_fastest_is_cached(cache):
    tried = []
    variant, grid, cached, report = _C._autotune_choose_launch(
        "red-builds", "gpu", REDUCTION, _launch_timer({(1, 1024): 60.0, (3, 512): 70.0}, tried)
    )
    assert (variant, grid, cached) == (1, 1024, False)
    for v, (_, own, _) in enumerate(REDUCTION):
        assert sorted({g for w, g in tried if w == v}) == [own // 8, own // 4, own // 2, own]
    assert "-> block 128 grid 1024" in report
    script = (
        "from torchlite import _C\n"
        "def never(variant, grid): raise AssertionError('timed again')\n"
        f"print(_C._autotune_choose_launch('red-builds', 'gpu', {REDUCTION!r}, never)[:3])\n"
    )
    env = dict(os.environ, TORCHLITE_CACHE_DIR=str(cache))
    assert run_python(script, env).strip().splitlines()[-1] == "(1, 1024, True)"


def test_the_scalar_entry_is_kept_when_it_is_clearly_faster(cache):
    variant, grid, _, report = _C._autotune_choose_launch(
        "red-scalar", "gpu", REDUCTION, _launch_timer({(3, 1024): 50.0}, [])
    )
    assert (variant, grid) == (3, 1024) and "-> block 256 scalar grid 1024" in report


@pytest.mark.parametrize("others", [100.0, 100.5, 140.0])
def test_no_launch_slower_than_or_as_fast_as_the_default_replaces_it(cache, others):
    # "never slower than default": the default is timed in the same trial, and a tie (or a
    # gain inside the 3% margin) keeps it.
    def time_us(variant, grid):
        return 100.0 if (variant, grid) == (0, 1024) else others

    variant, grid, _, _ = _C._autotune_choose_launch(f"red-tie-{others}", "gpu", REDUCTION, time_us)
    assert (variant, grid) == (0, 1024)


def test_a_launch_fast_only_once_does_not_replace_the_default(cache):
    # The fastest of many noisy trials is biased low: the winner is timed twice more beside the
    # default, alternately, and kept only if the medians still differ by the margin.
    tried = []

    def time_us(variant, grid):
        tried.append((variant, grid))
        if (variant, grid) == (1, 1056):
            return 60.0 if tried.count((1, 1056)) == 1 else 100.0
        return 100.0

    variant, grid, _, report = _C._autotune_choose_launch("pw-once", "gpu", BUILDS, time_us)
    assert (variant, grid) == (0, 264), report
    assert tried[-4:] == [(1, 1056), (0, 264), (1, 1056), (0, 264)]
    assert "not confirmed; -> block 256 grid 264" in report
    # the default is what the disk cache holds
    out = _C._autotune_choose_launch("pw-once", "gpu", BUILDS, _launch_timer({}, []))
    assert out[:3] == (0, 264, True)
