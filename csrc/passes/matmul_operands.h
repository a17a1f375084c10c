#pragma once
// Batched matmul operands laid out as torch's bmm takes them. torch.matmul
// reshapes each operand of a batched product to [batch, rows, cols] and bmm
// needs each matrix row- or column-major; an operand in another layout (a
// permuted view of a linear's output, or a kernel result that kept a permuted
// input's layout: attention's q, k and v) is copied by torch inside the call,
// one torch copy kernel per operand. Here such an operand is copied
// explicitly before the product (`contiguous`, through a transpose when its
// rows are the inner dim), so the copy is a torchlite kernel that fuses into
// the kernel producing the value (swin's `q * scale`, xcit's normalized q and
// k) and the product reads it as it is. The same for a linear (or a matmul by
// a matrix) whose 3+-d input torch cannot fold into rows by a view, or, with a
// bias, whose input is not contiguous (torch then runs a matmul and adds the
// bias in a kernel of its own). Values are eager's; only the layout the
// product reads changes (its result's layout does not).
#include "ir/graph.h"

namespace tl::passes {

// Returns how many operands now get their copy from the graph.
int lay_out_matmul_operands(ir::Graph& graph);

}  // namespace tl::passes
