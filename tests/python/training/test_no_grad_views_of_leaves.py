"""Under no_grad, a leaf that requires grad written in place through a slice while another
slice of it is read (`x[1:] = x[:-1] + 0`, a shift register). The trace-time view of the read
slice was made under no_grad and its base written afterwards: asking it for its grad_fn raises
in torch, which the compile step did (`A view was created in no_grad mode ...`) where eager
runs."""

import pytest
import torch

import torchlite


def shift(x, w):
    x[1:] = x[:-1] + 0
    return x * 1, w + 1


def scaled_shift(x, w):
    x[1:] = w[:-1] * 2 + x[:-1]
    return x * 1, w + 1


def read_then_write_view(x, w):
    y = x[:-1] * 2
    x[1:].copy_(y)
    return x * 1, w + 1


def add_into_slice(x, w):
    x[2:].add_(x[:-2] * 0.5)
    return x * 1, w + 1


PROGRAMS = [shift, scaled_shift, read_then_write_view, add_into_slice]


@pytest.mark.parametrize("fn", PROGRAMS)
@pytest.mark.parametrize("aliased", [False, True])
def test_in_place_write_of_a_leaf_that_requires_grad_under_no_grad_matches_eager(fn, aliased):
    torchlite.reset()
    compiled = torchlite.compile(fn)
    for _ in range(2):
        with torch.no_grad():
            base = torch.randn(6)
            results = []
            for f in (fn, compiled):
                x = base.clone().requires_grad_()
                w = x if aliased else torch.randn(6, generator=torch.Generator().manual_seed(1))
                w.requires_grad_()
                results.append((f(x, w), x.detach().clone()))
        (expected, x_eager), (actual, x_comp) = results
        torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(x_comp, x_eager)
