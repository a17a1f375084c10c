#include "ir/effects.h"

namespace tl::ir {

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
  for (const char* word :
       {"setitem", "rand", "dropout", "bernoulli", "normal", "multinomial", "poisson", "uniform",
        "exponential", "cauchy", "geometric", "hook", "backward", "grad", "seed", "print"})
    if (t.find(word) != std::string::npos) return true;
  for (const auto& [k, v] : n.kwargs)
    if (k == "out" || k == "inplace") return true;
  return false;
}

bool any_visible_effect(const Graph& graph) {
  for (const auto& n : graph.nodes())
    if (visible_effect(*n)) return true;
  return false;
}

}  // namespace tl::ir
