"""Op parity against PyTorch's OpInfo database: every op torchlite lowers, every CPU sample
input (first MAX_SAMPLES per dtype) in float32/float64/bfloat16/int64/bool, compiled under
no_grad equals eager within the OpInfo's tolerances. The last test prints the table of cases
that ran through a kernel, through torch only (extern), broke the graph, or failed."""

import pytest
from opinfo_parity import MAX_SAMPLES, Stats, format_table, lowered_opinfos, op_id, run_op

OPS = lowered_opinfos()
_RESULTS: dict[str, Stats] = {}


@pytest.mark.parametrize("op", OPS, ids=op_id)
def test_compiled_matches_eager(op):
    stats, failures = run_op(op)
    _RESULTS[op_id(op)] = stats
    assert not failures, f"{op_id(op)}: {len(failures)} failed case(s):\n" + "\n".join(failures)


def test_zz_print_parity_table(capsys):
    """Runs last in this module (pytest keeps definition order)."""
    if not _RESULTS:
        pytest.skip("no op ran in this session")
    with capsys.disabled():
        print(f"\nOpInfo parity (first {MAX_SAMPLES} samples per op and dtype):")
        print(format_table(_RESULTS))
    assert sum(s.failed for s in _RESULTS.values()) == 0
