"""The per-step layout key of compiled optimizer steps (guards/tensor_list_layout.h): which
tensors overlap in memory, and tensors a compiled step does not take."""

import pytest
import torch

import torchlite
from torchlite import _C


def layouts(written: list, read: list, after: list = ()):
    flat = [*written, *read, *after]
    return _C.tensor_list_layout(flat, len(written), len(written) + len(read))


def test_separate_tensors_share_nothing():
    key, sharing, supported = layouts([torch.zeros(3), torch.zeros(3)], [torch.zeros(3)])
    assert (sharing, supported) == ("", True)
    assert isinstance(key, bytes)


def test_disjoint_views_of_one_storage_share_nothing():
    base = torch.zeros(10)
    assert layouts([base[:5]], [base[5:]])[1] == ""
    # every other element: the spans interleave, so they count as overlapping
    assert layouts([base[0::2]], [base[1::2]])[1] == "read_written"


def test_a_read_tensor_overlapping_a_written_one():
    base = torch.zeros(10)
    assert layouts([torch.zeros(4), base[:6]], [base[4:]])[1] == "read_written"
    # the written tensors after the read ones count too
    assert layouts([torch.zeros(4)], [base[4:]], [base[:6]])[1] == "read_written"


def test_written_tensors_overlapping_each_other():
    base = torch.zeros(10)
    assert layouts([base[:6], base[4:]], [torch.zeros(2)])[1] == "written"
    # two read tensors may overlap: nothing writes them
    assert layouts([torch.zeros(2)], [base[:6], base[4:]])[1] == ""


def test_empty_tensors_overlap_nothing():
    base = torch.zeros(10)
    assert layouts([base[3:3]], [base[:10]])[1] == ""


def test_the_key_changes_with_sizes_strides_dtype():
    t = torch.zeros(4, 6)
    key = layouts([t], [])[0]
    assert layouts([torch.zeros(4, 6)], [])[0] == key
    assert layouts([t.t()], [])[0] != key
    assert layouts([torch.zeros(6, 4)], [])[0] != key
    assert layouts([torch.zeros(4, 6, dtype=torch.float64)], [])[0] != key
    assert layouts([t[:, :3]], [])[0] != key


def test_complex_and_sparse_tensors_are_not_supported():
    assert layouts([torch.zeros(3, dtype=torch.complex64)], [])[2] is False
    assert layouts([torch.zeros(3)], [torch.zeros(3).to_sparse()])[2] is False


def test_not_a_tensor_raises():
    with pytest.raises(AttributeError):
        _C.tensor_list_layout([torch.zeros(2), 3], 1, 2)


def test_sparse_gradients_run_torchs_step():
    torch.manual_seed(0)
    emb, ref = torch.nn.Embedding(10, 3, sparse=True), torch.nn.Embedding(10, 3, sparse=True)
    ref.load_state_dict(emb.state_dict())
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    step = torchlite.compile(opt.step)
    for i in range(3):
        idx = torch.randint(0, 10, (5,))
        emb(idx).sum().backward()
        ref(idx).sum().backward()
        step()
        ref_opt.step()
        torch.testing.assert_close(emb.weight, ref.weight)
    assert step.eager_steps == 3 and "sparse" in step.last_eager_reason


def test_complex_parameters_run_torchs_step():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(4, dtype=torch.complex64))
    q = torch.nn.Parameter(p.detach().clone())
    opt, ref = torch.optim.Adam([p], lr=0.1), torch.optim.Adam([q], lr=0.1)
    step = torchlite.compile(opt.step)
    for _ in range(3):
        g = torch.randn(4, dtype=torch.complex64)
        p.grad, q.grad = g.clone(), g
        step()
        ref.step()
        torch.testing.assert_close(p, q)
    assert step.eager_steps == 3 and "complex" in step.last_eager_reason
