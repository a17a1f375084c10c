"""The OpInfo parity suite (tests/python/passes/test_opinfo_parity.py) on CUDA: every lowered
op, CUDA sample inputs in float32/float16/bfloat16/int64/bool, compiled under no_grad equals
eager within the OpInfo's CUDA tolerances."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "passes"))

import opinfo_parity as parity
from torch.testing._internal.common_device_type import (
    precisionOverride,
    toleranceOverride,
)

pytestmark = pytest.mark.cuda

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool)
OPS = [
    op for op in parity.lowered_opinfos() if any(d in op.supported_dtypes("cuda") for d in DTYPES)
]
_RESULTS: dict[str, parity.Stats] = {}


def _cuda_overrides(op, dtype) -> tuple[float, float]:
    """As parity.override_tolerances, for decorators that apply on CUDA."""
    rtol = atol = 0.0
    for info in op.decorators:
        if getattr(info, "device_type", None) not in (None, "cuda"):
            continue
        if getattr(info, "dtypes", None) is not None and dtype not in info.dtypes:
            continue
        for dec in getattr(info, "decorators", [info]):
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                rtol, atol = max(rtol, dec.d[dtype].rtol), max(atol, dec.d[dtype].atol)
            elif isinstance(dec, precisionOverride) and dtype in dec.d:
                atol = max(atol, dec.d[dtype])
    return rtol, atol


def _run_op_cuda(op):
    stats, failures = parity.Stats(), []
    supported = op.supported_dtypes("cuda")
    for dtype in DTYPES:
        if dtype not in supported:
            continue
        samples = list(op.sample_inputs("cuda", dtype))
        stats.skipped += max(0, len(samples) - parity.MAX_SAMPLES)
        variants = (False, True) if op.name in parity.VIEW_OPS else (False,)
        for i, sample in enumerate(samples[: parity.MAX_SAMPLES]):
            for consumer in variants:
                outcome, msg = parity.run_case(op, dtype, sample, consumer)
                stats.cases += 1
                if outcome == "break":
                    stats.graph_break += 1
                else:
                    setattr(stats, outcome, getattr(stats, outcome) + 1)
                if outcome == "failed":
                    tag = " (* 2)" if consumer else ""
                    failures.append(f"{str(dtype).removeprefix('torch.')} sample {i}{tag} {msg}")
    return stats, failures


@pytest.mark.parametrize("op", OPS, ids=parity.op_id)
def test_compiled_matches_eager_on_cuda(op, monkeypatch):
    # NOTE: run_case reads the CPU overrides; on CUDA the CUDA ones apply.
    monkeypatch.setattr(parity, "override_tolerances", _cuda_overrides)
    stats, failures = _run_op_cuda(op)
    _RESULTS[parity.op_id(op)] = stats
    assert not failures, f"{parity.op_id(op)}: {len(failures)} failed case(s):\n" + "\n".join(
        failures
    )


def test_zz_print_cuda_parity_table(capsys):
    """Runs last in this module (pytest keeps definition order)."""
    if not _RESULTS:
        pytest.skip("no op ran in this session")
    with capsys.disabled():
        print(f"\nOpInfo parity on CUDA (first {parity.MAX_SAMPLES} samples per op and dtype):")
        print(parity.format_table(_RESULTS))
    assert sum(s.failed for s in _RESULTS.values()) == 0
