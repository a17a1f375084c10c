"""The run-time check of an `assert` on a tensor's value (csrc/capture/data_dependent_assert.cpp).

The trace takes the assertion to hold and the graph checks it where the assert stood. When it
fails, the AssertionError makes the frame run eagerly from its start (nothing visible has run
yet), which raises eager's own error: its message, evaluated as the user wrote it.
"""

import torch


def check_assertion(cond: torch.Tensor, holds_if: bool) -> None:
    if cond.device.type == "meta":
        return
    if bool(cond) is not holds_if:
        raise AssertionError("assertion on a tensor's value failed in compiled code")
