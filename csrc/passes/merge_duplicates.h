#pragma once
// Models recompute the same value in every layer: T5's
// `torch.where(mask, position_bias, min)` (the float attention mask built
// from the position bias all layers share) is one [B, H, T, T] kernel and
// buffer per layer, rotary tables and masks likewise. Two nodes that call the
// same target on the same operands and equal constants compute the same
// value, so the later one is replaced by the earlier one (common
// subexpressions, as AOTAutograd's fx_graph_cse does for Inductor).
//
// Values with no tensor operands (aranges, fills) are left as they are: each
// kernel that reads one computes it at its own index for free. Only where
// merging cannot be seen: not in graphs that write any tensor in
// place (a write between the two, or into one of them, would tell them
// apart), never random draws or other barriers, never values that need
// grad, and never a node whose value (or a view of it) the graph returns
// (the caller would get two outputs sharing memory where eager made two).
// Constants must be of plain types (None, bool, int, float, str, dtypes,
// devices, ...) and equal in type and value: `x * 1` and `x * 1.0` differ on
// integer tensors.
#include "ir/graph.h"

namespace tl::passes {

// Merges as above (later duplicates into the first, in graph order, so chains
// of duplicates merge whole); returns how many nodes were removed.
int merge_duplicates(ir::Graph& graph);

}  // namespace tl::passes
