#pragma once
// Layout decisions of fusion: where a node lands in a group's iteration space.
#include <optional>
#include <vector>

#include "passes/fuse.h"

namespace tl::passes {

// A node placed in a group: its result map, its space map (reductions), and
// the group's new layout (`perm`: old kernel axis -> new one, empty if none).
struct Plan {
  AxisMap map, space_map;
  std::vector<int64_t> shape;
  int nred = 0;
  std::vector<int> perm;
};

// Places a node whose result the group reads through `m`: a reduction claims
// the group's reduction axes (turning unused axes into reduction axes, or
// appending new ones); a stored value must cover the outer (or all) axes once.
std::optional<Plan> plan_join(const OpLowering& l, const std::vector<int64_t>& node_sizes,
                              const AxisMap& m, const Group& g, bool store);

// A reduction's result map, given its space map.
AxisMap result_map(const OpLowering& l, const std::vector<int64_t>& node_sizes, const AxisMap& sm);

}  // namespace tl::passes
