#pragma once
// An index op after effects, checked first. `keys.index_copy_(2, pos, k)` checks its indices
// when it runs; after an in-place op and Python side effects (transformers' StaticCache fills
// its cache lazily: attribute writes, `cumulative_length.add_`, then `index_copy_`) a failure
// there could neither be rerun eagerly nor leave eager's state (capture/effect_order.h). Instead
// of a graph break, the graph gets a bounds check of the same indices placed before its first
// visible effect (the index computation is copied there when it comes later): when it fails,
// nothing visible has run yet, and the frame runs eagerly from its start, which raises eager's
// error with eager's state (frame/captured_frame.cpp). When it passes, the op cannot raise on
// its indices.
#include <string>
#include <utility>
#include <vector>

#include "capture/context.h"

namespace tl::capture {

// Adds the check for `op(args, kwargs)` (a torch function's or Tensor method's name) before
// `first_effect`, a node of the capture's graph; false (the graph unchanged) when `op` is not an
// index op this knows (dim-index ops without keywords; nll_loss/cross_entropy with class-index
// targets, checked against the class count and ignore_index), or its indices cannot be
// computed there with the values they have at the op: the caller then breaks the graph as
// before.
bool check_indices_first(CaptureContext& ctx, const std::string& op,
                         const std::vector<ValuePtr>& args,
                         const std::vector<std::pair<std::string, ValuePtr>>& kwargs,
                         const ir::Node& first_effect);

// True for a node `check_indices_first` made (frame/captured_frame.cpp runs the frame eagerly
// when it raises before any effect ran).
bool is_index_bounds_check(const ir::Node& n);

}  // namespace tl::capture
