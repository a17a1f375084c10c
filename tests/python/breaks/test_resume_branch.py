"""A branch on a tensor's value: the graph runs up to the condition, CPython takes the jump, and
whichever side runs is a resume function captured on its own."""

import torch
from resume_check import check_resume

import torchlite


def _branch(x):
    y = x.cos()
    if x.sum() > 0:
        return y + 1
    return y - 1


def _branch_then_more(x):
    y = x * 2
    if (y > 0).all():
        y = y.sin()
    else:
        y = y.cos()
    return y * 3


POS, NEG = torch.tensor([0.5, 1.0, 2.0]), torch.tensor([-3.0, -1.0, 0.5])


def test_true_side_resumes_compiled():
    check_resume(_branch, POS, graphs=2)


def test_false_side_resumes_compiled():
    check_resume(_branch, NEG, graphs=2)


def test_both_sides_share_the_frame_and_each_compiles_once():
    torchlite.reset()
    compiled = torchlite.compile(_branch_then_more)
    for x in (POS, NEG, POS, NEG):
        torch.testing.assert_close(compiled(x.clone()), _branch_then_more(x.clone()))
    before = torchlite.counters()
    for x in (POS, NEG):
        compiled(x.clone())
    after = torchlite.counters()
    assert after["frames"] == before["frames"]
    report = torchlite.explain(_branch_then_more)(POS.clone())
    assert report.graph_count == 2
