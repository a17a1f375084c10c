#pragma once
// Whether a node's value shares memory with another's, as torch decided at
// trace time (the meta ops ran torch's own aliasing rules).
#include <cstdint>
#include <optional>

#include "ir/graph.h"

namespace tl::passes {

// Element offset of n's trace-time (meta) value from base's when n's value is
// a torch view of base's storage (slicing, select, split pieces, a reshape that
// did not copy, `contiguous()` of a contiguous tensor: base itself); nullopt
// when torch copied.
std::optional<int64_t> alias_offset(const ir::Node& n, const ir::Node& base);

}  // namespace tl::passes
