"""Linears whose output rows are padded to 16 bytes (passes/cuda_layouts.cpp).

A half-precision linear with an unaligned output width (GPT-2's 50257-word
vocabulary) runs cuBLAS's slow align-1 kernels. Without a bias, the product is
written straight into a buffer with padded rows (cuBLAS only needs the row
stride aligned, not the width). With a bias, the compiled graph multiplies by
a weight padded to a multiple of 8 rows instead (an output that is not
contiguous would cost cuBLAS a pass to copy the bias in). The padding runs through
torch's own pad (a vectorised copy, ~55 us for GPT-2's 77 MB weight on an
H100) rather than as a fused kernel, whose per-element clamped reads take
twice as long. It is made on every call: a kept copy could miss an update
made through `weight.data`, which torch's version counter does not see.
"""

import torch
import torch.nn.functional as F


def padded_rows(weight, rows):
    """`weight` with zero rows appended along dim 0 up to `rows` rows."""
    return F.pad(weight, [0, 0] * (weight.dim() - 1) + [0, rows - weight.shape[0]])


def linear_into_padded_rows(x, weight, row_stride):
    """F.linear(x, weight) as a view of a buffer whose rows hold `row_stride` elements.

    cuBLAS picks its align-1 kernels from the output width too, not only from the row
    stride: the aligned leading columns are one product and the few columns past them
    (under 8) another."""
    cols, k = weight.shape
    lead = x.shape[:-1]
    aligned = cols - cols % 8
    out = torch.empty((*lead, row_stride), dtype=x.dtype, device=x.device)
    flat_x, flat_out = x.reshape(-1, k), out.view(-1, row_stride)
    torch.mm(flat_x, weight[:aligned].t(), out=flat_out[:, :aligned])
    torch.mm(flat_x, weight[aligned:].t(), out=flat_out[:, aligned:cols])
    return out.narrow(-1, 0, cols)
