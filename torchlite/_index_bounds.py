"""The bounds check a graph runs before its first effect (csrc/capture/index_bounds.h).

An index op (`keys.index_copy_(2, pos, k)`, a loss's class targets) that runs after an in-place op and Python side
effects gets this check of its indices placed before the graph's first effect. When an index is
out of range nothing visible has run yet: the IndexError makes the frame run eagerly from its
start, which raises eager's own error with eager's state.
"""

import torch


def check_index_bounds(
    index: torch.Tensor, size: int, dim: int, op: str, ignore: int | None = None
) -> None:
    """Raises IndexError unless every value of `index` lies in [0, size), or equals `ignore`
    (nll_loss/cross_entropy's ignore_index)."""
    if index.device.type == "meta":
        return
    if ignore is not None:
        index = index[index != ignore]
    if index.numel() == 0:
        return
    low, high = torch.aminmax(index.reshape(-1))
    if bool(low < 0) or bool(high >= size):
        raise IndexError(
            f"{op}(): an index is out of range for dimension {dim} with size {size} "
            f"(indices from {int(low)} to {int(high)})"
        )
    return
