#include "capture/fast_meta_ops.h"

#include <unordered_map>
#include <vector>

#include "capture/torch_api.h"
#include "core/errors.h"

namespace tl::capture {
namespace {

using F = OpFamily;
using P = Promotion;

struct Named {
  const char* name;
  OpRule rule;
};

OpRule r(F family, P promotion = P::Default) { return OpRule{family, promotion}; }
OpRule with(OpRule rule, bool float_only, bool tensors_only, bool no_bool, char variant = 0) {
  rule.float_only = float_only;
  rule.tensors_only = tensors_only;
  rule.no_bool = no_bool;
  rule.variant = variant;
  return rule;
}

// NOTE: every entry is checked against torch's meta kernels over dtypes,
// layouts and argument forms by tests/python/capture/test_fast_meta.py; an
// op joins this table only with that test.
const std::vector<Named>& ops() {
  static const std::vector<Named> table = [] {
    std::vector<Named> t;
    for (const char* n : {"abs", "floor", "ceil", "trunc", "sign"}) t.push_back({n, r(F::Unary)});
    t.push_back({"neg", with(r(F::Unary), false, false, true)});
    t.push_back({"relu", with(r(F::Unary), false, false, true)});
    for (const char* n : {"sin",  "cos",   "tan",   "exp",  "exp2",  "expm1",   "log",
                          "log2", "log10", "log1p", "sqrt", "rsqrt", "sigmoid", "tanh",
                          "erf",  "asin",  "acos",  "atan", "sinh",  "cosh",    "reciprocal"})
      t.push_back({n, r(F::Unary, P::IntToFloat)});
    for (const char* n : {"isnan", "isinf", "isfinite", "logical_not"})
      t.push_back({n, r(F::Unary, P::AlwaysBool)});
    for (const char* n : {"gelu", "silu", "mish", "hardswish", "hardsigmoid", "relu6"})
      t.push_back({n, with(r(F::Unary), true, false, false)});
    t.push_back({"add", with(r(F::Binary), false, false, false, 'a')});
    t.push_back({"sub", with(r(F::Binary), false, false, true, 'a')});
    t.push_back({"mul", r(F::Binary)});
    for (const char* n : {"floor_divide", "remainder"})
      t.push_back({n, with(r(F::Binary), false, false, true)});
    for (const char* n : {"maximum", "minimum"})
      t.push_back({n, with(r(F::Binary), false, true, false)});
    for (const char* n : {"div", "true_divide"}) t.push_back({n, r(F::Binary, P::IntToFloat)});
    t.push_back({"atan2", with(r(F::Binary, P::IntToFloat), false, true, false)});
    for (const char* n : {"eq", "ne", "lt", "le", "gt", "ge"})
      t.push_back({n, r(F::Binary, P::AlwaysBool)});
    for (const char* n : {"logical_and", "logical_or", "logical_xor"})
      t.push_back({n, with(r(F::Binary, P::AlwaysBool), false, true, false)});
    t.push_back({"pow", with(r(F::Binary, P::BoolToLong), true, false, false)});
    t.push_back({"where", r(F::Where, P::NoOpmath)});
    t.push_back({"masked_fill", r(F::MaskedFill, P::NoOpmath)});
    t.push_back({"clamp", with(r(F::Clamp), false, false, true, 'b')});
    t.push_back({"clamp_min", with(r(F::Clamp), false, false, true, 'l')});
    t.push_back({"clamp_max", with(r(F::Clamp), false, false, true, 'h')});
    t.push_back({"sum", with(r(F::Reduce), false, false, false, 's')});
    t.push_back({"mean", with(r(F::Reduce), true, false, false, 'm')});
    t.push_back({"amax", with(r(F::Reduce), false, false, false, 'x')});
    t.push_back({"amin", with(r(F::Reduce), false, false, false, 'n')});
    t.push_back({"softmax", with(r(F::Softmax), true, false, false, 's')});
    t.push_back({"log_softmax", with(r(F::Softmax), true, false, false, 'l')});
    t.push_back({"layer_norm", with(r(F::LayerNorm), true, false, false)});
    t.push_back({"batch_norm", r(F::BatchNorm)});
    t.push_back({"group_norm", r(F::GroupNorm)});
    t.push_back({"cat", r(F::Cat, P::NoOpmath)});
    t.push_back({"stack", r(F::Stack, P::NoOpmath)});
    t.push_back({"tril", with(r(F::Tri), false, false, false, 'l')});
    t.push_back({"triu", with(r(F::Tri), false, false, false, 'u')});
    t.push_back({"linear", with(r(F::Linear), true, false, false)});
    t.push_back({"addmm", r(F::Addmm)});
    t.push_back({"scaled_dot_product_attention", r(F::Attention)});
    t.push_back({"gather", r(F::Gather, P::NoOpmath)});
    for (Named& n : t) n.rule.name = n.name;
    return t;
  }();
  return table;
}

const OpRule* find(const char* name) {
  for (const Named& n : ops())
    if (std::string(n.name) == name) return &n.rule;
  return nullptr;
}

// Python operators and Tensor dunders that are one of the ops above.
const std::vector<std::pair<const char*, const char*>>& aliases() {
  static const std::vector<std::pair<const char*, const char*>> a = {
      {"truediv", "div"}, {"floordiv", "floor_divide"}, {"mod", "remainder"}};
  return a;
}

struct Tables {
  std::unordered_map<PyObject*, const OpRule*> functions;
  std::unordered_map<std::string, const OpRule*> methods;
  std::unordered_map<PyObject*, bool> operators;
};

void add_function(Tables& t, PyObject* module, const char* attr, const OpRule* rule,
                  bool python_operator = false) {
  PyObject* fn = PyObject_GetAttrString(module, attr);  // kept: the key must stay alive
  if (!fn) {
    clear_expected_error();
    return;
  }
  t.functions.emplace(fn, rule);
  if (python_operator) t.operators.emplace(fn, true);
}

PyRef import(const char* name) {
  PyRef m = PyRef::steal(PyImport_ImportModule(name));
  if (!m) throw PythonError();
  return m;
}

const Tables& tables() {
  // NOTE: built once under the GIL, never freed (holds references to torch's functions).
  static const Tables* tables = [] {
    auto* t = new Tables();
    const TorchApi& api = torch_api();
    PyRef functional = import("torch.nn.functional");
    PyRef nn_c = import("torch._C._nn");
    for (const Named& n : ops()) {
      const OpRule* rule = &n.rule;
      // NOTE: two signatures (batch norm), or functions only (below).
      if (rule->family == F::BatchNorm || rule->family == F::Addmm || rule->family == F::Attention)
        continue;
      bool nn_only = rule->family == F::LayerNorm || rule->family == F::Linear ||
                     rule->family == F::GroupNorm || std::string(n.name) == "relu6" ||
                     std::string(n.name) == "silu" || std::string(n.name) == "mish" ||
                     std::string(n.name) == "hardswish" || std::string(n.name) == "hardsigmoid";
      if (!nn_only && rule->family != F::Softmax) add_function(*t, api.torch.get(), n.name, rule);
      add_function(*t, functional.get(), n.name, rule);
      if (std::string(n.name) == "gelu") add_function(*t, nn_c.get(), n.name, rule);
      if (rule->family != F::Cat && rule->family != F::Stack && rule->family != F::LayerNorm &&
          !nn_only && std::string(n.name) != "gelu")
        t->methods.emplace(n.name, rule);
    }
    // F.softmax and friends take (input, dim, _stacklevel, dtype); torch.softmax
    // takes (input, dim, dtype): both are handled, the parser reads at most two
    // positionals.
    add_function(*t, api.torch.get(), "softmax", find("softmax"));
    add_function(*t, api.torch.get(), "log_softmax", find("log_softmax"));
    // NOTE: F.batch_norm takes the running statistics before weight and bias.
    static const OpRule functional_batch_norm = [] {
      OpRule r = *find("batch_norm");
      r.variant = 'f';
      return r;
    }();
    add_function(*t, api.torch.get(), "batch_norm", find("batch_norm"));
    add_function(*t, functional.get(), "batch_norm", &functional_batch_norm);
    add_function(*t, api.torch.get(), "group_norm", find("group_norm"));
    add_function(*t, api.torch.get(), "addmm", find("addmm"));
    add_function(*t, functional.get(), "scaled_dot_product_attention",
                 find("scaled_dot_product_attention"));
    add_function(*t, nn_c.get(), "scaled_dot_product_attention",
                 find("scaled_dot_product_attention"));
    PyRef op = import("operator");
    for (const char* n :
         {"add", "sub", "mul", "pow", "eq", "ne", "lt", "le", "gt", "ge", "neg", "abs"})
      add_function(*t, op.get(), n, find(n), true);
    for (auto [py, torch_name] : aliases()) add_function(*t, op.get(), py, find(torch_name), true);
    for (const char* n : {"add", "sub", "mul", "pow", "eq", "ne", "lt", "le", "gt", "ge", "neg",
                          "abs", "truediv", "floordiv", "mod"}) {
      std::string name = n;
      const OpRule* rule = find(n);
      for (auto [py, torch_name] : aliases())
        if (name == py) rule = find(torch_name);
      t->methods.emplace("__" + name + "__", rule);
      if (name != "neg" && name != "abs" && name.size() > 2 && name[0] != 'e' && name != "ne" &&
          name != "lt" && name != "le" && name != "gt" && name != "ge")
        t->methods.emplace("__r" + name + "__", rule);
    }
    return t;
  }();
  return *tables;
}

}  // namespace

const OpRule* rule_for_function(PyObject* fn) {
  const Tables& t = tables();
  auto it = t.functions.find(fn);
  return it == t.functions.end() ? nullptr : it->second;
}

const OpRule* rule_for_method(const std::string& method) {
  const Tables& t = tables();
  auto it = t.methods.find(method);
  return it == t.methods.end() ? nullptr : it->second;
}

bool is_python_operator(PyObject* fn) { return tables().operators.count(fn) > 0; }

}  // namespace tl::capture
