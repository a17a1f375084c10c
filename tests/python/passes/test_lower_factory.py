"""torch.arange lowered to the point's coordinate (csrc/passes/lower_factory.cpp): it fuses into
the kernels that read it, also through x[None, :]-style views, and gives eager's exact values;
arguments whose values a coordinate cannot reproduce exactly stay torch's."""

import pytest
import torch

import torchlite
from torchlite import _C


def summary(fn, *args):
    return _C.partition_summary(torchlite.explain(fn)(*args).graphs[0])


def check_exact(fn, *args):
    torchlite.reset()
    expected = fn(*args)
    got = torchlite.compile(fn)(*args)
    for e, g in zip(
        expected if isinstance(expected, tuple) else (expected,),
        got if isinstance(got, tuple) else (got,),
    ):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert torch.equal(g, e), (g, e)


CASES = {
    "end": lambda x: x + torch.arange(7),
    "end_keyword": lambda x: x + torch.arange(end=7),
    "start_end": lambda x: x * torch.arange(3, 10),
    "negative_step": lambda x: x - torch.arange(20, 6, -2),
    "start_step_keywords": lambda x: x + torch.arange(start=-3, end=11, step=2),
    "int32": lambda x: (x > 0) * torch.arange(7, dtype=torch.int32),
    "float32_from_ints": lambda x: x * torch.arange(0, 14, 2, dtype=torch.float32),
    "float_step_integral": lambda x: x + torch.arange(0, 7.0, 1.0),
    "bfloat16_small": lambda x: x.bfloat16() + torch.arange(7, dtype=torch.bfloat16),
    "float64": lambda x: x.double() / torch.arange(1, 8, dtype=torch.float64),
    "uint8": lambda x: (x > 0) + torch.arange(255, 241, -2, dtype=torch.uint8),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_arange_matches_eager_bit_for_bit(name):
    x = torch.randn(5, 7)
    check_exact(CASES[name], x)
    s = summary(CASES[name], x)
    assert not any("arange" in op for op in s["extern_ops"]), s["extern_ops"]


def causal_mask(x):
    n = x.shape[-1]
    q = torch.arange(n)[:, None]
    k = torch.arange(n)[None, :]
    return x.masked_fill(k > q, float("-inf")).softmax(-1)


def test_mask_from_positions_is_one_kernel_with_the_arange_inside():
    x = torch.randn(3, 16, 16)
    torchlite.reset()
    torch.testing.assert_close(torchlite.compile(causal_mask)(x), causal_mask(x))
    s = summary(causal_mask, x)
    assert s["externs"] == [] and s["kernel_count"] == 1, s
    assert "index(" in s["kernels"][0]


def test_size_one_views_and_slices_of_a_computed_value_fuse():
    def unsqueezed(x):
        return (x * 2)[:, None] + x[None, :]

    def sliced(x):
        y = x * 2
        return y[1:] + y[:-1]

    x = torch.randn(9)
    check_exact(unsqueezed, x)
    check_exact(sliced, x)
    assert summary(unsqueezed, x)["kernel_count"] == 1
    # A slice of a computed value is a shifted remap (passes/lower_view.cpp `slice_view`): y is
    # computed at both slices' coordinates in one kernel (before: stored by its own kernel).
    assert summary(sliced, x)["kernel_count"] == 1


INEXACT = {
    # a fractional step: torch's float arithmetic decides the last bits
    "fractional_step": lambda x: x + torch.arange(0, 0.7, 0.1)[:7],
    # past 2**24 float32 cannot hold every integer: torch's rounding decides
    "float32_past_2_24": lambda x: x + torch.arange(2**24 - 3, 2**24 + 4, dtype=torch.float32),
    "bfloat16_past_256": lambda x: x + torch.arange(250, 264, 2, dtype=torch.bfloat16),
}


@pytest.mark.parametrize("name", sorted(INEXACT))
def test_arange_values_a_coordinate_cannot_reproduce_stay_torchs(name):
    x = torch.randn(5, 7)
    check_exact(INEXACT[name], x)
    assert any("arange" in op for op in summary(INEXACT[name], x)["extern_ops"])
