"""Zero-padded linear weights (passes/cuda_layouts.cpp).

A half-precision linear with an unaligned output width (GPT-2's 50257-word
vocabulary) runs cuBLAS's slow align-1 kernels; the compiled graph multiplies
by a weight padded to a multiple of 8 rows instead. The padding runs through
torch's own pad (a vectorised copy, ~55 us for GPT-2's 77 MB weight on an
H100) rather than as a fused kernel, whose per-element clamped reads take
twice as long. It is made on every call: a kept copy could miss an update
made through `weight.data`, which torch's version counter does not see.
"""

import torch.nn.functional as F


def padded_rows(weight, rows):
    """`weight` with zero rows appended along dim 0 up to `rows` rows."""
    return F.pad(weight, [0, 0] * (weight.dim() - 1) + [0, rows - weight.shape[0]])
