#include "passes/fuse_plan.h"

#include <algorithm>
#include <set>

namespace tl::passes {
namespace {

using Kind = OpLowering::Kind;

bool distinct(const AxisMap& m) {
  std::set<int> s;
  for (int a : m)
    if (a >= 0 && !s.insert(a).second) return false;
  return true;
}

// True when some axis of the node is longer than the kernel axis indexing it: the kernel
// reads a slice of it (passes/lower_view.cpp `slice_view`) and computes only that part.
bool partial(const AxisMap& m, const std::vector<int64_t>& node_sizes,
             const std::vector<int64_t>& shape) {
  for (size_t j = 0; j < m.size() && j < node_sizes.size(); ++j)
    if (m[j] >= 0 && node_sizes[j] != shape[m[j]]) return true;
  return false;
}

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

// For a reduction, the result map follows from the space map.
AxisMap result_map(const OpLowering& l, const std::vector<int64_t>& node_sizes, const AxisMap& sm) {
  if (l.full_result) return sm;
  bool keepdim = node_sizes.size() == l.space.size();
  AxisMap m;
  for (size_t s = 0; s < l.space.size(); ++s) {
    bool reduced = std::count(l.reduce_dims.begin(), l.reduce_dims.end(), int(s)) > 0;
    if (!reduced || keepdim) m.push_back(reduced ? -1 : sm[s]);
  }
  return m;
}

std::optional<Plan> plan_join(const OpLowering& l, const std::vector<int64_t>& node_sizes,
                              const AxisMap& m, const Group& g, bool store) {
  Plan p{m, {}, g.shape, g.nred, {}};
  int rank = static_cast<int>(g.shape.size());
  if (!distinct(m)) return std::nullopt;
  // A value read at a shifted map exists there only: stored, it would land at
  // the reader's coordinates, and a reduction's space would need the shift too.
  // So is a value of which the group reads a slice: stored, only the slice would be.
  if ((m.shifted() || partial(m, node_sizes, g.shape)) && (store || l.kind == Kind::Reduction))
    return std::nullopt;
  std::vector<int> red_axes, cur_red;  // kernel axes (old layout) to be reduced
  std::vector<int64_t> appended;       // or new reduction axes
  for (int a = rank - g.nred; a < rank; ++a) cur_red.push_back(a);
  if (l.kind == Kind::Reduction) {
    AxisMap& sm = p.space_map;
    sm.assign(l.space.size(), -1);
    std::vector<int> nonred, rd;
    for (size_t s = 0; s < l.space.size(); ++s)
      if (contains(l.reduce_dims, int(s))) {
        if (l.space[s] != 1) rd.push_back(int(s));
      } else {
        nonred.push_back(int(s));
      }
    bool keepdim = node_sizes.size() == l.space.size();
    if (l.full_result) sm = m;
    for (size_t i = 0; !l.full_result && i < nonred.size(); ++i)
      sm[nonred[i]] = m[keepdim ? nonred[i] : i];
    std::set<int> used;
    for (int s : nonred)
      if (sm[s] >= 0) used.insert(sm[s]);
    if (rd.empty()) {
      // sums over size-1 axes only: the reductions become the identity
    } else if (l.full_result) {
      for (int d : rd) {
        if (sm[d] < 0) return std::nullopt;
        red_axes.push_back(sm[d]);
      }
      std::sort(red_axes.begin(), red_axes.end());
      if (g.nred > 0 && red_axes != cur_red) return std::nullopt;
    } else {
      red_axes = cur_red;
      for (int a = 0; g.nred == 0 && a < rank; ++a)
        if (!used.count(a)) red_axes.push_back(a);
      if (red_axes.empty()) {
        for (int d : rd) {
          sm[d] = rank + static_cast<int>(appended.size());
          appended.push_back(l.space[d]);
        }
      } else {
        if (red_axes.size() != rd.size()) return std::nullopt;
        for (size_t i = 0; i < rd.size(); ++i) {
          if (g.shape[red_axes[i]] != l.space[rd[i]]) return std::nullopt;
          sm[rd[i]] = red_axes[i];
        }
      }
    }
    for (int s : nonred)
      if (sm[s] >= 0 && contains(red_axes, sm[s])) return std::nullopt;
    if (!distinct(sm)) return std::nullopt;
  }
  if (!appended.empty()) {
    p.shape.insert(p.shape.end(), appended.begin(), appended.end());
    p.nred = static_cast<int>(appended.size());
  } else if (!red_axes.empty() && g.nred == 0) {
    std::vector<int> order;  // new layout: kept axes, then the reduced ones
    for (int a = 0; a < rank; ++a)
      if (!contains(red_axes, a)) order.push_back(a);
    order.insert(order.end(), red_axes.begin(), red_axes.end());
    p.perm.assign(rank, 0);
    p.shape.clear();
    for (int i = 0; i < rank; ++i) p.perm[order[i]] = i, p.shape.push_back(g.shape[order[i]]);
    p.nred = static_cast<int>(red_axes.size());
    for (AxisMap* mp : {&p.map, &p.space_map})
      for (int& a : *mp)
        if (a >= 0) a = p.perm[a];
  }
  if (store) {  // a stored value must cover the outer axes (or all axes) exactly once
    int prank = static_cast<int>(p.shape.size()), outer = prank - p.nred;
    std::set<int> cover;
    for (int a : p.map)
      if (a >= 0) cover.insert(a);
    bool inner = !cover.empty() && *cover.rbegin() >= outer;
    if (static_cast<int>(cover.size()) != (inner ? prank : outer)) return std::nullopt;
  }
  return p;
}

}  // namespace tl::passes
