"""One rank of a launch.run_cases launch: joins the gloo group, runs the cases, writes JSON.

A case that raises is recorded with its traceback; the ranks then meet at a barrier with a
timeout so one failing rank cannot leave the other waiting forever in a collective.
"""

import datetime
import json
import os
import pathlib
import sys
import time
import traceback

import torch
import torch.distributed as dist


def main() -> None:
    spec, tmp, backend = sys.argv[1], sys.argv[2], sys.argv[3]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend,
        init_method=f"file://{tmp}/store",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    import cases

    import torchlite

    results = {}
    out = pathlib.Path(tmp, f"result{rank}.json")
    for case in json.loads(pathlib.Path(spec).read_text()):
        torchlite.reset()
        torch.manual_seed(0)
        start = time.perf_counter()
        try:
            value = getattr(cases, case["fn"])(**case.get("kwargs", {}))
            results[case["name"]] = {"ok": True, "value": value}
        except Exception:  # noqa: BLE001 (recorded: the test shows it)
            results[case["name"]] = {"ok": False, "error": traceback.format_exc()}
        results[case["name"]]["seconds"] = time.perf_counter() - start
        out.write_text(json.dumps(results, default=repr))
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
