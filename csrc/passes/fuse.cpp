#include "passes/fuse.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "passes/dtype.h"
#include "passes/fuse_plan.h"
#include "passes/fusion_cost.h"

namespace tl::passes {
namespace {

using Node = ir::Node;
using Kind = OpLowering::Kind;

const std::vector<int64_t>& sizes(const Node* n) { return n->meta->sizes; }

class Fuser {
 public:
  Fuser(const ir::Graph& g, const GraphInfo& info) : graph_(g), info_(info) {}

  Fusion run() {
    for (const auto& n : graph_.nodes())
      if (auto l = lower_node(*n, info_)) f_.lowerings.emplace(n.get(), std::move(*l));
    keep_whole_tuples();
    drop_dead_values();
    for (const auto& [n, l] : f_.lowerings) {  // NOTE: prefer a part that reads the input
      if (!l.absorbed) continue;
      auto [it, fresh] = absorbed_by_.emplace(l.absorbed, n);
      if (!fresh && f_.lowerings.at(it->second).inputs.empty()) it->second = n;
    }
    for (auto it = graph_.nodes().rbegin(); it != graph_.nodes().rend(); ++it) place(it->get());
    merge_readers_of_stored_values();
    merge_sibling_reductions();
    return finish();
  }

 private:
  int group(const Node* n) const {
    auto it = f_.group_of.find(n);
    return it == f_.group_of.end() ? -1 : it->second;
  }

  // The maps `u` (in group g) needs for operand `n`, one per map u is computed at: nullopt =
  // cannot index it; `reads` false when u does not read n.
  std::optional<std::vector<AxisMap>> maps_from_user(const Node* n, const Node* u, const Group& g,
                                                     bool* reads) {
    auto ab = absorbed_by_.find(u);
    if (ab != absorbed_by_.end()) u = ab->second;
    const OpLowering& l = f_.lowerings.at(u);
    size_t i = std::find(l.inputs.begin(), l.inputs.end(), n) - l.inputs.begin();
    *reads = i < l.inputs.size();
    if (!*reads) return std::vector<AxisMap>{};
    switch (l.kind) {
      case Kind::Pointwise:
        if (gathers(l, n)) return std::nullopt;  // read from memory at computed offsets
        break;
      case Kind::Reduction:
        if (auto m = operand_map(l, i, l.space, g.space_maps.at(u)))
          return std::vector<AxisMap>{*m};
        return std::nullopt;
      case Kind::StridedView:
        return std::nullopt;
      case Kind::View:
        break;
    }
    std::vector<AxisMap> out;
    auto add = [&](const AxisMap& um) {
      auto m = l.kind == Kind::View ? std::optional(view_base_map(l, sizes(n), um))
                                    : operand_map(l, i, sizes(u), um);
      if (m) out.push_back(std::move(*m));
      return m.has_value();
    };
    if (!add(g.maps.at(u))) return std::nullopt;
    auto more = g.more_maps.find(u);
    if (more != g.more_maps.end())
      for (const AxisMap& um : more->second)
        if (!add(um)) return std::nullopt;
    return out;
  }

  // The distinct maps n is read at in group gi, in the order first read (empty: no member
  // there reads it); nullopt if some member cannot index it.
  std::optional<std::vector<AxisMap>> derived_maps(const Node* n, int gi) {
    std::vector<AxisMap> ms;
    for (const Node* u : info_.users_of(n)) {
      if (group(u) != gi) continue;
      bool reads = false;
      auto mu = maps_from_user(n, u, f_.groups[gi], &reads);
      if (!mu) return std::nullopt;
      for (AxisMap& m : *mu)
        if (std::find(ms.begin(), ms.end(), m) == ms.end()) ms.push_back(std::move(m));
    }
    return ms;
  }

  // n's map in group gi, agreed on by every user there that reads it.
  std::optional<AxisMap> derived_map(const Node* n, int gi) {
    auto ms = derived_maps(n, gi);
    if (!ms || ms->size() != 1) return std::nullopt;
    return (*ms)[0];
  }

  // True when n, read in group gi at the maps `ms` (more than one), may be computed once
  // per map there: a pointwise value (or a view) no one outside reads, in a kernel without
  // reduction axes (each pass over a row would compute it again), at maps that differ only
  // in their shifts (cat parts read one value at several places along the cat's axis).
  // NOTE: the CUDA kernel computes only the part a point takes (a branching Where), so the
  // copies cost no more than the one value; the CPU kernel computes every part.
  bool recomputable(const Node* n, int gi, const std::vector<AxisMap>& ms) {
    const OpLowering& l = f_.lowerings.at(n);
    if (l.kind != Kind::Pointwise && l.kind != Kind::View) return false;
    if (f_.groups[gi].nred != 0 || stored(n, gi) || !siblings(n).empty() || l.absorbed)
      return false;
    if (ms.size() > kMaxCopies) return false;
    for (const AxisMap& m : ms)
      if (static_cast<const std::vector<int>&>(m) != static_cast<const std::vector<int>&>(ms[0]))
        return false;
    return true;
  }
  static constexpr size_t kMaxCopies = 8;

  // True if a path from `starts` reaches group `target` through other units.
  // NOTE: asked for every candidate join, each walk may cover the rest of the graph: nodes are
  // marked by their graph position in a vector (a tree of pointers allocated a node per visit).
  bool reaches(std::vector<const Node*> starts, int target) {
    std::vector<char> seen(info_.position.size(), 0);
    std::vector<char> seen_groups(f_.groups.size(), 0);
    std::set<const Node*> unplaced;  // NOTE: nodes analyze_graph did not number (none expected)
    while (!starts.empty()) {
      const Node* v = starts.back();
      starts.pop_back();
      auto at = info_.position.find(v);
      if (at != info_.position.end() && at->second >= 0 &&
          static_cast<size_t>(at->second) < seen.size()) {
        if (seen[at->second]) continue;
        seen[at->second] = 1;
      } else if (!unplaced.insert(v).second) {
        continue;
      }
      int gv = group(v);
      if (gv == target) return true;
      if (gv >= 0 && static_cast<size_t>(gv) >= seen_groups.size()) seen_groups.resize(gv + 1, 0);
      if (gv >= 0 && !seen_groups[gv]) {
        seen_groups[gv] = 1;
        for (const Node* m : f_.groups[gv].members)
          for (const Node* u : info_.users_of(m)) starts.push_back(u);
      }
      for (const Node* u : info_.users_of(v)) starts.push_back(u);
    }
    return false;
  }

  std::vector<const Node*> outside_users(const std::vector<const Node*>& nodes, int gi, int gj) {
    std::vector<const Node*> out;
    for (const Node* n : nodes)
      for (const Node* u : info_.users_of(n))
        if (group(u) != gi && group(u) != gj) out.push_back(u);
    return out;
  }

  bool stored(const Node* n, int gi) {
    for (const Node* u : info_.users_of(n))
      if (group(u) != gi) return true;
    return false;
  }

  void commit(const Node* n, int gi, Plan p) {
    Group& g = f_.groups[gi];
    auto relabel = [&](AxisMap& m) {
      for (int& a : m)
        if (a >= 0 && a < static_cast<int>(p.perm.size())) a = p.perm[a];
    };
    if (!p.perm.empty()) {
      for (auto& [_, m] : g.maps) relabel(m);
      for (auto& [_, m] : g.space_maps) relabel(m);
      for (auto& [_, ms] : g.more_maps)
        for (AxisMap& m : ms) relabel(m);
    }
    g.shape = p.shape, g.nred = p.nred;
    add(n, gi, std::move(p.map), std::move(p.space_map));
  }

  void add(const Node* n, int gi, AxisMap map, AxisMap space_map) {
    Group& g = f_.groups[gi];
    g.members.push_back(n);
    g.maps[n] = std::move(map);
    if (f_.lowerings.at(n).kind == Kind::Reduction) g.space_maps[n] = std::move(space_map);
    f_.group_of[n] = gi;
    if (const Node* a = f_.lowerings.at(n).absorbed) {
      for (const Node* s : siblings(n)) {
        g.members.push_back(s);
        g.space_maps[s] = g.space_maps.at(n);
        g.maps[s] = result_map(f_.lowerings.at(s), sizes(s), g.space_maps[s]);
        f_.group_of[s] = gi;
      }
      g.members.push_back(a);
      f_.group_of[a] = gi;
    }
  }

  // Unplaced lowered nodes absorbing the same tuple as n (the other getitems of
  // x.max(dim) or var_mean): the same reduction space, placed with n so that
  // every part of the tuple comes out of one pass.
  std::vector<const Node*> siblings(const Node* n) {
    std::vector<const Node*> out;
    const OpLowering& l = f_.lowerings.at(n);
    if (!l.absorbed) return out;
    for (const Node* u : info_.users_of(l.absorbed))
      if (u != n && group(u) < 0 && std::find(out.begin(), out.end(), u) == out.end())
        out.push_back(u);
    return out;
  }

  // Lowered nodes only dead nodes read, latest first so whole chains go.
  void drop_dead_values() {
    for (auto it = graph_.nodes().rbegin(); it != graph_.nodes().rend(); ++it) {
      const Node* n = it->get();
      auto l = f_.lowerings.find(n);
      if (l == f_.lowerings.end() || l->second.absorbed) continue;
      const auto& users = info_.users_of(n);
      if (std::all_of(users.begin(), users.end(),
                      [&](const Node* u) { return f_.dead.count(u); })) {
        f_.dead.insert(n);
        f_.lowerings.erase(l);
      }
    }
  }

  // The tuple absorbed by a getitem is never run, so every user of it must be a
  // getitem lowered as a part of it (same space); otherwise none is.
  void keep_whole_tuples() {
    std::vector<const Node*> drop;
    for (const auto& [n, l] : f_.lowerings) {
      if (!l.absorbed) continue;
      for (const Node* u : info_.users_of(l.absorbed)) {
        auto it = f_.lowerings.find(u);
        if (it == f_.lowerings.end() || it->second.absorbed != l.absorbed ||
            it->second.kind != Kind::Reduction || it->second.space != l.space ||
            it->second.reduce_dims != l.reduce_dims || it->second.full_result != l.full_result)
          drop.push_back(n);
      }
    }
    for (const Node* n : drop) f_.lowerings.erase(n);
  }

  bool try_join(const Node* n, int gi) {
    auto ms = derived_maps(n, gi);
    if (!ms || ms->empty() || (ms->size() > 1 && !recomputable(n, gi, *ms))) return false;
    const AxisMap* m = &ms->front();
    std::vector<const Node*> unit = siblings(n);
    auto plan =
        plan_join(f_.lowerings.at(n), sizes(n), *m, f_.groups[gi], stored(n, gi) || !unit.empty());
    if (plan && ms->size() > 1 && !plan->perm.empty()) return false;
    for (const Node* s : unit) {  // a sibling read in gi must be read where it is computed
      if (!plan) break;
      bool reads = false;
      for (const Node* u : info_.users_of(s)) reads = reads || group(u) == gi;
      auto ms = derived_map(s, gi);
      if (!reads) continue;
      if (!ms) return false;
      for (int& a : *ms)
        if (a >= 0 && a < static_cast<int>(plan->perm.size())) a = plan->perm[a];
      if (*ms != result_map(f_.lowerings.at(s), sizes(s), plan->space_map)) return false;
    }
    unit.push_back(n);
    if (!plan || reaches(outside_users(unit, gi, gi), gi)) return false;
    if (!epilogue_pays(n, gi, *plan) || !prologue_pays(n, gi, *plan)) return false;
    commit(n, gi, std::move(*plan));
    if (ms->size() > 1) f_.groups[gi].more_maps[n].assign(ms->begin() + 1, ms->end());
    return true;
  }

  // A reduction joining a pointwise group whose axes it reduces turns the
  // group's values into a per-element epilogue of its rows: kept only when the
  // cost model prices one kernel below the reduction and a pointwise kernel.
  bool epilogue_pays(const Node* n, int gi, const Plan& p) {
    const OpLowering& l = f_.lowerings.at(n);
    const Group& g = f_.groups[gi];
    if (l.kind != Kind::Reduction || l.full_result || g.nred != 0 || p.perm.empty()) return true;
    EpilogueCase c;
    size_t outer = p.shape.size() - p.nred;
    for (size_t a = 0; a < p.shape.size(); ++a) (a < outer ? c.rows : c.row_len) *= p.shape[a];
    std::vector<const Node*> full;  // inputs read at every point (not broadcast weights)
    int64_t space = 1;
    for (int64_t d : l.space) space *= d;
    for (const Node* in : l.inputs) {
      int64_t numel = 1;
      for (int64_t d : sizes(in)) numel *= d;
      if (numel == space) full.push_back(in);
    }
    c.in_bytes = bytes_per_point(full);
    std::vector<const Node*> stored_members;
    for (const Node* m : g.members)
      if (stored(m, gi)) stored_members.push_back(m);
    c.out_bytes = bytes_per_point(stored_members);
    c.reduce_passes = reduction_depth(l.body);
    return price_epilogue(c).fuse;
  }

  // A pointwise producer joining a reduction kernel is computed at every point
  // that reads it, in the reduction's schedule: kept only when the cost model
  // prices that below a kernel of its own whose value the reduction reads.
  bool prologue_pays(const Node* n, int gi, const Plan& p) {
    const OpLowering& l = f_.lowerings.at(n);
    if (l.kind != Kind::Pointwise || p.nred == 0) return true;
    // NOTE: a window (a pool: k*k gathered reads of one input a point) is recomputed at every
    // pass the reduction's schedule makes over its rows; stored once, each pass reads one value
    // (poolformer's `pool(x) - x` into its GroupNorm: 3.16 -> 4.74 ms on an H200, fused).
    if (reads_a_window(l)) return false;
    PrologueCase c;
    for (int64_t d : p.shape) c.points *= double(d);
    c.numel = numel(n);
    c.op_bytes = body_cost(l.body);
    c.out_bytes = elem_bytes(n);
    c.out_read_bytes = read_bytes(n, c.points);
    c.stored = stored(n, gi);
    for (const Node* in : l.inputs) {
      c.in_bytes += read_bytes(in, c.points);
      if (numel(in) == c.numel) c.in_elem_bytes += elem_bytes(in);
    }
    for (const Node* m : f_.groups[gi].members) {
      auto lit = f_.lowerings.find(m);
      if (lit == f_.lowerings.end()) continue;
      c.other_ops += body_cost(lit->second.body);
      for (const Node* in : lit->second.inputs)
        if (in != n && group(in) != gi) c.other_bytes += read_bytes(in, c.points);
    }
    return price_prologue(c).fuse;
  }

  // More than one gathered read of the same buffer a point (a pooling window), unlike a cat's
  // one read of each part.
  static bool reads_a_window(const OpLowering& l) {
    std::unordered_map<const Node*, int> gathers;  // NOTE: each Gather has its own input slot
    for (const ir::Expr& e : l.body)
      if (e.op == ir::ExprOp::Gather && ++gathers[l.inputs[e.buffer]] > 1) return true;
    return false;
  }

  static double numel(const Node* n) {
    double e = 1;
    for (int64_t d : sizes(n)) e *= double(d);
    return e;
  }

  static double elem_bytes(const Node* n) {
    auto t = n->meta ? scalar_type_of(n->meta->dtype.get()) : std::nullopt;
    return t ? ir::scalar_type_size(*t) : 4;
  }

  // Bytes a kernel of `points` points reads of `n` per point: small values are
  // read from memory once and then hit the cache; larger ones at every point.
  static double read_bytes(const Node* n, double points) {
    double footprint = numel(n) * elem_bytes(n);
    return footprint <= kCacheBytes ? footprint / points : elem_bytes(n);
  }

  // A body's compute per evaluation (loads and constants are free).
  static double body_cost(const std::vector<ir::Expr>& body) {
    double cost = 0;
    for (const ir::Expr& e : body) {
      switch (e.op) {
        case ir::ExprOp::Load:
        case ir::ExprOp::Constant:
        case ir::ExprOp::Index:
          break;
        case ir::ExprOp::Exp:
        case ir::ExprOp::Exp2:
        case ir::ExprOp::Expm1:
        case ir::ExprOp::Log:
        case ir::ExprOp::Log2:
        case ir::ExprOp::Log10:
        case ir::ExprOp::Log1p:
        case ir::ExprOp::Sin:
        case ir::ExprOp::Cos:
        case ir::ExprOp::Tan:
        case ir::ExprOp::Asin:
        case ir::ExprOp::Acos:
        case ir::ExprOp::Atan:
        case ir::ExprOp::Sinh:
        case ir::ExprOp::Cosh:
        case ir::ExprOp::Tanh:
        case ir::ExprOp::Sigmoid:
        case ir::ExprOp::Erf:
        case ir::ExprOp::Erfc:
        case ir::ExprOp::Erfinv:
        case ir::ExprOp::Pow:
        case ir::ExprOp::Atan2:
          cost += kHeavyOpBytes;
          break;
        default:
          cost += kOpBytes;
      }
    }
    return cost;
  }

  static double bytes_per_point(const std::vector<const Node*>& nodes) {
    double b = 0;
    for (const Node* n : nodes) {
      auto t = n->meta ? scalar_type_of(n->meta->dtype.get()) : std::nullopt;
      b += t ? ir::scalar_type_size(*t) : 4;
    }
    return std::max(b, 1.0);
  }

  // Passes over a row the body needs: reductions that read earlier reductions add one.
  static int reduction_depth(const std::vector<ir::Expr>& body) {
    std::vector<int> depth(body.size());
    int most = 1;
    for (size_t i = 0; i < body.size(); ++i) {
      for (int o : body[i].operands)
        if (o >= 0 && static_cast<size_t>(o) < i) depth[i] = std::max(depth[i], depth[o]);
      depth[i] += ir::is_reduction(body[i].op);
      most = std::max(most, depth[i]);
    }
    return most;
  }

  // True if every member of group `to` that reads a member of `from` can take it
  // from the merged kernel's registers: at the map `from` computes it at.
  // NOTE: a read through memory (a gather, e.g. flip, or a strided view) needs
  // the value stored by an earlier kernel, and a reduction or a value read at
  // another map would be recomputed at the wrong index; both keep the groups apart.
  bool reads_agree(int from, int to) {
    for (const Node* u : f_.groups[to].members) {
      auto lit = f_.lowerings.find(u);
      if (lit == f_.lowerings.end()) continue;  // the absorbed tuple of a getitem
      for (const Node* n : lit->second.inputs) {
        if (group(n) != from) continue;
        bool reads = false;
        auto ms = maps_from_user(n, u, f_.groups[to], &reads);
        if (!reads) continue;
        if (!ms || f_.groups[from].more_maps.count(n)) return false;
        for (const AxisMap& m : *ms)
          if (m != f_.groups[from].maps.at(n)) return false;
      }
    }
    return true;
  }

  // Horizontal fusion of two consumer groups of n (now in gi) with one layout.
  void try_merge(const Node* n, int gi, int hj) {
    Group &g = f_.groups[gi], &h = f_.groups[hj];
    if (!h.alive || g.shape != h.shape || (g.nred && h.nred && g.nred != h.nred)) return;
    auto mh = derived_map(n, hj);
    if (!mh || *mh != g.maps.at(n) || g.more_maps.count(n)) return;
    if (apart(gi, hj)) absorb(gi, hj);
  }

  // True when no path joins groups gi and hj (one kernel may compute both) and neither
  // reads the other's values where the merged kernel would not have them.
  bool apart(int gi, int hj) {
    const Group &g = f_.groups[gi], &h = f_.groups[hj];
    if (reaches(outside_users(g.members, gi, hj), hj)) return false;
    if (reaches(outside_users(h.members, gi, hj), gi)) return false;
    return reads_agree(gi, hj) && reads_agree(hj, gi);
  }

  // The storages group gi reads from memory (values no member computes) as whole operands:
  // the meta tensors they view, as torch's own aliasing says (`_base`, else the tensor
  // itself). NOTE: an operand smaller than the kernel's space (a broadcast scalar, a bias
  // row) does not count: every parameter update of a compiled optimizer step reads one
  // scalars tensor, and merging them by it made one kernel per shape instead of the grouped
  // launch (passes/group_kernels.h).
  std::vector<PyObject*> stored_roots(int gi) {
    int64_t space = 1;
    for (int64_t s : f_.groups[gi].shape) space *= s;
    std::vector<PyObject*> roots;  // NOTE: in reading order: merges must not follow addresses
    auto add_root = [&](PyObject* ex) {
      if (!ex) return;
      PyRef numel = PyRef::steal(PyObject_CallMethod(ex, "numel", nullptr));
      long long count = numel ? PyLong_AsLongLong(numel.get()) : -1;
      if (count < 0) PyErr_Clear();
      if (count < space) return;
      PyRef base = PyRef::steal(PyObject_GetAttrString(ex, "_base"));
      if (!base) {
        PyErr_Clear();
        return;
      }
      PyObject* root = base.get() == Py_None ? ex : base.get();  // the examples keep it alive
      if (std::find(roots.begin(), roots.end(), root) == roots.end()) roots.push_back(root);
    };
    for (const Node* m : f_.groups[gi].members)
      for (const Node* in : node_inputs(*m)) {
        if (group(in) == gi || !in->example) continue;
        PyObject* ex = in->example.get();
        if (PyTuple_Check(ex) || PyList_Check(ex)) {
          for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(ex); ++i)
            add_root(PySequence_Fast_GET_ITEM(ex, i));
        } else if (in->meta) {
          add_root(ex);
        }
      }
    return roots;
  }

  // The layout group gi writes: its first member read outside it (sizes and strides).
  std::optional<std::pair<std::vector<int64_t>, std::vector<int64_t>>> written_layout(int gi) {
    for (const Node* m : f_.groups[gi].members)
      if (m->meta && stored(m, gi)) return std::make_pair(m->meta->sizes, m->meta->strides);
    return std::nullopt;
  }

  // Pointwise groups of one iteration space that read one storage from memory (an extern's
  // result or a graph input, through any views) and write one layout run as one kernel, one
  // launch instead of several: swin's q * scale, k and v, sliced from one qkv product and
  // copied for bmm, were three kernels. Only groups no path joins (one would wait for the
  // other), of one segment.
  void merge_readers_of_stored_values() {
    std::vector<std::pair<PyObject*, std::vector<int>>> readers;  // root -> groups
    for (size_t gi = 0; gi < f_.groups.size(); ++gi) {
      if (!f_.groups[gi].alive || f_.groups[gi].nred) continue;
      for (PyObject* r : stored_roots(static_cast<int>(gi))) {
        auto it =
            std::find_if(readers.begin(), readers.end(), [&](auto& e) { return e.first == r; });
        if (it == readers.end()) it = readers.insert(readers.end(), {r, {}});
        it->second.push_back(static_cast<int>(gi));
      }
    }
    for (auto& [root, groups] : readers) {
      for (size_t i = 0; i < groups.size(); ++i) {
        const int gi = groups[i];
        if (!f_.groups[gi].alive) continue;
        auto layout = written_layout(gi);
        for (size_t j = i + 1; j < groups.size() && layout; ++j) {
          const int hj = groups[j];
          const Group &g = f_.groups[gi], &h = f_.groups[hj];
          if (!h.alive || h.shape != g.shape || h.segment != g.segment) continue;
          if (written_layout(hj) == layout && apart(gi, hj)) absorb(gi, hj);
        }
      }
    }
  }

  // What group gi reads that it does not compute: the groups computing those values
  // (as -1 - group) and the storages of values read from memory (stored_roots).
  std::vector<intptr_t> sources(int gi) {
    std::vector<intptr_t> out;
    for (const Node* m : f_.groups[gi].members)
      for (const Node* in : node_inputs(*m)) {
        int gin = group(in);
        if (gin < 0 || gin == gi) continue;
        intptr_t key = -1 - static_cast<intptr_t>(gin);
        if (std::find(out.begin(), out.end(), key) == out.end()) out.push_back(key);
      }
    for (PyObject* r : stored_roots(gi)) out.push_back(reinterpret_cast<intptr_t>(r));
    return out;
  }

  // Reductions of one iteration space and reduced axes that read values of one kernel or
  // one storage run as one kernel: one pass over what they share, one launch. A layer
  // norm's weight and bias gradients (column sums of the output gradient and of its product
  // with the normalized input) and the bias gradient of the linear before it were three
  // kernels each reading what the row kernel wrote. Only groups no path joins, of one segment.
  // NOTE: merges run to a fixed point, a merged group's key standing for the group it absorbed:
  // the two sums of a batch norm's backward merge (one source: the output gradient), and only
  // then do their split folds read one kernel (they were two kernels reading one).
  // A source counts with the sources of the kernel computing it (one step back): through a
  // split view a batch norm's sum(dy * (x - mean)) reads a product kernel that reads dy, and
  // its partials then join sum(dy)'s, which read dy (a layer norm's weight gradient the same
  // way, beside its bias gradient over the output gradient).
  void merge_sibling_reductions() {
    std::vector<std::vector<intptr_t>> src(f_.groups.size());
    for (size_t gi = 0; gi < f_.groups.size(); ++gi) {
      if (!f_.groups[gi].alive || !f_.groups[gi].nred) continue;
      src[gi] = sources(static_cast<int>(gi));
      for (size_t i = 0, direct = src[gi].size(); i < direct; ++i) {
        if (src[gi][i] >= 0) continue;
        for (intptr_t k : sources(static_cast<int>(-1 - src[gi][i])))
          if (std::find(src[gi].begin(), src[gi].end(), k) == src[gi].end()) src[gi].push_back(k);
      }
    }
    for (bool merged = true; merged;) {
      merged = false;
      for (size_t gi = 0; gi < f_.groups.size(); ++gi) {
        if (!f_.groups[gi].alive || !f_.groups[gi].nred) continue;
        for (size_t hj = gi + 1; hj < f_.groups.size(); ++hj) {
          const Group &g = f_.groups[gi], &h = f_.groups[hj];
          if (!h.alive || h.nred != g.nred || h.shape != g.shape || h.segment != g.segment)
            continue;
          bool shared = false;
          for (intptr_t k : src[hj])
            shared = shared || std::find(src[gi].begin(), src[gi].end(), k) != src[gi].end();
          if (!shared || !apart(static_cast<int>(gi), static_cast<int>(hj))) continue;
          absorb(static_cast<int>(gi), static_cast<int>(hj));
          merged = true;
          for (intptr_t k : src[hj])
            if (std::find(src[gi].begin(), src[gi].end(), k) == src[gi].end()) src[gi].push_back(k);
          // Readers of hj now read gi.
          const intptr_t from = -1 - static_cast<intptr_t>(hj), to = -1 - static_cast<intptr_t>(gi);
          for (auto& keys : src) {
            auto at = std::find(keys.begin(), keys.end(), from);
            if (at == keys.end()) continue;
            if (std::find(keys.begin(), keys.end(), to) == keys.end())
              *at = to;
            else
              keys.erase(at);
          }
        }
      }
    }
  }

  // Group hj's members join group gi (same shape); hj is dropped.
  void absorb(int gi, int hj) {
    Group &g = f_.groups[gi], &h = f_.groups[hj];
    for (const Node* m : h.members) {
      g.members.push_back(m);
      f_.group_of[m] = gi;
      if (h.maps.count(m)) g.maps[m] = h.maps.at(m);
      if (h.space_maps.count(m)) g.space_maps[m] = h.space_maps.at(m);
      if (h.more_maps.count(m)) g.more_maps[m] = h.more_maps.at(m);
    }
    g.nred = std::max(g.nred, h.nred);
    h.alive = false;
  }

  void new_group(const Node* n);

  void place(const Node* n) {
    auto lit = f_.lowerings.find(n);
    if (lit == f_.lowerings.end() || group(n) >= 0) return;
    std::vector<int> cands;
    bool all_in_one = true;
    for (const Node* u : info_.users_of(n)) {
      int gu = group(u);
      if (gu < 0 || f_.groups[gu].segment != info_.segment.at(n)) {
        all_in_one = false;
        continue;
      }
      if (std::find(cands.begin(), cands.end(), gu) == cands.end()) cands.push_back(gu);
    }
    if (lit->second.kind == Kind::View || lit->second.kind == Kind::StridedView) {
      // Views are only ever inlined: stored, they would copy what torch aliases.
      if (!(all_in_one && cands.size() == 1 && try_join(n, cands[0]))) f_.lowerings.erase(lit);
      return;
    }
    for (int gi : cands) {
      if (!try_join(n, gi)) continue;
      for (int hj : cands)
        if (hj != gi) try_merge(n, gi, hj);
      return;
    }
    // NOTE: a part of a tuple that no group reads can still join a sibling's consumers.
    for (const Node* s : siblings(n))
      for (const Node* u : info_.users_of(s)) {
        int gu = group(u);
        if (gu >= 0 && f_.groups[gu].segment == info_.segment.at(n) && try_join(s, gu)) return;
      }
    new_group(n);
  }

  Fusion finish();

  const ir::Graph& graph_;
  const GraphInfo& info_;
  Fusion f_;
  std::unordered_map<const Node*, const Node*> absorbed_by_;
};

void Fuser::new_group(const Node* n) {
  const OpLowering& l = f_.lowerings.at(n);
  Group g;
  g.segment = info_.segment.at(n);
  AxisMap map, sm;
  if (l.kind == Kind::Reduction) {
    sm.assign(l.space.size(), -1);
    std::vector<int> red;
    for (size_t s = 0; s < l.space.size(); ++s) {
      if (l.space[s] == 1) continue;
      if (std::count(l.reduce_dims.begin(), l.reduce_dims.end(), int(s))) {
        red.push_back(int(s));
      } else {
        sm[s] = static_cast<int>(g.shape.size());
        g.shape.push_back(l.space[s]);
      }
    }
    for (int s : red) sm[s] = static_cast<int>(g.shape.size()), g.shape.push_back(l.space[s]);
    g.nred = static_cast<int>(red.size());
    map = result_map(l, sizes(n), sm);
  } else {
    for (int64_t s : sizes(n)) {
      map.push_back(s == 1 ? -1 : static_cast<int>(g.shape.size()));
      if (s != 1) g.shape.push_back(s);
    }
  }
  f_.groups.push_back(std::move(g));
  add(n, static_cast<int>(f_.groups.size()) - 1, std::move(map), std::move(sm));
}

Fusion Fuser::finish() {
  auto pos = [&](const Node* n) { return info_.position.at(n); };
  Fusion out;
  std::vector<int> renumber(f_.groups.size(), -1);
  for (size_t i = 0; i < f_.groups.size(); ++i) {
    if (!f_.groups[i].alive) continue;
    renumber[i] = static_cast<int>(out.groups.size());
    out.groups.push_back(std::move(f_.groups[i]));
    auto& mem = out.groups.back().members;
    std::sort(mem.begin(), mem.end(),
              [&](const Node* a, const Node* b) { return pos(a) < pos(b); });
  }
  // Groups run in the order of their first member.
  std::vector<int> order(out.groups.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return pos(out.groups[a].members[0]) < pos(out.groups[b].members[0]);
  });
  std::vector<Group> sorted;
  std::vector<int> final_index(order.size());
  for (size_t i = 0; i < order.size(); ++i) final_index[order[i]] = static_cast<int>(i);
  for (int i : order) sorted.push_back(std::move(out.groups[i]));
  out.groups = std::move(sorted);
  for (auto& [n, gi] : f_.group_of) out.group_of[n] = final_index[renumber[gi]];
  for (auto& [n, l] : f_.lowerings)
    if (out.group_of.count(n)) out.lowerings.emplace(n, std::move(l));
  out.dead = std::move(f_.dead);
  return out;
}

}  // namespace

bool AxisMap::shifted() const {
  for (const AxisShift& s : shift)
    if (s.bound > 0) return true;
  return false;
}

void AxisMap::add(int a, AxisShift s) {
  push_back(a);
  if (a < 0 || s.bound <= 0) return;
  shift.resize(size() - 1);
  shift.push_back(s);
}

bool AxisMap::operator==(const AxisMap& o) const {
  if (static_cast<const std::vector<int>&>(*this) != o) return false;
  for (size_t j = 0; j < size(); ++j)
    if (!(shift_of(j) == o.shift_of(j))) return false;
  return true;
}

std::weak_ordering AxisMap::operator<=>(const AxisMap& o) const {
  const std::vector<int>& a = *this;
  const std::vector<int>& b = o;
  if (a != b) return a < b ? std::weak_ordering::less : std::weak_ordering::greater;
  for (size_t j = 0; j < size(); ++j) {
    AxisShift x = shift_of(j), y = o.shift_of(j);
    if (!(x == y)) return x < y ? std::weak_ordering::less : std::weak_ordering::greater;
  }
  return std::weak_ordering::equivalent;
}

std::optional<AxisMap> broadcast_map(const std::vector<int64_t>& from,
                                     const std::vector<int64_t>& to, const AxisMap& to_map) {
  if (from.size() > to.size()) return std::nullopt;
  size_t off = to.size() - from.size();
  AxisMap m;
  for (size_t j = 0; j < from.size(); ++j) {
    if (from[j] != 1 && from[j] != to[j + off]) return std::nullopt;
    m.add(from[j] == 1 ? -1 : to_map[j + off], to_map.shift_of(j + off));
  }
  return m;
}

std::optional<AxisMap> operand_map(const OpLowering& l, size_t i,
                                   const std::vector<int64_t>& target, const AxisMap& target_map) {
  const std::vector<int64_t>& from = l.inputs[i]->meta->sizes;
  if (i >= l.input_axes.size() || l.input_axes[i].empty())
    return broadcast_map(from, target, target_map);
  bool own = i < l.input_shifts.size() && !l.input_shifts[i].empty();
  AxisMap m;
  for (size_t j = 0; j < from.size(); ++j) {
    int a = l.input_axes[i][j];
    AxisShift s = a < 0 ? AxisShift{} : target_map.shift_of(a);
    if (own && l.input_shifts[i][j].bound > 0) {
      // NOTE: the part's own clamp is the tighter one (its coordinates are a
      // subrange of the node's), so it replaces the node's bound.
      s.offset += l.input_shifts[i][j].offset;
      s.bound = l.input_shifts[i][j].bound;
    }
    m.add(a < 0 || from[j] == 1 ? -1 : target_map[a], s);
  }
  return m;
}

AxisMap view_base_map(const OpLowering& l, const std::vector<int64_t>& base_sizes,
                      const AxisMap& map) {
  AxisMap m;
  for (size_t j = 0; j < l.base_axes.size(); ++j) {
    int a = l.base_axes[j];
    AxisShift s = a < 0 ? AxisShift{} : map.shift_of(a);
    AxisShift slice = j < l.base_shifts.size() ? l.base_shifts[j] : AxisShift{};
    if (a >= 0 && slice.bound > 0) {
      // NOTE: the reader's clamp, moved by the start, keeps every point inside the base
      // (bound <= the slice's end); the points it keeps are the slice's exactly.
      if (s.bound > 0)
        s.offset += slice.offset, s.bound += slice.offset;
      else
        s = slice;
    }
    m.add(a < 0 || base_sizes[j] == 1 ? -1 : map[a], s);
  }
  return m;
}

Fusion fuse(const ir::Graph& graph, const GraphInfo& info) { return Fuser(graph, info).run(); }

}  // namespace tl::passes
