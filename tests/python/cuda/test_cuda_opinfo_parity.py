"""The OpInfo parity suite (tests/python/passes/test_opinfo_parity.py) on CUDA: every lowered
op, CUDA sample inputs in float32/float16/bfloat16/int64/bool, compiled under no_grad equals
eager within the OpInfo's CUDA tolerances."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "passes"))

import opinfo_parity as parity

pytestmark = pytest.mark.cuda

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool)
OPS = [
    op for op in parity.lowered_opinfos() if any(d in op.supported_dtypes("cuda") for d in DTYPES)
]
_RESULTS: dict[str, parity.Stats] = {}


@pytest.mark.parametrize("op", OPS, ids=parity.op_id)
def test_compiled_matches_eager_on_cuda(op):
    parity.check_op(op, _RESULTS, "cuda", DTYPES)


def test_zz_print_cuda_parity_table(capsys):
    """Runs last in this module (pytest keeps definition order)."""
    parity.print_table(_RESULTS, capsys, "OpInfo parity on CUDA")
