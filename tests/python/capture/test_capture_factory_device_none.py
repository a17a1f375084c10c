"""Factory functions called with `device=None` (the default device, as timm's grid builders
pass it): traced on meta tensors like a call without a device, so their results mix with the
rest of the graph. Used to break with "Tensor on device cpu is not on the expected device meta"."""

import torch
from helpers import check

import torchlite


def test_arange_with_device_none_feeds_meshgrid_and_inputs_in_one_graph():
    def fn(x):
        shape = [3, 4]
        t = [(torch.arange(0.5, s, device=None, dtype=torch.float32) + 0.25) / s for s in shape]
        grid = torch.stack(torch.meshgrid(t, indexing="ij"), dim=-1)
        return x + grid.sum(-1) * torch.ones(3, 4, device=None)

    check(fn, torch.randn(3, 4))
    report = torchlite.explain(fn)(torch.randn(3, 4))
    assert (report.graph_count, report.graph_break_count) == (1, 0)


def test_zeros_and_full_with_device_none_keep_dtype_and_values():
    def fn(x):
        z = torch.zeros(x.shape[0], 2, device=None, dtype=torch.float64)
        f = torch.full((2,), 3, device=None)
        return z + f, x.sum() + f.sum()

    check(fn, torch.randn(5))
