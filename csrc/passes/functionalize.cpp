#include "passes/functionalize.h"

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/errors.h"
#include "ir/effects.h"
#include "passes/graph_rewrite.h"

namespace tl::passes {
namespace {

using ir::Arg;
using ir::Node;

// How one in-place node turns out-of-place; the mutated tensor is args[0].
struct Rewrite {
  PyRef target;        // call_function: the out-of-place callable
  std::string method;  // call_method: the out-of-place method
  bool drop_inplace_kwarg = false;
  int inplace_pos = -1;  // with drop_inplace_kwarg: the positional flag, made False
};

bool is_true(const Arg& a) { return a.kind == Arg::Kind::Const && a.value.get() == Py_True; }

PyRef attr_of(PyObject* owner, const std::string& name) {
  PyRef r = PyRef::steal(PyObject_GetAttrString(owner, name.c_str()));
  if (!r) PyErr_Clear();
  return r;
}

// operator.iadd -> operator.add and the other augmented assignments.
std::optional<Rewrite> operator_rewrite(const Node& n) {
  if (n.op != ir::OpKind::CallFunction) return std::nullopt;
  static const std::unordered_map<std::string, const char*> kOperators = {
      {"operator.iadd", "add"},
      {"operator.isub", "sub"},
      {"operator.imul", "mul"},
      {"operator.itruediv", "truediv"},
      {"operator.ifloordiv", "floordiv"},
      {"operator.imod", "mod"},
      {"operator.ipow", "pow"},
      {"operator.iand", "and_"},
      {"operator.ior", "or_"},
      {"operator.ixor", "xor"}};
  auto it = kOperators.find(n.target_name);
  if (it == kOperators.end()) return std::nullopt;
  PyRef op = PyRef::steal(PyImport_ImportModule("operator"));
  if (!op) throw PythonError();
  PyRef fn = attr_of(op.get(), it->second);
  if (!fn) return std::nullopt;
  return Rewrite{fn, "", false};
}

std::optional<Rewrite> rewrite_for(const Node& n) {
  if (n.args.empty() || n.args[0].kind != Arg::Kind::Node) return std::nullopt;
  const std::string& t = n.target_name;
  if (n.op == ir::OpKind::CallMethod) {
    // x.add_(y) -> x.add(y): only where Tensor has the out-of-place method.
    if (t.size() < 3 || t.back() != '_' || t.front() == '_') return std::nullopt;
    std::string base = t.substr(0, t.size() - 1);
    static const char* kSkip[] = {"copy",       "zero",           "fill",         "set",
                                  "resize",     "requires_grad",  "uniform",      "normal",
                                  "bernoulli",  "random",         "exponential",  "cauchy",
                                  "geometric",  "log_normal",     "index_put",    "put",
                                  "scatter",    "scatter_add",    "index_add",    "index_copy",
                                  "index_fill", "masked_scatter", "share_memory", "detach",
                                  "unsqueeze",  "squeeze",        "transpose",    "t",
                                  "as_strided", "swapdims",       "swapaxes"};
    for (const char* s : kSkip)
      if (base == s) return std::nullopt;
    PyRef tensor_type = torch_fn("Tensor");
    if (!attr_of(tensor_type.get(), base)) return std::nullopt;
    return Rewrite{{}, base, false};
  }
  if (n.op != ir::OpKind::CallFunction) return std::nullopt;
  if (auto r = operator_rewrite(n)) return r;
  // torch.nn.functional activations whose `inplace` flag only picks where the result is
  // written, by keyword or at its position (nn.Hardswish: `F.hardswish(input, self.inplace)`).
  if (int pos = ir::functional_inplace_position(t); pos >= 0) {
    bool inplace = static_cast<int>(n.args.size()) > pos && is_true(n.args[pos]);
    for (const auto& [k, v] : n.kwargs) inplace |= k == "inplace" && is_true(v);
    if (!inplace) return std::nullopt;
    return Rewrite{n.target, "", true, pos};
  }
  // torch.relu_(x) -> torch.relu(x)
  const std::string prefix = "torch.";
  if (t.rfind(prefix, 0) == 0 && t.back() == '_' &&
      t.find('.', prefix.size()) == std::string::npos) {
    std::string base = t.substr(prefix.size(), t.size() - prefix.size() - 1);
    PyRef torch_mod = PyRef::steal(PyImport_ImportModule("torch"));
    if (!torch_mod) throw PythonError();
    PyRef out_of_place = attr_of(torch_mod.get(), base);
    if (!out_of_place || base == "copy" || base == "zero" || base == "fill") return std::nullopt;
    return Rewrite{out_of_place, "", false};
  }
  return std::nullopt;
}

// The storage a node's example tensor lives in, or 0 when it is not a tensor.
uintptr_t storage_of(const Node& n) {
  if (!n.meta || !n.example) return 0;
  PyRef s = PyRef::steal(PyObject_CallMethod(n.example.get(), "untyped_storage", nullptr));
  PyRef c = s ? PyRef::steal(PyObject_GetAttrString(s.get(), "_cdata")) : PyRef();
  uintptr_t id = c ? static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(c.get())) : 0;
  if (PyErr_Occurred()) PyErr_Clear(), id = 0;
  return id;
}

void redirect(Arg& a, const std::unordered_map<const Node*, bool>& group, Node* latest) {
  if (a.kind == Arg::Kind::Node) {
    if (group.count(a.node)) a.node = latest;
    return;
  }
  for (auto& it : a.items) redirect(it, group, latest);
}

void apply(Node& n, const Rewrite& r) {
  if (r.method.empty()) {
    n.target = r.target;
    n.target_name = ir::callable_name(r.target.get());
  } else {
    n.target_name = r.method;
  }
  if (r.drop_inplace_kwarg) {
    for (auto it = n.kwargs.begin(); it != n.kwargs.end();)
      it = it->first == "inplace" ? n.kwargs.erase(it) : it + 1;
    if (r.inplace_pos >= 0 && static_cast<int>(n.args.size()) > r.inplace_pos)
      n.args[r.inplace_pos] = Arg::constant(PyRef::borrow(Py_False));
  }
}

// The example of an in-place activation made out-of-place, without a meta
// run, when torch's rule gives it: a unary float op keeps its dense operand's
// dtype and layout (TensorIterator follows the input's strides). Null otherwise.
PyRef dense_activation_result(const Node& m, const Rewrite& r) {
  if (!r.drop_inplace_kwarg || m.target_name.find("dropout") != std::string::npos) return {};
  const Node* in = m.args[0].node;
  if (!in->meta || !in->example) return {};
  for (size_t i = 1; i < m.args.size(); ++i)
    if (m.args[i].kind != Arg::Kind::Const) return {};
  for (const auto& kv : m.kwargs)
    if (kv.second.kind != Arg::Kind::Const) return {};
  const ir::TensorMeta& t = *in->meta;
  bool dense = t.strides == contiguous_strides(t.sizes) ||
               (t.sizes.size() == 4 && t.strides == channels_last_strides(t.sizes));
  PyRef is_float = PyRef::steal(PyObject_GetAttrString(t.dtype.get(), "is_floating_point"));
  if (!is_float) throw PythonError();
  if (!dense || is_float.get() != Py_True) return {};
  PyRef empty_like = torch_fn("empty_like");
  PyRef ex = PyRef::steal(PyObject_CallOneArg(empty_like.get(), in->example.get()));
  if (!ex) throw PythonError();
  return ex;
}

bool same_meta(const ir::TensorMeta& a, const ir::TensorMeta& b) {
  if (a.sizes != b.sizes || a.dtype.get() != b.dtype.get()) return false;
  for (size_t d = 0; d < a.sizes.size(); ++d)
    if (a.sizes[d] > 1 && a.strides[d] != b.strides[d]) return false;
  return true;
}

}  // namespace

int functionalize(ir::Graph& graph) {
  int rewritten = 0;
  // NOTE: `acc = 0; acc += t` (T5's relative position buckets): a Python number cannot be
  // changed in place, so this is `0 + t`, a new tensor no one else sees.
  for (auto& up : graph.nodes()) {
    Node& n = *up;
    if (n.args.size() != 2 || n.args[0].kind != Arg::Kind::Const) continue;
    PyObject* lhs = n.args[0].value.get();
    if (!PyLong_Check(lhs) && !PyFloat_Check(lhs) && !PyBool_Check(lhs)) continue;
    if (auto r = operator_rewrite(n)) {
      apply(n, *r);
      ++rewritten;
    }
  }
  // Nodes by the storage of their example: an in-place op's result shares
  // its operand's storage, and so does every view of either.
  std::unordered_map<uintptr_t, std::vector<Node*>> by_storage;
  std::unordered_map<const Node*, uintptr_t> storage;
  for (auto& up : graph.nodes()) {
    uintptr_t s = storage_of(*up);
    if (!s) continue;
    storage[up.get()] = s;
    by_storage[s].push_back(up.get());
  }
  for (auto& [s, members] : by_storage) {
    if (members.size() < 2) continue;
    // The group's first member made the storage; every later one must be an
    // in-place op on the group, or the mutation is visible elsewhere.
    Node* base = members.front();
    if (base->op != ir::OpKind::CallFunction && base->op != ir::OpKind::CallMethod) continue;
    std::unordered_map<const Node*, bool> group;
    std::vector<std::pair<Node*, Rewrite>> ops;
    bool ok = true;
    for (Node* m : members) {
      group[m] = true;
      if (m == base) continue;
      std::optional<Rewrite> r = rewrite_for(*m);
      if (!r || !group.count(m->args[0].node)) {
        ok = false;
        break;
      }
      ops.emplace_back(m, std::move(*r));
    }
    if (!ok || ops.empty()) continue;
    // The out-of-place result must look exactly like the in-place one
    // (dtype: `half += float` stays half; strides: the operand's). Checked on
    // a copy of each node before the graph changes; its result becomes the
    // node's example. NOTE: not run again after the rewrite: every operand it
    // is redirected to has the metadata of the one the trial read (in-place
    // results are their operand), and meta runs of decomposed ops (relu goes
    // through torch._refs) cost ~8 ms each on a cold process.
    std::vector<PyRef> examples;
    for (auto& [m, r] : ops) {
      Node trial = *m;
      apply(trial, r);
      PyRef ex = dense_activation_result(trial, r);
      if (!ex) ex = run_on_examples(trial, {});
      ok = ok && ex && m->meta &&
           same_meta(meta_of(ex.get(), m->meta->device, m->meta->requires_grad), *m->meta);
      if (!ok) break;
      examples.push_back(std::move(ex));
    }
    if (!ok) continue;
    // Every later read of a group member reads the newest version.
    Node* latest = base;
    size_t next = 0;
    bool started = false;
    for (auto& up : graph.nodes()) {
      Node* n = up.get();
      if (n == base) {
        started = true;
        continue;
      }
      if (!started) continue;
      for (auto& a : n->args) redirect(a, group, latest);
      for (auto& kv : n->kwargs) redirect(kv.second, group, latest);
      if (next < ops.size() && ops[next].first == n) {
        apply(*n, ops[next].second);
        n->example = std::move(examples[next++]);
        latest = n;
      }
    }
    rewritten += static_cast<int>(ops.size());
  }
  return rewritten;
}

}  // namespace tl::passes
