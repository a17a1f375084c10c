"""Capture facts that only show on a GPU: the device of values made by ops whose tensor operands
sit in a list or a keyword (torch.cat((a, b)) on CUDA is a CUDA tensor)."""

import pytest
import torch
from helpers import check

pytestmark = pytest.mark.cuda


def test_device_of_cat_result_is_the_operands_device():
    def fn(a, b):
        c = torch.cat((a, b), dim=0)
        # transformers builds masks with torch.arange(n, device=embeddings.device)
        idx = torch.arange(c.shape[0], device=c.device)
        return c * idx[:, None], str(c.device)

    check(fn, torch.randn(2, 3, device="cuda"), torch.randn(4, 3, device="cuda"))


def test_device_of_where_with_tensor_keywords():
    def fn(cond, x, y):
        z = torch.where(cond, input=x, other=y)
        return torch.zeros(1, device=z.device) + z

    x = torch.randn(5, device="cuda")
    check(fn, x > 0, x, torch.randn(5, device="cuda"))
