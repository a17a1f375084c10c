#include "ir/effects.h"

namespace tl::ir {

namespace {
// The argument at `pos` or passed as `name`; null when absent.
const Arg* find_arg(const Node& n, size_t pos, const char* name) {
  if (pos < n.args.size()) return &n.args[pos];
  for (const auto& [k, v] : n.kwargs)
    if (k == name) return &v;
  return nullptr;
}

bool is_const(const Arg* a, PyObject* value) {
  return a && a->kind == Arg::Kind::Const && a->value.get() == value;
}

// NOTE: dropout in eval mode (`training=False`, what nn.Dropout passes in eval) returns its
// input: it draws no random numbers and writes nothing.
bool dropout_in_eval(const Node& n) {
  if (n.target_name.find("dropout") == std::string::npos || n.op != OpKind::CallFunction)
    return false;
  const Arg* training = find_arg(n, 2, "training");
  if (!training) training = find_arg(n, 2, "train");
  return is_const(training, Py_False);
}
}  // namespace

bool visible_effect(const Node& n) {
  if (n.op != OpKind::CallFunction && n.op != OpKind::CallMethod) return false;
  const std::string& t = n.target_name;
  // NOTE: operator.and_/or_/not_ (`a & b`, what attention masks are built with) end in '_' only
  // because their names are keywords; operator's in-place functions are the `i` ones below.
  bool from_operator = t.rfind("operator.", 0) == 0 || t.rfind("_operator.", 0) == 0;
  if (!from_operator && t.size() > 1 && t.back() == '_' && t[t.size() - 2] != '_') return true;
  // operator.iadd and the other augmented assignments (`x += y` on a tensor), __iadd__
  const std::string last = t.substr(t.rfind('.') == std::string::npos ? 0 : t.rfind('.') + 1);
  if (last.rfind("__i", 0) == 0 ||
      (last.size() > 2 && last[0] == 'i' && t.rfind("operator.", 0) == 0))
    return true;
  if (dropout_in_eval(n)) return false;
  for (const char* word :
       {"setitem", "rand", "dropout", "bernoulli", "normal", "multinomial", "poisson", "uniform",
        "exponential", "cauchy", "geometric", "hook", "backward", "grad", "seed", "print"})
    if (t.find(word) != std::string::npos) return true;
  for (const auto& [k, v] : n.kwargs)
    if ((k == "out" && !is_const(&v, Py_None)) || (k == "inplace" && !is_const(&v, Py_False)))
      return true;
  return false;
}

bool any_visible_effect(const Graph& graph) {
  for (const auto& n : graph.nodes())
    if (visible_effect(*n)) return true;
  return false;
}

}  // namespace tl::ir
