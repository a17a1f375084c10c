#pragma once
// Fusion: groups lowered nodes into kernels. Nodes are visited consumers
// first; a producer joins its consumers' group when its value can be indexed
// from the group's iteration space (broadcasts and views compose), the group's
// reduction axes allow it, and no path leaves the group and comes back (which
// would need the group to run twice). Barriers split segments no group spans.
#include <compare>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "passes/graph_info.h"
#include "passes/lowering.h"
#include "passes/partition.h"

namespace tl::passes {

// A node axis -> kernel axis map; -1 where the node's index is always 0.
// `shift` (empty: none; else one per node axis) offsets and clamps the node's
// coordinate along an axis: a cat part's producer computed in the cat's kernel
// is indexed by the cat's coordinate minus the part's start. Such a value is
// never stored or reduced at its shifted map (fuse_plan.cpp).
// NOTE: a vector of axes with the shifts beside it, so the many places that
// only relabel axes stay as they are.
struct AxisMap : std::vector<int> {
  using std::vector<int>::vector;
  std::vector<AxisShift> shift;
  AxisShift shift_of(size_t j) const { return j < shift.size() ? shift[j] : AxisShift{}; }
  bool shifted() const;
  // Appends node axis -> kernel axis `a` with shift `s` (dropped where a < 0).
  void add(int a, AxisShift s);
  bool operator==(const AxisMap& o) const;
  bool operator!=(const AxisMap& o) const { return !(*this == o); }
  // NOTE: its own <=>, or std::pair and std::map keys would order by the
  // vector's and ignore the shifts.
  std::weak_ordering operator<=>(const AxisMap& o) const;
};

struct Group {
  std::vector<int64_t> shape;  // kernel axes (no size-1 axes); the last `nred` are reduced
  int nred = 0;
  int segment = 0;
  std::vector<const ir::Node*> members;                     // graph order once fuse() returns
  std::unordered_map<const ir::Node*, AxisMap> maps;        // members' result axes
  std::unordered_map<const ir::Node*, AxisMap> space_maps;  // reductions' space axes
  // Members computed at more maps than `maps`' one, never stored: a pointwise value that
  // several cat parts read at their own shifts (rotary's and SwiGLU's gradients: one
  // product read by both halves) is recomputed in each part instead of stored by a kernel
  // of its own and gathered back.
  std::unordered_map<const ir::Node*, std::vector<AxisMap>> more_maps;
  bool alive = true;
};

struct Fusion {
  std::unordered_map<const ir::Node*, OpLowering> lowerings;  // only nodes placed in groups
  std::vector<Group> groups;
  std::unordered_map<const ir::Node*, int> group_of;
  // Lowered nodes whose value nothing reads (the batch and head indices a
  // mask function never uses): pure, so they are not run at all.
  std::unordered_set<const ir::Node*> dead;
};

Fusion fuse(const ir::Graph& graph, const GraphInfo& info);

// How an operand of sizes `from`, broadcast to `to` (axes mapped by `to_map`),
// is indexed; nullopt if `from` does not broadcast to `to`.
std::optional<AxisMap> broadcast_map(const std::vector<int64_t>& from,
                                     const std::vector<int64_t>& to, const AxisMap& to_map);

// How `l` reads its input `i` when its own axes (of sizes `target`: the node's
// shape, or a reduction's space) are mapped by `target_map`.
std::optional<AxisMap> operand_map(const OpLowering& l, size_t i,
                                   const std::vector<int64_t>& target, const AxisMap& target_map);

// How a View node's base (inputs[0], of sizes `base_sizes`) is indexed when
// the view is indexed by `map`.
AxisMap view_base_map(const OpLowering& l, const std::vector<int64_t>& base_sizes,
                      const AxisMap& map);

// Loop IR for one group; `index` names it. Members whose value is used
// outside the group become outputs.
FusedKernel build_kernel(const Group& group, const Fusion& fusion, const GraphInfo& info,
                         int index);

}  // namespace tl::passes
