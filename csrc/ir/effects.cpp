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

// `x + y`, `torch.where(...)`, `torch.zeros(...)`: ops whose result is always a new tensor,
// never a view of an operand (by the target's last name, dunders and reflected forms folded).
bool fresh_result_name(std::string last) {
  if (last.size() > 4 && last.rfind("__", 0) == 0 && last.compare(last.size() - 2, 2, "__") == 0)
    last = last.substr(2, last.size() - 4);
  static const char* kFresh[] = {
      "add",       "sub",       "mul",  "div",      "truediv",   "true_divide", "floordiv",
      "mod",       "remainder", "pow",  "neg",      "abs",       "and_",        "or_",
      "xor",       "invert",    "lt",   "le",       "gt",        "ge",          "eq",
      "ne",        "matmul",    "mm",   "bmm",      "where",     "zeros_like",  "ones_like",
      "full_like", "zeros",     "ones", "full",     "arange",    "cat",         "stack",
      "clone",     "exp",       "log",  "sqrt",     "rsqrt",     "minimum",     "maximum",
      "radd",      "rsub",      "rmul", "rtruediv", "rfloordiv", "rpow",        "rmatmul",
      "ror",       "rxor"};
  for (const char* f : kFresh)
    if (last == f) return true;
  return false;
}

bool augmented_name(const std::string& t, const std::string& last) {
  return last.rfind("__i", 0) == 0 ||
         (last.size() > 2 && last[0] == 'i' && t.rfind("operator.", 0) == 0);
}

std::string last_name(const std::string& t) {
  const size_t dot = t.rfind('.');
  return dot == std::string::npos ? t : t.substr(dot + 1);
}

// True unless the tensor an in-place node writes (its first operand) is known to be a new
// tensor the graph made: followed back through views and in-place ops (which return their
// operand), it must reach an op with a fresh result before any graph input.
// NOTE: writing such a tensor is invisible after the graph (nothing outside holds it): if a
// later op raises, an eager rerun computes it again. T5's `buckets = 0; buckets += t; buckets
// += u` wrote only its own tensor yet broke the graph at the next embedding (effect_order).
bool writes_outside_tensor(const Node& n) {
  if (n.args.empty()) return true;
  if (n.args[0].kind != Arg::Kind::Node)
    // `0 += t`: an augmented assignment to a number is a plain operation
    return !augmented_name(n.target_name, last_name(n.target_name));
  const Node* cur = n.args[0].node;
  for (int depth = 0; cur && depth < 64; ++depth) {
    if (cur->op == OpKind::Placeholder) return true;
    const std::string last = last_name(cur->target_name);
    if (fresh_result_name(last)) return false;
    if (augmented_name(cur->target_name, last) && !cur->args.empty() &&
        cur->args[0].kind != Arg::Kind::Node)
      return false;
    if (cur->args.empty() || cur->args[0].kind != Arg::Kind::Node) return true;
    cur = cur->args[0].node;
  }
  return true;
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
  const std::string last = last_name(t);
  for (const auto& [k, v] : n.kwargs)
    if (k == "out" && !is_none_or_absent(&v)) return true;  // `out=None` is the default
  if (last.find("dropout") != std::string::npos) return !is_eval_dropout(n);
  // NOTE: random draws first: `torch.zeros(n).normal_()` writes a new tensor but advances the
  // generator, which is visible.
  for (const char* word :
       {"rand", "bernoulli", "normal", "multinomial", "poisson", "uniform", "exponential", "cauchy",
        "geometric", "hook", "backward", "grad", "seed", "print"})
    if (t.find(word) != std::string::npos) return true;
  // In place: `add_`, operator.iadd and the other augmented assignments (`x += y`), __iadd__,
  // `x[i] = v`, a true `inplace=` flag (nn.ReLU(inplace=False) spells out the default).
  bool inplace_flag = false;
  for (const auto& [k, v] : n.kwargs)
    if (k == "inplace" && const_bool(&v) != false) inplace_flag = true;
  if (in_place_name(t) || augmented_name(t, last) || inplace_flag ||
      t.find("setitem") != std::string::npos)
    return writes_outside_tensor(n);
  return false;
}

bool any_visible_effect(const Graph& graph) {
  for (const auto& n : graph.nodes())
    if (visible_effect(*n)) return true;
  return false;
}

}  // namespace tl::ir
