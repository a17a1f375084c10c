#pragma once
// Shared by the view and data-movement rules (lower_view.cpp, lower_data.cpp).
#include "passes/lowering.h"

namespace tl::passes {

// A Pointwise copy of `x` into the node's shape in row-major order (a reshape
// that torch could not do as a view): the node's linear index, unravelled over
// x's sizes, addresses x through a Gather.
bool copy_by_linear_index(RuleCtx& c, const ir::Node* x);

// getitem with integer tensors indexing x's leading axes (x[batch, kv]).
bool tensor_index(RuleCtx& c);

}  // namespace tl::passes
