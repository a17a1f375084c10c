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
    assert sorted(tried) == [33, 66, 132, 264, 528, 1056]
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
