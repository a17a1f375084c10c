"""The run-time check of an `assert` on a tensor's value (csrc/capture/data_dependent_assert.cpp).

The trace takes the assertion to hold and the graph checks it where the assert stood. When it
fails, the AssertionError makes the frame run eagerly from its start (nothing visible has run
yet), which raises eager's own error: its message, evaluated as the user wrote it.
"""

import torch
from torch._guards import detect_fake_mode


def check_assertion(cond: torch.Tensor, holds_if: bool) -> None:
    if cond.device.type == "meta":
        return
    if detect_fake_mode((cond,)) is not None:
        # NOTE: traced again by another backend (`backend="inductor"`): a check it keeps.
        torch._assert_async(
            cond if holds_if else torch.logical_not(cond), "assertion failed in compiled code"
        )
        return
    if bool(cond) is not holds_if:
        raise AssertionError("assertion on a tensor's value failed in compiled code")
