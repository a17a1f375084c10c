"""A plain unsupported call (print, a C function) splits the frame: the graph before it runs
compiled, the call runs in CPython, and the rest is a resume function captured on its own."""

import zlib

import torch
from resume_check import check_resume, inputs

import torchlite


def _print_break(x):
    y = x * 2
    print("shape is", tuple(y.shape))
    return y.sin() + 1


def _crc_break(x):
    y = x.cos()
    c = zlib.crc32(b"torchlite")
    return y * 2 + c % 7


def _keyword_call_break(x):
    y = x.exp()
    print("value", end="\n")
    return y - x


def test_print_break_runs_graph_before_and_resume_after(capsys):
    check_resume(_print_break, inputs(4, 3), graphs=2)
    out = capsys.readouterr().out
    # explain once, eager three times, compiled three times
    assert out.count("shape is (4, 3)") == 7


def test_c_function_break_resumes_compiled():
    check_resume(_crc_break, inputs(5), graphs=2)


def test_keyword_call_break_resumes_compiled():
    check_resume(_keyword_call_break, inputs(5), graphs=2)


def test_second_call_reuses_resume_function_without_capturing():
    torchlite.reset()
    compiled = torchlite.compile(_crc_break)
    x = inputs(3)
    compiled(x)
    before = torchlite.counters()
    for _ in range(3):
        torch.testing.assert_close(compiled(x), _crc_break(x))
    after = torchlite.counters()
    assert after["frames"] == before["frames"]
    assert after["cache_hits"] > before["cache_hits"]


def test_fullgraph_still_raises_at_the_first_break():
    compiled = torchlite.compile(_crc_break, fullgraph=True)
    try:
        compiled(inputs(3))
    except torchlite.Unsupported as e:
        assert "crc32" in str(e)
    else:
        raise AssertionError("fullgraph=True did not raise")
