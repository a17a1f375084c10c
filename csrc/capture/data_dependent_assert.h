#pragma once
// An `assert` on a tensor's value becomes a check the graph runs (data_dependent_assert.cpp;
// the tracer's side is declared in tracer.h).
#include "ir/graph.h"

namespace tl::capture {

// True for the check node of such an assert: it raises only before the graph's first visible
// effect, so frame/captured_frame.cpp runs the frame eagerly when it fails.
bool is_assertion_check(const ir::Node& n);

}  // namespace tl::capture
