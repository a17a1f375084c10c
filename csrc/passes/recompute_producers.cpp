#include "passes/recompute_producers.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "passes/fuse.h"
#include "passes/graph_info.h"
#include "passes/graph_rewrite.h"

namespace tl::passes {
namespace {

using Node = ir::Node;
using Kind = OpLowering::Kind;

struct Trial {
  GraphInfo info;
  Fusion fusion;
  int group(const Node* n) const {
    auto it = fusion.group_of.find(n);
    return it == fusion.group_of.end() ? -1 : it->second;
  }
};

Trial fuse_trial(const ir::Graph& g, const OnKernelDevice& on_device) {
  Trial t;
  t.info = analyze_graph(g);
  if (on_device)
    for (const auto& n : g.nodes())
      if (n->meta && !on_device(*n->meta)) t.info.off_device.insert(n.get());
  t.fusion = fuse(g, t.info);
  return t;
}

double numel(const Node* n) {
  double e = 1;
  if (n->meta)
    for (int64_t d : n->meta->sizes) e *= double(d);
  return e;
}

// A producer to copy: `members` (graph order) computed once per reading kernel; `readers`:
// per reading group, its members that read a value of `members`.
struct Unit {
  std::vector<const Node*> members;
  std::map<int, std::vector<const Node*>> readers;
};

// Adds u's readers outside `inside` to `unit`; false when a reader is no kernel member (an
// extern op, the graph's output) or lies in another segment (a barrier between them: the
// copy would read values the barrier may have changed).
bool add_readers(const Trial& t, const Node* m, const std::unordered_set<const Node*>& inside,
                 Unit& unit) {
  for (const Node* u : t.info.users_of(m)) {
    if (inside.count(u)) continue;
    int gu = t.group(u);
    if (gu < 0 || t.info.segment.at(u) != t.info.segment.at(m)) return false;
    auto& rs = unit.readers[gu];
    if (std::find(rs.begin(), rs.end(), u) == rs.end()) rs.push_back(u);
  }
  return true;
}

// A pointwise kernel read by several other kernels and cheap to recompute.
std::optional<Unit> kernel_unit(const Trial& t, int gi) {
  const Group& g = t.fusion.groups[gi];
  if (g.nred != 0 || !g.more_maps.empty()) return std::nullopt;
  double space = 1;
  for (int64_t d : g.shape) space *= double(d);
  std::unordered_set<const Node*> inside(g.members.begin(), g.members.end());
  std::set<const Node*> full_reads;
  int ops = 0;
  Unit unit;
  for (const Node* m : g.members) {
    auto l = t.fusion.lowerings.find(m);
    if (l == t.fusion.lowerings.end()) return std::nullopt;  // an absorbed tuple
    if (l->second.kind != Kind::Pointwise && l->second.kind != Kind::View) return std::nullopt;
    for (const ir::Expr& e : l->second.body) {
      if (e.op == ir::ExprOp::Gather) return std::nullopt;  // reads memory at computed offsets
      if (e.op != ir::ExprOp::Load && e.op != ir::ExprOp::Constant) ++ops;
    }
    for (const Node* in : l->second.inputs)
      if (!inside.count(in) && numel(in) >= space) full_reads.insert(in);
    if (!add_readers(t, m, inside, unit)) return std::nullopt;
    unit.members.push_back(m);
  }
  if (unit.readers.size() < 2 || ops > kRecomputeMaxOps ||
      static_cast<int>(full_reads.size()) > kRecomputeMaxReads)
    return std::nullopt;
  return unit;
}

// A view no kernel computes (fusion inlines a view only into a single reading kernel) that
// several kernels read.
std::optional<Unit> view_unit(const Trial& t, const Node* n) {
  if (n->op != ir::OpKind::CallFunction && n->op != ir::OpKind::CallMethod) return std::nullopt;
  if (t.group(n) >= 0 || t.fusion.dead.count(n) || !n->meta) return std::nullopt;
  auto l = lower_node(*n, t.info);
  if (!l || l->kind != Kind::View) return std::nullopt;
  Unit unit;
  if (!add_readers(t, n, {}, unit) || unit.readers.size() < 2) return std::nullopt;
  unit.members.push_back(n);
  return unit;
}

ir::Arg remapped(const ir::Arg& a, const std::unordered_map<const Node*, Node*>& to) {
  ir::Arg out = a;
  if (a.kind == ir::Arg::Kind::Node) {
    auto it = to.find(a.node);
    if (it != to.end()) out.node = it->second;
  }
  for (ir::Arg& i : out.items) i = remapped(i, to);
  return out;
}

// A copy of n placed before `pos`, reading the copies in `to` where n reads their originals.
Node* copy_before(ir::Graph& g, const Node& n, const Node* pos,
                  const std::unordered_map<const Node*, Node*>& to) {
  std::vector<ir::Arg> args;
  for (const ir::Arg& a : n.args) args.push_back(remapped(a, to));
  std::vector<std::pair<std::string, ir::Arg>> kwargs;
  for (const auto& [k, a] : n.kwargs) kwargs.emplace_back(k, remapped(a, to));
  Node* c = n.op == ir::OpKind::CallFunction
                ? g.add_call_function(n.target, std::move(args), std::move(kwargs))
                : g.add_call_method(n.target_name, std::move(args), std::move(kwargs));
  // NOTE: the same meta value: a copy computes the same values at the same strides.
  c->meta = n.meta;
  c->example = n.example;
  c->location = n.location;
  g.move_before(c, pos);
  return c;
}

// NOTE: by name (unique in a graph): the rewrite after the copies may replace a node, and a
// new node may take its address.
struct Copies {
  std::vector<std::pair<std::string, std::string>> made;  // copy -> original, creation order
  std::vector<std::string> originals;
};

using ByName = std::unordered_map<std::string, Node*>;

ByName by_name(const ir::Graph& g) {
  ByName out;
  for (const auto& n : g.nodes()) out[n->name] = n.get();
  return out;
}

// The group `n` is in, or (a copy made this round) is made for.
using GroupOf = std::function<int(const Node*)>;

// One copy of the unit per reading kernel, before that kernel's first reader, holding the
// members the kernel needs (those it reads and what they read of the unit). The readers are
// taken from the graph as it is now: a unit copied earlier this round (a reader of this one)
// reads it through its copies. Readers in no kernel keep reading the original.
Copies copy_unit(ir::Graph& g, const Unit& unit, const GroupOf& group_of,
                 std::unordered_map<const Node*, int>& made_for) {
  Copies out;
  for (const Node* m : unit.members) out.originals.push_back(m->name);
  auto in_unit = [&](const Node* n) {
    return std::find(unit.members.begin(), unit.members.end(), n) != unit.members.end();
  };
  std::map<int, std::vector<Node*>> readers;
  for (const Node* m : unit.members)
    for (Node* r : readers_of(g, m)) {
      int gr = in_unit(r) ? -1 : group_of(r);
      if (gr < 0) continue;
      auto& rs = readers[gr];
      if (std::find(rs.begin(), rs.end(), r) == rs.end()) rs.push_back(r);
    }
  for (const auto& [gi, rs] : readers) {
    std::unordered_set<const Node*> need;
    std::vector<const Node*> stack;
    for (const Node* r : rs)
      for (const Node* in : node_inputs(*r))
        if (in_unit(in)) stack.push_back(in);
    while (!stack.empty()) {
      const Node* m = stack.back();
      stack.pop_back();
      if (!need.insert(m).second) continue;
      for (const Node* in : node_inputs(*m))
        if (in_unit(in)) stack.push_back(in);
    }
    const Node* first = *std::min_element(rs.begin(), rs.end(), [](auto a, auto b) {
      return a->id < b->id;  // NOTE: ids are graph positions (renumbered on every move)
    });
    std::unordered_map<const Node*, Node*> to;
    for (const Node* m : unit.members) {
      if (!need.count(m)) continue;
      Node* c = copy_before(g, *m, first, to);
      to[m] = c;
      made_for[c] = gi;
      out.made.emplace_back(c->name, m->name);
    }
    for (const auto& [m, c] : to) replace_uses(rs, m, c);
  }
  return out;
}

// Puts back the originals of c's copies; a copy (or original) that the rewrite after the
// copies replaced (a reshape moved above it) stays as it is: the graph computes the same.
void undo(ir::Graph& g, const Copies& c) {
  ByName names = by_name(g);
  for (auto it = c.made.rbegin(); it != c.made.rend(); ++it) {
    auto copy = names.find(it->first), original = names.find(it->second);
    if (copy == names.end() || original == names.end()) continue;
    replace_uses(readers_of(g, copy->second), copy->second, original->second);
    g.erase(copy->second);
  }
}

// True when every copy of `c` still in the graph joined a kernel that computes a value no copy
// computes (`copies`: the names of every copy made).
bool copies_joined(const Trial& t, const Copies& c, const ByName& names,
                   const std::unordered_set<std::string>& copies) {
  for (const auto& [name, _] : c.made) {
    auto it = names.find(name);
    if (it == names.end()) continue;
    int gi = t.group(it->second);
    if (gi < 0) return false;
    const auto& members = t.fusion.groups[gi].members;
    if (std::all_of(members.begin(), members.end(),
                    [&](const Node* m) { return copies.count(m->name) > 0; }))
      return false;
  }
  return true;
}

}  // namespace

// One round: the units of one trial fusion copied, kept where the graph then fuses into fewer
// kernels.
static int copy_round(ir::Graph& graph, const OnKernelDevice& on_device,
                      const std::function<void(ir::Graph&)>& after_copies) {
  Trial before = fuse_trial(graph, on_device);
  std::vector<Unit> units;
  for (size_t gi = 0; gi < before.fusion.groups.size(); ++gi)
    if (auto u = kernel_unit(before, static_cast<int>(gi))) units.push_back(std::move(*u));
  for (const auto& n : graph.nodes())
    if (auto u = view_unit(before, n.get())) units.push_back(std::move(*u));
  if (units.empty()) return 0;
  // NOTE: readers first (latest last member first), so a producer read by a copied unit is
  // copied into the kernels its copies are made for.
  std::sort(units.begin(), units.end(), [&](const Unit& a, const Unit& b) {
    return before.info.position.at(a.members.back()) > before.info.position.at(b.members.back());
  });
  std::unordered_map<const Node*, int> made_for;
  GroupOf group_of = [&](const Node* n) {
    auto it = made_for.find(n);
    return it != made_for.end() ? it->second : before.group(n);
  };
  std::vector<Copies> copies;
  for (const Unit& u : units) copies.push_back(copy_unit(graph, u, group_of, made_for));
  std::unordered_set<std::string> copy_names;
  for (const Copies& c : copies)
    for (const auto& [name, _] : c.made) copy_names.insert(name);
  if (after_copies) after_copies(graph);
  Trial after = fuse_trial(graph, on_device);
  // NOTE: every unit is judged on this trial before any is undone. An undo erases its copies,
  // and the trial's kernels still list them: a kernel that fused the copies of two units (a
  // ReLU's gradient copied into the copies of a cast that reads it) named an erased copy when
  // the other unit was judged after the undo (a use after free: resnet50 training on the GPU
  // crashed in its backward's compile, whose split batch-norm statistics give such kernels).
  ByName names = by_name(graph);
  std::vector<char> joined;
  for (const Copies& c : copies) joined.push_back(copies_joined(after, c, names, copy_names));
  bool undone = false;
  for (size_t i = copies.size(); i-- > 0;)
    if (!joined[i]) {
      undo(graph, copies[i]);
      copies[i].made.clear();
      undone = true;
    }
  if (undone) after = fuse_trial(graph, on_device);
  if (after.fusion.groups.size() >= before.fusion.groups.size()) {
    for (auto it = copies.rbegin(); it != copies.rend(); ++it) undo(graph, *it);
    return 0;
  }
  int count = 0;
  for (const Copies& c : copies) {
    if (c.made.empty()) continue;
    ++count;
    for (auto it = c.originals.rbegin(); it != c.originals.rend(); ++it) {
      ByName now = by_name(graph);
      auto n = now.find(*it);
      if (n != now.end() && readers_of(graph, n->second).empty()) graph.erase(n->second);
    }
  }
  return count;
}

int recompute_producers(ir::Graph& graph, const OnKernelDevice& on_device,
                        const std::function<void(ir::Graph&)>& after_copies) {
  // NOTE: a producer whose only reader was a copied unit (a ReLU's gradient read through a
  // same-dtype cast, a view) has several reading kernels only once that unit is copied.
  int total = 0;
  for (int round = 0; round < kRecomputeRounds; ++round) {
    int n = copy_round(graph, on_device, after_copies);
    if (n == 0) break;
    total += n;
  }
  return total;
}

}  // namespace tl::passes
