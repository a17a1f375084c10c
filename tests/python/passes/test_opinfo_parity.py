"""Op parity against PyTorch's OpInfo database: every op torchlite lowers, every CPU sample
input (first MAX_SAMPLES per dtype) in float32/float64/bfloat16/int64/bool, compiled under
no_grad equals eager within the OpInfo's tolerances. The last test prints the table of cases
that ran through a kernel, through torch only (extern), broke the graph, or failed."""

import pytest
from opinfo_parity import Stats, check_op, lowered_opinfos, op_id, print_table

OPS = lowered_opinfos()
_RESULTS: dict[str, Stats] = {}


@pytest.mark.parametrize("op", OPS, ids=op_id)
def test_compiled_matches_eager(op):
    check_op(op, _RESULTS)


def test_zz_print_parity_table(capsys):
    """Runs last in this module (pytest keeps definition order)."""
    print_table(_RESULTS, capsys, "OpInfo parity")
