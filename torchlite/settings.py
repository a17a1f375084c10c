"""Resolving the settings of one compile: torchlite.config, then the mode's preset, then options.

The table itself (names, types, defaults, environment variables, docs) is C++'s
(csrc/core/flags.cpp); this module only layers the per-call values over torchlite.config.
"""

from typing import Any

from torchlite import _C, config

# mode -> settings it changes (as torch.compile's modes; shown in the trace's pipeline.txt).
PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "reduce-overhead": {"cuda_graphs": True},
    "max-autotune": {"cuda_graphs": True, "autotune": True},
    "max-autotune-no-cudagraphs": {"autotune": True},
}


def table() -> list[dict]:
    """The settings table: name, type, scope, env, default, default_text, doc."""
    return _C.settings_table()


def _specs() -> dict[str, dict]:
    return {s["name"]: s for s in _C.settings_table()}


def from_config() -> dict[str, Any]:
    """Every setting as torchlite.config holds it now."""
    return {name: getattr(config, name) for name in _specs()}


def resolve(mode: str | None, options: dict | None, api: str = "torchlite.compile") -> dict:
    """{name: value} for one compile: torchlite.config, the mode's preset, then options.

    Raises ValueError for an unknown mode or option (listing the known ones) and for a
    process-wide setting given as an option.
    """
    mode = mode or "default"
    if mode not in PRESETS:
        raise ValueError(f"{api}: unknown mode {mode!r}; valid modes: {', '.join(PRESETS)}")
    specs = _specs()
    values = from_config()
    values.update(PRESETS[mode])
    known = sorted(n for n, s in specs.items() if s["scope"] == "compile")
    for name, value in (options or {}).items():
        spec = specs.get(name)
        if spec is None:
            raise ValueError(f"{api}: unknown option {name!r}; known options: {', '.join(known)}")
        if spec["scope"] != "compile":
            raise ValueError(
                f"{api}: {name!r} is a process-wide setting; set torchlite.config.{name}"
                + (f" or {spec['env']}" if spec["env"] else "")
                + f" instead (options take: {', '.join(known)})"
            )
        values[name] = value
    return values


def apply_process_settings() -> None:
    """Hands torchlite.config to the C++ runtime (cache_dir, trace, pool size, ...)."""
    _C.set_process_settings(from_config())
