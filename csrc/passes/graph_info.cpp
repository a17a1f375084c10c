#include "passes/graph_info.h"

#include <algorithm>
#include <string>

#include "ir/effects.h"

namespace tl::passes {
namespace {

void collect(const ir::Arg& a, std::vector<const ir::Node*>& out) {
  if (a.kind == ir::Arg::Kind::Node) {
    if (std::find(out.begin(), out.end(), a.node) == out.end()) out.push_back(a.node);
    return;
  }
  for (const auto& it : a.items) collect(it, out);
}

bool has_kwarg(const ir::Node& n, const char* name) {
  for (const auto& kv : n.kwargs)
    if (kv.first == name) return true;
  return false;
}

}  // namespace

const std::vector<const ir::Node*>& GraphInfo::users_of(const ir::Node* n) const {
  static const std::vector<const ir::Node*> none;
  auto it = users.find(n);
  return it == users.end() ? none : it->second;
}

std::vector<const ir::Node*> node_inputs(const ir::Node& n) {
  std::vector<const ir::Node*> out;
  for (const auto& a : n.args) collect(a, out);
  for (const auto& kv : n.kwargs) collect(kv.second, out);
  return out;
}

// F.batch_norm(input, running_mean, running_var, weight, bias, training, ...): in
// inference, or in training with no running statistics to update (nf-resnet's weight
// standardization, `BatchNorm(track_running_stats=False)`), it writes nothing.
static bool batch_norm_without_effects(const ir::Node& n) {
  auto arg = [&](size_t pos, const char* name) -> const ir::Arg* {
    for (const auto& [k, v] : n.kwargs)
      if (k == name) return &v;
    return pos < n.args.size() ? &n.args[pos] : nullptr;
  };
  auto is_const = [](const ir::Arg* a, PyObject* v) {
    return a && a->kind == ir::Arg::Kind::Const && a->value.get() == v;
  };
  if (n.target_name != "torch.nn.functional.batch_norm") {
    const ir::Arg* training = arg(5, "training");
    return is_const(training, Py_False);  // torch.batch_norm: same position
  }
  const ir::Arg* training = arg(5, "training");
  if (is_const(training, Py_False)) return true;
  const ir::Arg *mean = arg(1, "running_mean"), *var = arg(2, "running_var");
  return is_const(training, Py_True) && is_const(mean, Py_None) && is_const(var, Py_None);
}

bool is_barrier(const ir::Node& n) {
  if (n.op != ir::OpKind::CallFunction && n.op != ir::OpKind::CallMethod) return false;
  const std::string& full = n.target_name;
  std::string base = full.substr(full.rfind('.') + 1);
  bool dunder = base.size() > 4 && base.rfind("__", 0) == 0;
  if (dunder) base = base.substr(2, base.size() - 4);
  if (!dunder && ir::in_place_name(full)) return true;  // add_, copy_ (not operator.and_)
  static const char* kInplaceOperators[] = {
      "iadd", "isub", "imul",    "itruediv", "ifloordiv", "imod",    "ipow",   "iand",
      "ior",  "ixor", "ilshift", "irshift",  "imatmul",   "setitem", "delitem"};
  for (const char* op : kInplaceOperators)
    if (base == op) return true;
  if (base.find("dropout") != std::string::npos && ir::is_eval_dropout(n))  // the identity
    return has_kwarg(n, "out") || ir::inplace_flag(n);
  if (base == "batch_norm") {  // training mode updates the running stats in place
    if (!batch_norm_without_effects(n)) return true;
  }
  static const char* kStateful[] = {"grad_enabled", "rand",    "bernoulli",    "normal",
                                    "multinomial",  "dropout", "seed",         "autocast",
                                    "poisson",      "uniform", "instance_norm"};
  // NOTE: F.normalize is not a draw from a normal distribution (base names, not substrings).
  for (const char* s : kStateful)
    if (full.find(s) != std::string::npos && base != "normalize") return true;
  return has_kwarg(n, "out") || ir::inplace_flag(n);
}

GraphInfo analyze_graph(const ir::Graph& graph) {
  GraphInfo info;
  int seg = 0;
  for (const auto& up : graph.nodes()) {
    const ir::Node* n = up.get();
    info.position[n] = static_cast<int>(info.position.size());
    for (const ir::Node* in : node_inputs(*n)) info.users[in].push_back(n);
    if (is_barrier(*n)) ++seg;
    info.segment[n] = seg;
  }
  return info;
}

}  // namespace tl::passes
