"""Process-wide settings. Read from the environment at import; assign to change them later.

compile() and explain() read these values when they are called, so a change applies to code
compiled after it.
"""

import os


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


# Cache entries (guard sets) per code object; past this the code runs eagerly with a warning.
cache_size_limit: int = 8
# TORCHLITE_TRACE=1: dump graphs, guards, lowered IR, kernels and timings to debug_dir.
trace: bool = _flag("TORCHLITE_TRACE")
debug_dir: str = os.environ.get("TORCHLITE_DEBUG_DIR") or "./torchlite_debug"
# TORCHLITE_LOGS=graph_breaks,recompiles,guards,kernels: channels sent to the "torchlite" logger.
logs: str = os.environ.get("TORCHLITE_LOGS", "")
# On-disk kernel cache (read by the C++ runtime).
cache_dir: str = os.environ.get("TORCHLITE_CACHE_DIR") or os.path.join(
    os.path.expanduser("~"), ".cache", "torchlite"
)
# TORCHLITE_DISABLE=1: torchlite.compile returns its input unchanged.
disable: bool = _flag("TORCHLITE_DISABLE")
