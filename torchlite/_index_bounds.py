"""The bounds check a graph runs before its first effect (csrc/capture/index_bounds.h).

An index op (`keys.index_copy_(2, pos, k)`) that runs after an in-place op and Python side
effects gets this check of its indices placed before the graph's first effect. When an index is
out of range nothing visible has run yet: the IndexError makes the frame run eagerly from its
start, which raises eager's own error with eager's state.
"""

import torch


def check_index_bounds(index: torch.Tensor, size: int, dim: int, op: str) -> None:
    if index.device.type == "meta" or index.numel() == 0:
        return
    low, high = torch.aminmax(index.reshape(-1))
    if bool(low < 0) or bool(high >= size):
        raise IndexError(
            f"{op}(): an index is out of range for dimension {dim} with size {size} "
            f"(indices from {int(low)} to {int(high)})"
        )
    return
