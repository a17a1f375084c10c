"""Runs the FSDP2 parity cases many times on one 2-process gloo launch, to catch faults that
show rarely (the eighteenth session's CI saw one rank die once with a corrupted heap).

    PYTHONPATH=. python tests/python/distributed/stress.py 12

With an address-sanitized build (README, TORCHLITE_SANITIZE) prefix the LD_PRELOAD/ASAN_OPTIONS
the README gives; the workers inherit them. Prints how many cases failed and the first errors.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from launch import run_cases


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    cases = [
        {
            "name": f"{r}-{what}-{backward}",
            "fn": "fsdp_parity",
            "kwargs": {"compile_what": what, "compiled_backward": backward},
        }
        for r in range(reps)
        for what in ["root", "blocks"]
        for backward in [False, True]
    ]
    results = run_cases(cases, timeout=60.0 * len(cases))
    bad = {k: v for k, v in results.items() if not all(r["ok"] for r in v)}
    print(f"failed {len(bad)} of {len(cases)}")
    for name, per_rank in list(bad.items())[:2]:
        for r in per_rank:
            if not r["ok"]:
                print(name, r["error"][-3000:])
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
