#include "ir/effects.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

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

// NOTE: in-place operators by name (`operator.iadd`, `__iadd__`): `operator.invert` and
// `__invert__` (`~m`, transformers' masks), `__index__`, `__int__` start with an i too and write
// nothing.
bool augmented_name(const std::string& t, const std::string& last) {
  std::string name = last;
  bool dunder =
      name.size() > 4 && name.rfind("__", 0) == 0 && name.compare(name.size() - 2, 2, "__") == 0;
  if (dunder)
    name = name.substr(2, name.size() - 4);
  else if (t.rfind("operator.", 0) != 0)
    return false;
  static const char* kInPlace[] = {"iadd",      "isub", "imul", "imatmul", "itruediv",
                                   "ifloordiv", "imod", "ipow", "ilshift", "irshift",
                                   "iand",      "ior",  "ixor", "iconcat"};
  for (const char* n : kInPlace)
    if (name == n) return true;
  return false;
}

std::string last_name(const std::string& t) {
  const size_t dot = t.rfind('.');
  return dot == std::string::npos ? t : t.substr(dot + 1);
}

// `add_`, operator.iadd and the other augmented assignments (`x += y`), __iadd__, `x[i] = v`,
// a true `inplace=` flag: the node writes its first operand.
bool writes_first_operand(const Node& n) {
  const std::string& t = n.target_name;
  return in_place_name(t) || augmented_name(t, last_name(t)) || inplace_flag(n) ||
         t.find("setitem") != std::string::npos;
}

// Where the tensor an in-place node writes (an operand) comes from, followed back through
// views and in-place ops (which return their operand): a new tensor the graph made (`fresh`),
// a graph input (`input`), or neither (both unset: not known).
struct WriteTarget {
  bool fresh = false;
  const Node* input = nullptr;
  bool other_operands = false;  // some op on the way has tensor operands besides the first
};

bool has_node(const Arg& a) {
  if (a.kind == Arg::Kind::Node) return true;
  for (const Arg& item : a.items)
    if (has_node(item)) return true;
  return false;
}

WriteTarget follow_write(const Node* cur) {
  WriteTarget w;
  for (int depth = 0; cur && depth < 64; ++depth) {
    if (cur->op == OpKind::Placeholder) {
      w.input = cur;
      return w;
    }
    const std::string last = last_name(cur->target_name);
    w.fresh =
        fresh_result_name(last) || (augmented_name(cur->target_name, last) && !cur->args.empty() &&
                                    cur->args[0].kind != Arg::Kind::Node);
    if (w.fresh || cur->args.empty() || cur->args[0].kind != Arg::Kind::Node) return w;
    // NOTE: an in-place op returns its first operand whatever the others are
    if (!writes_first_operand(*cur)) {
      for (size_t i = 1; i < cur->args.size(); ++i) w.other_operands |= has_node(cur->args[i]);
      for (const auto& [k, v] : cur->kwargs) w.other_operands |= has_node(v);
    }
    cur = cur->args[0].node;
  }
  return w;
}

// Adds the storage (its StorageImpl address, `_cdata`) of every tensor in `v` (a meta
// tensor, or a tuple/list of them) to `out`. False when one cannot be read.
bool add_storages(PyObject* v, std::vector<long long>& out) {
  if (PyTuple_Check(v) || PyList_Check(v)) {
    PyRef seq = PyRef::steal(PySequence_Fast(v, "example"));
    if (!seq) return false;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq.get()); ++i)
      if (!add_storages(PySequence_Fast_GET_ITEM(seq.get(), i), out)) return false;
    return true;
  }
  if (!PyObject_HasAttrString(v, "untyped_storage")) return true;  // a number, None
  PyRef storage = PyRef::steal(PyObject_CallMethod(v, "untyped_storage", nullptr));
  PyRef cdata = storage ? PyRef::steal(PyObject_GetAttrString(storage.get(), "_cdata")) : PyRef();
  long long id = cdata ? PyLong_AsLongLong(cdata.get()) : -1;
  if (id == -1) {
    PyErr_Clear();
    return false;
  }
  out.push_back(id);
  return true;
}

// Whether `v` (a node's example) holds a tensor on `storage`; nullopt when unknown.
std::optional<bool> holds_storage(PyObject* v, long long storage) {
  std::vector<long long> ids;
  if (!v || !add_storages(v, ids)) return std::nullopt;
  return std::find(ids.begin(), ids.end(), storage) != ids.end();
}

bool const_holds_tensor(const Arg& a) {
  if (a.kind == Arg::Kind::Const)
    return a.value && !PyType_Check(a.value.get()) &&
           PyObject_HasAttrString(a.value.get(), "untyped_storage");
  for (const Arg& item : a.items)
    if (const_holds_tensor(item)) return true;
  return false;
}

void node_operands(const Arg& a, std::vector<const Node*>& out) {
  if (a.kind == Arg::Kind::Node) {
    if (a.node) out.push_back(a.node);
    return;
  }
  for (const Arg& item : a.items) node_operands(item, out);
}

// True unless `storage` (the trace-time storage of `n`'s value) was allocated by an op of the
// graph: followed back through the operands that hold the same storage (views, in-place ops,
// detach), every path must end at an op none of whose operands holds it, never at a graph
// input. Unknown examples and tensor constants count as outside.
// NOTE: the meta ops ran torch's own aliasing, so meta storages alias exactly as the real ones
// will (fast_meta answers only fresh results or the operand itself).
bool storage_reaches_input(const Node& n, long long storage, int depth) {
  if (depth > 256) return true;
  if (n.op == OpKind::Placeholder) return holds_storage(n.example.get(), storage) != false;
  std::vector<const Node*> operands;
  for (const Arg& a : n.args) {
    if (const_holds_tensor(a)) return true;
    node_operands(a, operands);
  }
  for (const auto& [k, a] : n.kwargs) {
    if (const_holds_tensor(a)) return true;
    node_operands(a, operands);
  }
  for (const Node* op : operands) {
    std::optional<bool> holds = holds_storage(op->example.get(), storage);
    if (!holds) return true;
    if (*holds && storage_reaches_input(*op, storage, depth + 1)) return true;
  }
  return false;
}

// Alias analysis on the trace-time values: true unless the tensor `written` is on a storage
// some op of the graph allocated.
bool aliases_outside_tensor(const Node& written) {
  if (!written.example || PyTuple_Check(written.example.get()) ||
      PyList_Check(written.example.get()))
    return true;
  std::vector<long long> ids;
  if (!add_storages(written.example.get(), ids) || ids.size() != 1) return true;
  return storage_reaches_input(written, ids[0], 0);
}

// True unless the tensor an in-place node writes (its first operand) is known to be a new
// tensor the graph made: followed back through views and in-place ops (which return their
// operand), it must reach an op with a fresh result before any graph input, or (any other op:
// `einsum`, an embedding) the storage it writes must be one an op of the graph allocated.
// NOTE: writing such a tensor is invisible after the graph (nothing outside holds it): if a
// later op raises, an eager rerun computes it again. T5's `buckets = 0; buckets += t; buckets
// += u` wrote only its own tensor yet broke the graph at the next embedding (effect_order), as
// did CTRL's `inputs_embeds *= c` on an embedding's result and Funnel's `attn *= mask`.
bool writes_outside_tensor(const Node& n) {
  if (n.args.empty()) return true;
  if (n.args[0].kind != Arg::Kind::Node)
    // `0 += t`: an augmented assignment to a number is a plain operation
    return !augmented_name(n.target_name, last_name(n.target_name));
  return outside_tensor(n.args[0].node);
}

const Arg* out_kwarg(const Node& n) {
  for (const auto& [k, v] : n.kwargs)
    if (k == "out" && !is_none_or_absent(&v)) return &v;
  return nullptr;
}

}  // namespace

bool outside_tensor(const Node* written) {
  if (!written) return true;
  if (follow_write(written).fresh) return false;
  return aliases_outside_tensor(*written);
}

int functional_inplace_position(const std::string& target_name) {
  static const std::pair<const char*, int> kFlags[] = {
      {"relu", 1},       {"relu6", 1},       {"hardtanh", 3},   {"elu", 2},
      {"selu", 1},       {"celu", 2},        {"leaky_relu", 2}, {"silu", 1},
      {"hardswish", 1},  {"hardsigmoid", 1}, {"mish", 1},       {"threshold", 3},
      {"_threshold", 3}, {"rrelu", 4},       {"dropout", 3},    {"alpha_dropout", 3},
      {"dropout1d", 3},  {"dropout2d", 3},   {"dropout3d", 3},  {"feature_alpha_dropout", 3}};
  const std::string prefix = "torch.nn.functional.";
  if (target_name.rfind(prefix, 0) != 0) return -1;
  const std::string base = target_name.substr(prefix.size());
  for (const auto& [name, pos] : kFlags)
    if (base == name) return pos;
  return -1;
}

bool inplace_flag(const Node& n) {
  for (const auto& [k, v] : n.kwargs)
    if (k == "inplace" && const_bool(&v) != false) return true;
  const int pos = functional_inplace_position(n.target_name);
  return pos >= 0 && static_cast<int>(n.args.size()) > pos && const_bool(&n.args[pos]) != false;
}

bool in_place_name(const std::string& target_name) {
  const std::string& t = target_name;
  if (t.rfind("operator.", 0) == 0 || t.rfind("_operator.", 0) == 0) return false;
  const size_t dot = t.rfind('.');
  const std::string last = dot == std::string::npos ? t : t.substr(dot + 1);
  return last.size() > 1 && last.back() == '_' && last[last.size() - 2] != '_';
}

bool writes_operand(const Node& n) { return writes_first_operand(n) || out_kwarg(n); }

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
  if (out_kwarg(n)) return true;  // `out=None` is the default
  if (last.find("dropout") != std::string::npos) return !is_eval_dropout(n);
  // NOTE: random draws first: `torch.zeros(n).normal_()` writes a new tensor but advances the
  // generator, which is visible.
  for (const char* word :
       {"rand", "bernoulli", "normal", "multinomial", "poisson", "uniform", "exponential", "cauchy",
        "geometric", "hook", "backward", "grad", "seed", "print"})
    if (t.find(word) != std::string::npos) return true;
  if (writes_first_operand(n)) return writes_outside_tensor(n);
  return false;
}

bool undoable_effect(const Node& n) {
  if (!visible_effect(n) || out_kwarg(n)) return false;
  const std::string& t = n.target_name;
  if (t.find("set_grad_enabled") != std::string::npos) return true;
  // NOTE: by the last name: `torch.random.manual_seed` is no draw (a seed resets generators
  // this does not snapshot), nor are hooks and backwards. An ATen overload is named by its op,
  // not its overload (`aten::bernoulli.p`: a training forward's dropout mask).
  const size_t ns = t.rfind("::");
  const std::string last =
      ns == std::string::npos ? last_name(t) : t.substr(ns + 2, t.find('.', ns + 2) - (ns + 2));
  bool dropout = last.find("dropout") != std::string::npos;
  bool draw = dropout;
  for (const char* word : {"rand", "bernoulli", "normal", "multinomial", "poisson", "uniform",
                           "exponential", "cauchy", "geometric"})
    draw = draw || last.find(word) != std::string::npos;
  for (const char* word : {"seed", "hook", "backward", "grad", "print"})
    draw = draw && t.find(word) == std::string::npos;
  if (!draw) return false;
  // F.dropout(x, p, training, inplace) may say inplace by position
  bool writes =
      writes_first_operand(n) || (dropout && n.args.size() > 3 && const_bool(&n.args[3]) != false);
  return !writes || !writes_outside_tensor(n);
}

bool lasting_effect(const Node& n) { return visible_effect(n) && !undoable_effect(n); }

bool any_visible_effect(const Graph& graph) {
  for (const auto& n : graph.nodes())
    if (visible_effect(*n)) return true;
  return false;
}

InputWrites written_inputs(const Graph& graph) {
  InputWrites out;
  // NOTE: conservative: whatever cannot be followed to one input or a new tensor is unknown.
  std::function<void(const Arg&)> add = [&](const Arg& a) {
    if (a.kind == Arg::Kind::Const) return;  // `0 += t`, a constant: no input
    for (const Arg& item : a.items) add(item);
    if (a.kind != Arg::Kind::Node) return;
    // NOTE: an op with other tensor operands on the way may return a view of one of them
    // (torch.broadcast_tensors(a + 1, b)[1]): not followed.
    WriteTarget w = follow_write(a.node);
    if (w.other_operands || (!w.fresh && !w.input))
      out.unknown = true;
    else if (w.input)
      out.placeholders.push_back(w.input);
  };
  for (const auto& n : graph.nodes()) {
    if (!visible_effect(*n)) continue;
    const std::string& t = n->target_name;
    const Arg* out_arg = out_kwarg(*n);
    bool dropout = t.find("dropout") != std::string::npos;
    // F.dropout(x, p, training, inplace) may say inplace by position
    bool first = writes_first_operand(*n) ||
                 (dropout && n->args.size() > 3 && const_bool(&n->args[3]) != false);
    if (first && !n->args.empty()) add(n->args[0]);
    if (first && n->args.empty()) out.unknown = true;
    if (out_arg) add(*out_arg);
    if (first || out_arg) continue;
    bool draws_only = dropout || t.find("set_grad_enabled") != std::string::npos;
    for (const char* word : {"rand", "bernoulli", "normal", "multinomial", "poisson", "uniform",
                             "exponential", "cauchy", "geometric"})
      draws_only = draws_only || t.find(word) != std::string::npos;
    out.unknown = out.unknown || !draws_only;
  }
  return out;
}

}  // namespace tl::ir
