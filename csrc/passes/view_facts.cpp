#include "passes/view_facts.h"

#include <initializer_list>
#include <string>
#include <unordered_set>

#include "ir/effects.h"
#include "passes/alias.h"
#include "passes/graph_info.h"
#include "passes/lowering.h"

namespace tl::passes {
namespace {

bool is_one_of(const std::string& op, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (op == n) return true;
  return false;
}

bool is_view_op(const ir::Node& n) {
  const std::string name = op_base_name(n);
  // NOTE: eval-mode dropout returns its input itself (F.dropout between a linear and
  // the kernel that reads it would otherwise be called through torch on every run).
  if (name.find("dropout") != std::string::npos) return ir::is_eval_dropout(n);
  return is_one_of(name, {"view", "reshape", "flatten", "unflatten", "contiguous", "permute", "t",
                          "transpose", "unsqueeze", "squeeze", "getitem", "narrow", "select"});
}

bool is_split(const ir::Node& n) {
  return is_one_of(op_base_name(n),
                   {"split", "split_with_sizes", "chunk", "unbind", "tensor_split"});
}

// Ops whose result is a new tensor laid out as its meta value says (torch
// allocates it contiguous): the root of a view chain rewritten into offsets.
bool is_fresh_result_op(const ir::Node& n) {
  for (auto& kw : n.kwargs)
    if (kw.first == "out") return false;  // returns the tensor it was given
  return is_one_of(op_base_name(n),
                   {"addmm", "mm", "bmm", "baddbmm", "linear", "matmul", "embedding"});
}

const ir::Node* first_node_arg(const ir::Node& n) {
  return !n.args.empty() && n.args[0].kind == ir::Arg::Kind::Node ? n.args[0].node : nullptr;
}

// The tensor a view reads (for a piece of a split, the split's input), or
// null when `n` is no view torch made (per its meta value).
const ir::Node* viewed_input(const ir::Node& n) {
  const ir::Node* in = first_node_arg(n);
  if (!in || !n.meta || !is_view_op(n)) return nullptr;
  if (!in->meta && is_split(*in)) in = first_node_arg(*in);  // getitem of split's tuple
  return in && in->meta && alias_offset(n, *in) ? in : nullptr;
}

}  // namespace

void describe_views(const ir::Graph& graph, ir::Schedule& schedule) {
  GraphInfo info = analyze_graph(graph);
  auto& views = schedule.views;
  views.clear();
  for (const auto& owned : graph.nodes()) {
    const ir::Node& n = *owned;
    ir::ViewFact& f = views[&n];
    f.view_op = is_view_op(n);
    f.split = is_split(n);
    f.fresh_result = is_fresh_result_op(n);
    f.viewed = viewed_input(n);
    const auto& users = info.users_of(&n);
    f.sole_user = users.size() == 1 ? users[0] : nullptr;
  }
  // NOTE: after every node's `viewed` is known: the chain walks through them.
  for (const auto& owned : graph.nodes()) {
    const ir::Node& n = *owned;
    ir::ViewFact& f = views[&n];
    if (!f.viewed && !f.view_op) continue;
    std::unordered_set<const ir::Node*> seen;
    for (const ir::Node* a = &n;;) {
      const ir::ViewFact& fa = views.at(a);
      const ir::Node* up = fa.viewed ? fa.viewed : fa.view_op ? first_node_arg(*a) : nullptr;
      if (!up || !seen.insert(up).second) break;
      if (auto offset = alias_offset(n, *up)) f.offsets.emplace_back(up, *offset);
      a = up;
    }
  }
}

}  // namespace tl::passes
