#include "passes/merge_duplicates.h"

#include <string>
#include <unordered_map>
#include <vector>

#include "core/errors.h"
#include "ir/effects.h"
#include "passes/alias.h"
#include "passes/graph_info.h"
#include "passes/graph_rewrite.h"

namespace tl::passes {
namespace {

using ir::Arg;
using ir::Node;

// Constants whose repr names their value exactly, prefixed with their type:
// Python scalars and strings, tuples, lists and slices of them, and torch's
// dtype/device/layout/memory format objects. Anything else (a tensor constant, whose repr elides;
// an object with a repr of its own) makes the node no candidate.
bool append_constant(PyObject* v, std::string& key) {
  const bool plain = v == Py_None || v == Py_Ellipsis || PyBool_Check(v) || PyLong_CheckExact(v) ||
                     PyFloat_CheckExact(v) || PyUnicode_CheckExact(v);
  if (!plain) {
    if (PyTuple_CheckExact(v) || PyList_CheckExact(v)) {
      key += PyTuple_CheckExact(v) ? "(" : "[";
      PyObject* seq = v;
      const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
      for (Py_ssize_t i = 0; i < n; ++i) {
        if (!append_constant(PySequence_Fast_GET_ITEM(seq, i), key)) return false;
        key += ",";
      }
      key += PyTuple_CheckExact(v) ? ")" : "]";
      return true;
    }
    if (PySlice_Check(v)) {
      auto* sl = reinterpret_cast<PySliceObject*>(v);
      key += "slice(";
      for (PyObject* part : {sl->start, sl->stop, sl->step}) {
        if (!append_constant(part, key)) return false;
        key += ",";
      }
      key += ")";
      return true;
    }
    static const char* kTorchTypes[] = {"torch.dtype", "torch.device", "torch.layout",
                                        "torch.memory_format", "torch.Size"};
    const std::string type = Py_TYPE(v)->tp_name;
    bool known = false;
    for (const char* t : kTorchTypes) known = known || type == t;
    if (!known) return false;
  }
  PyRef r = PyRef::steal(PyObject_Repr(v));
  const char* s = r ? PyUnicode_AsUTF8(r.get()) : nullptr;
  if (!s) {
    PyErr_Clear();
    return false;
  }
  key += Py_TYPE(v)->tp_name;
  key += ":";
  key += s;
  return true;
}

bool append_arg(const Arg& a, std::string& key) {
  if (a.sym || a.fsym || a.sym_slice) return false;  // NOTE: sizes of a size-generic graph
  switch (a.kind) {
    case Arg::Kind::Node:
      key += '%';
      key += std::to_string(a.node->id);
      return true;
    case Arg::Kind::Const:
      return append_constant(a.value.get(), key);
    case Arg::Kind::Tuple:
    case Arg::Kind::List:
    case Arg::Kind::Dict:
      key += a.kind == Arg::Kind::Tuple ? "(" : a.kind == Arg::Kind::List ? "[" : "{";
      for (size_t i = 0; i < a.items.size(); ++i) {
        if (a.kind == Arg::Kind::Dict && !append_constant(a.keys[i].get(), key)) return false;
        if (!append_arg(a.items[i], key)) return false;
        key += ",";
      }
      key += a.kind == Arg::Kind::Tuple ? ")" : a.kind == Arg::Kind::List ? "]" : "}";
      return true;
  }
  return false;
}

// Draws that is_barrier does not name (it orders effects for fusion; here two
// draws must not become one): `F.rrelu` in training, `torch.randperm`, ...
bool draws(const Node& n) {
  static const char* kDraws[] = {"rrelu",       "random", "randperm",  "sample",    "gumbel",
                                 "exponential", "cauchy", "geometric", "log_normal"};
  for (const char* d : kDraws)
    if (n.target_name.find(d) != std::string::npos) return true;
  return false;
}

// The node's call as a string (target, operands by node id, constants by
// type and value); empty when it is no candidate.
std::string call_key(const Node& n) {
  // NOTE: a value with no tensor operands (an arange, a constant fill) costs nothing to compute
  // again in each kernel that reads it, while one node read at two index maps (a mask's row and
  // column aranges) is stored by a kernel of its own.
  if ((n.op != ir::OpKind::CallFunction && n.op != ir::OpKind::CallMethod) || !n.meta ||
      n.meta->requires_grad || is_barrier(n) || ir::visible_effect(n) || draws(n) ||
      node_inputs(n).empty())
    return {};
  std::string key = n.op == ir::OpKind::CallMethod ? "." : "";
  key += n.target_name;
  if (n.op == ir::OpKind::CallFunction) {
    // NOTE: the callable itself: two functions may share a name.
    key += '@';
    key += std::to_string(reinterpret_cast<uintptr_t>(n.target.get()));
  }
  key += "(";
  for (const Arg& a : n.args) {
    if (!append_arg(a, key)) return {};
    key += ",";
  }
  for (const auto& [name, a] : n.kwargs) {
    key += name;
    key += '=';
    if (!append_arg(a, key)) return {};
    key += ",";
  }
  key += ')';
  key += n.meta->str();
  for (int64_t s : n.meta->strides) {
    key += ',';
    key += std::to_string(s);
  }
  return key;
}

void collect_nodes(const Arg& a, std::vector<const Node*>& out) {
  if (a.kind == Arg::Kind::Node) out.push_back(a.node);
  for (const Arg& i : a.items) collect_nodes(i, out);
}

// Whether the graph returns `n`'s value or a view of it (torch's own aliasing
// of the trace-time values says which).
bool returned(const Node& n, const std::vector<const Node*>& outputs) {
  for (const Node* o : outputs)
    if (o == &n || alias_offset(*o, n)) return true;
  return false;
}

}  // namespace

int merge_duplicates(ir::Graph& g) {
  for (const auto& n : g.nodes())
    if (ir::writes_operand(*n)) return 0;
  std::vector<const Node*> outputs;
  if (g.output())
    for (const Arg& a : g.output()->args) collect_nodes(a, outputs);
  // NOTE: users by scan once; replaced uses are rewritten in the users' own args.
  std::unordered_map<const Node*, std::vector<Node*>> users;
  for (const auto& n : g.nodes()) {
    std::vector<const Node*> ins = node_inputs(*n);
    for (const Node* i : ins) users[i].push_back(n.get());
  }
  std::unordered_map<std::string, Node*> first;
  std::vector<const Node*> merged;
  for (const auto& up : g.nodes()) {
    Node* n = up.get();
    std::string key = call_key(*n);
    if (key.empty()) continue;
    auto [it, fresh] = first.emplace(std::move(key), n);
    if (fresh || returned(*n, outputs)) continue;
    Node* keep = it->second;
    auto& us = users[n];
    replace_uses(us, n, keep);
    auto& keep_users = users[keep];
    keep_users.insert(keep_users.end(), us.begin(), us.end());
    us.clear();
    merged.push_back(n);
  }
  for (const Node* n : merged) g.erase(n);
  return static_cast<int>(merged.size());
}

}  // namespace tl::passes
