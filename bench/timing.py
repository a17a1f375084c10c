"""The one GPU timer the benchmarks share."""

import torch


def cuda_ms(fn, args, iters=10):
    """Mean ms of `iters` back-to-back calls of `fn(*args)`, timed by CUDA events around them
    (the device's time for the calls, not the host's: the host runs ahead until the end
    event is waited for)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn(*args)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters
