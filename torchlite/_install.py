"""Hands the Python side of torchlite's process-wide hooks to the C++ core.

NOTE: done on every compile()/explain() instead of at import, so `import torchlite` stays
cheap and later changes to torchlite.config (trace, debug_dir, logs, cache_dir) take effect.
"""

import logging
import sys

from torchlite import _C, config, fx_interop, settings

logger = logging.getLogger("torchlite")
_handler: logging.Handler | None = None


def log_sink(channel: str, message: str) -> None:
    """Receives the C++ log events (TORCHLITE_LOGS channels)."""
    logger.info("[%s] %s", channel, message, extra={"channel": channel})


def _show_logs() -> None:
    # NOTE: like TORCH_LOGS, asking for a channel prints it even when the program never
    # configured logging; a handler the user attached takes precedence.
    global _handler
    if _handler is not None or logger.handlers:
        return
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("torchlite: %(message)s"))
    logger.addHandler(_handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


def _register_python_helpers() -> None:
    """Hands the C++ passes and capture the Python functions they call (core/python_helpers.h).

    NOTE: the C++ core never imports torchlite modules by name: the package registers what it
    needs here, at import, the way it registers the backend bridge.
    """
    from torchlite import (
        _asserts,
        _attention_mask,
        _backend_layout,
        _custom_function,
        _ddp_buckets,
        _epilogue_trials,
        _fresh_modules,
        _index_bounds,
        _optimizer,
        _padded_weights,
        _polyfills,
        _rerun_state,
        _scalars,
        _training,
    )

    helpers = {
        "attention_mask.shared_additive_mask": _attention_mask.shared_additive_mask,
        "attention_mask.runs_math": _attention_mask.runs_math,
        "padded_weights.linear_into_padded_rows": _padded_weights.linear_into_padded_rows,
        "padded_weights.padded_rows": _padded_weights.padded_rows,
        "backend_layout.eager_layout": _backend_layout.eager_layout,
        "ddp_buckets.split_at_buckets": _ddp_buckets.split_at_buckets,
        "index_bounds.check": _index_bounds.check_index_bounds,
        "asserts.check": _asserts.check_assertion,
        "custom_function.apply": _custom_function.apply_custom_function,
        "custom_function.state_reads": _custom_function.state_reads,
        "rerun_state.save": _rerun_state.save,
        "rerun_state.restore": _rerun_state.restore,
        "training.trace_joint": _training.trace_joint,
        "training.make_training_function": _training.make_training_function,
        "optimizer.step_route": _optimizer.step_route,
        "optimizer.step_callable": _optimizer.step_callable,
        "fresh_modules.clone": _fresh_modules.clone_fresh_module,
        "scalars.item": _scalars.item,
        "polyfills.associative_scan": _polyfills.associative_scan,
        "polyfills.reduce": _polyfills.reduce,
        "polyfills.count_elements": _polyfills.count_elements,
        "polyfills.nlargest": _polyfills.nlargest,
        "polyfills.nsmallest": _polyfills.nsmallest,
        "epilogue_trials.calls": _epilogue_trials.calls,
        "epilogue_trials.fake_timer": _epilogue_trials.fake_timer,
    }
    for name, fn in helpers.items():
        _C.register_python_helper(name, fn)


_register_python_helpers()


def sync() -> None:
    """Applies torchlite.config to the C++ core."""
    _C.set_log_sink(log_sink)
    _C.set_log_channels(config.logs)
    if config.logs:
        _show_logs()
    settings.apply_process_settings()
    _C.set_backend_bridge(fx_interop.backend_bridge)
