#include "ir/effects.h"

#include <optional>

namespace tl::ir {
namespace {

// The value of a constant bool argument; nullopt when absent or not a constant bool (a traced
// value or some other object: the caller assumes the effect).
std::optional<bool> const_bool(const Arg* a) {
  if (!a || a->kind != Arg::Kind::Const || !a->value || !PyBool_Check(a->value.get()))
    return std::nullopt;
  return a->value.get() == Py_True;
}

}  // namespace

bool in_place_name(const std::string& target_name) {
  const std::string& t = target_name;
  if (t.rfind("operator.", 0) == 0 || t.rfind("_operator.", 0) == 0) return false;
  const size_t dot = t.rfind('.');
  const std::string last = dot == std::string::npos ? t : t.substr(dot + 1);
  return last.size() > 1 && last.back() == '_' && last[last.size() - 2] != '_';
}

bool is_eval_dropout(const Node& n) {
  const Arg* training = n.args.size() > 2 ? &n.args[2] : nullptr;
  for (const auto& [k, v] : n.kwargs)
    if (k == "training" || k == "train") training = &v;
  return const_bool(training) == false;
}

bool visible_effect(const Node& n) {
  if (n.op != OpKind::CallFunction && n.op != OpKind::CallMethod) return false;
  const std::string& t = n.target_name;
  // NOTE: `operator.and_` (a mask's `a & b`) once counted as in place, so every transformers
  // model broke its graph at the mask's advanced index after `kwargs.pop(...)` (effect_order).
  if (in_place_name(t)) return true;
  // operator.iadd and the other augmented assignments (`x += y` on a tensor), __iadd__
  const std::string last = t.substr(t.rfind('.') == std::string::npos ? 0 : t.rfind('.') + 1);
  if (last.rfind("__i", 0) == 0 ||
      (last.size() > 2 && last[0] == 'i' && t.rfind("operator.", 0) == 0))
    return true;
  // `inplace=False` and `out=None` are the defaults spelled out (nn.ReLU(inplace=False) passes
  // its flag): only a true flag or a given out tensor writes.
  for (const auto& [k, v] : n.kwargs) {
    if (k == "inplace" && const_bool(&v) != false) return true;
    if (k == "out" && !is_none_or_absent(&v)) return true;
  }
  if (last.find("dropout") != std::string::npos) return !is_eval_dropout(n);
  for (const char* word :
       {"setitem", "rand", "bernoulli", "normal", "multinomial", "poisson", "uniform",
        "exponential", "cauchy", "geometric", "hook", "backward", "grad", "seed", "print"})
    if (t.find(word) != std::string::npos) return true;
  return false;
}

bool any_visible_effect(const Graph& graph) {
  for (const auto& n : graph.nodes())
    if (visible_effect(*n)) return true;
  return false;
}

}  // namespace tl::ir
