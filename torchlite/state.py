"""Process-wide state of the C++ core: its caches and its event counters."""

from torchlite import _C


def reset() -> None:
    """Forgets every compiled entry (all code objects), so the next calls capture again."""
    _C.reset()


def counters() -> dict[str, int]:
    """A snapshot: frames, graphs, graph_breaks, recompiles, cache_hits, kernels,
    eager_fallbacks, capture_ns, ... size_instances (graphs a size-generic entry compiled for
    new sizes without capturing again), nvrtc_compiles (CUDA programs NVRTC compiled: not
    read from the disk cache, not shared with a loaded module), launches_grouped (kernel
    launches horizontal fusion saved at compile: n - 1 per group of n kernels launched as one),
    kernel_launches (launches of generated kernels; a group launch counts once)."""
    return dict(_C.counters())


def reset_counters() -> None:
    _C.reset_counters()
