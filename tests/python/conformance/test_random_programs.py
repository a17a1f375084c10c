"""Random programs (program_gen.py) compiled and compared with eager: values, exceptions, side
effects, guards. CI runs seeds 0..1999 (about a minute of CPU on a 2-core machine); the long
run, outside CI, takes TORCHLITE_FUZZ_SEEDS=N more seeds from TORCHLITE_FUZZ_FIRST (default
2000), e.g. `TORCHLITE_FUZZ_SEEDS=100000 pytest -m slow tests/python/conformance`.

A failure prints the seed and the program; `python tests/python/conformance/program_gen.py SEED
--run` replays it alone.
"""

import os

import pytest
from program_gen import check_seed

import torchlite

CI_SEEDS = 2000
CI_BLOCK = 500
# NOTE: compiled entries of thousands of programs would pile up in memory; a reset every 100
# programs keeps the process flat without changing what is checked (each program is new code).
RESET_EVERY = 100


def _run(first: int, count: int):
    failures = []
    for seed in range(first, first + count):
        if seed % RESET_EVERY == 0:
            torchlite.reset()
        try:
            check_seed(seed)
        except AssertionError as e:
            failures.append(str(e))
            if len(failures) >= 3:
                break
    assert not failures, f"{len(failures)} mismatching program(s):\n\n" + "\n\n".join(failures)


# NOTE: a generated helper called with many constant arguments hits cache_size_limit by design.
@pytest.mark.filterwarnings("ignore:.*cache_size_limit")
@pytest.mark.parametrize("first", range(0, CI_SEEDS, CI_BLOCK))
def test_random_programs_match_eager(first):
    _run(first, CI_BLOCK)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*cache_size_limit")
@pytest.mark.skipif(
    not os.environ.get("TORCHLITE_FUZZ_SEEDS"), reason="long run: set TORCHLITE_FUZZ_SEEDS=N"
)
def test_random_programs_long_run_match_eager():
    first = int(os.environ.get("TORCHLITE_FUZZ_FIRST", str(CI_SEEDS)))
    _run(first, int(os.environ["TORCHLITE_FUZZ_SEEDS"]))
