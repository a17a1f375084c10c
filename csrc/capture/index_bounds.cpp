#include "capture/index_bounds.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.h"
#include "core/python_helpers.h"
#include "ir/effects.h"

namespace tl::capture {
namespace {

// Ops taking (self, dim, index, ...) whose only check of values at run time is that every
// index lies in [-size, size) of `self.size(dim)` (the check below asks for [0, size)).
const std::unordered_set<std::string>& dim_index_ops() {
  static const std::unordered_set<std::string> names = {
      "index_copy",    "index_copy_",  "index_add",      "index_add_",
      "index_fill",    "index_fill_",  "index_select",   "index_reduce",
      "index_reduce_", "gather",       "scatter",        "scatter_",
      "scatter_add",   "scatter_add_", "scatter_reduce", "scatter_reduce_"};
  return names;
}

std::string base_name(const std::string& target_name) {
  return target_name.substr(target_name.rfind('.') + 1);
}

// An op whose result is new memory computed from its operands' values alone (no effect, no
// random draw, never its argument returned): a copy of it computes the same values, and
// nothing its result shares memory with comes from before it.
bool fresh_op(const ir::Node& n) {
  if (n.op != ir::OpKind::CallFunction && n.op != ir::OpKind::CallMethod) return false;
  for (const auto& kv : n.kwargs)
    if (kv.first == "out") return false;
  static const std::unordered_set<std::string> names = {
      "add",       "sub",       "rsub",  "mul",   "neg",    "abs",     "floor_divide",
      "floordiv",  "remainder", "mod",   "clamp", "clip",   "minimum", "maximum",
      "where",     "arange",    "zeros", "ones",  "full",   "empty",   "zeros_like",
      "ones_like", "full_like", "cat",   "stack", "cumsum", "pad",     "constant_pad_nd"};
  return names.count(base_name(n.target_name)) > 0;
}

// An op the index computation may be copied through: a fresh op, or a view or cast of its
// operand (reading the operand's memory, which the write check below covers).
bool copyable_op(const ir::Node& n) {
  if (fresh_op(n)) return true;
  if (n.op != ir::OpKind::CallFunction && n.op != ir::OpKind::CallMethod) return false;
  if (ir::visible_effect(n) || ir::writes_operand(n)) return false;
  static const std::unordered_set<std::string> names = {
      "to",     "long",      "int",     "type",      "view",       "reshape",
      "expand", "unsqueeze", "squeeze", "flatten",   "contiguous", "getitem",
      "select", "narrow",    "permute", "transpose", "clone"};
  return names.count(base_name(n.target_name)) > 0;
}

template <class F>
void for_each_node(const ir::Arg& a, const F& f) {
  if (a.kind == ir::Arg::Kind::Node && a.node) f(a.node);
  for (const ir::Arg& item : a.items) for_each_node(item, f);
}

template <class F>
void for_each_operand(const ir::Node& n, const F& f) {
  for (const ir::Arg& a : n.args) for_each_node(a, f);
  for (const auto& kv : n.kwargs) for_each_node(kv.second, f);
}

// Every node whose memory `n`'s value may share: itself and, through ops not known to make
// new memory (views, ops returning an operand, anything else), their operands' roots.
void storage_roots(const ir::Node* n, std::unordered_set<const ir::Node*>& out) {
  if (!out.insert(n).second) return;
  if (n->op == ir::OpKind::Placeholder || fresh_op(*n)) return;
  for_each_operand(*n, [&](const ir::Node* in) { storage_roots(in, out); });
}

// `a` with its symbolic sizes made plain numbers, each recorded as a relation (`expr ==
// value`): the copy runs before the nodes the symbols are read from. False for a symbolic
// slice (left to the graph break).
bool pin_sizes(CaptureContext& ctx, ir::Arg& a) {
  if (a.sym_slice) return false;
  if (a.sym) {
    ValuePtr v = Value::constant(a.value);
    v->sym = a.sym;
    ctx.specialise(v);
    a.sym = nullptr;
  }
  for (ir::Arg& item : a.items)
    if (!pin_sizes(ctx, item)) return false;
  return true;
}

ir::Arg remapped(const ir::Arg& a, const std::unordered_map<const ir::Node*, ir::Node*>& copies) {
  ir::Arg out = a;
  if (out.kind == ir::Arg::Kind::Node) {
    auto it = copies.find(out.node);
    if (it != copies.end()) out.node = it->second;
  }
  for (ir::Arg& item : out.items) item = remapped(item, copies);
  return out;
}

// What an index op checks when it runs: every value of `index` in [0, self.size(dim)), or equal
// to `ignore` (a Python int; None when no value is exempt).
struct IndexUse {
  ValuePtr self;
  int64_t dim = 0;
  ValuePtr index;
  PyRef ignore;
};

bool const_int(const ValuePtr& v) {
  return v && v->is_const() && !v->sym && PyLong_Check(v->obj.get()) && !PyBool_Check(v->obj.get());
}

std::optional<IndexUse> dim_index_use(const std::string& op, const std::vector<ValuePtr>& args,
                                      const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  if (!dim_index_ops().count(op) || !kwargs.empty() || args.size() < 3) return std::nullopt;
  const ValuePtr &self = args[0], &dim = args[1], &index = args[2];
  if (!self || !index || !self->is_tensor() || !index->is_tensor() || !index->node ||
      !const_int(dim))
    return std::nullopt;
  return IndexUse{self, PyLong_AsLongLong(dim->obj.get()), index, PyRef::borrow(Py_None)};
}

// nll_loss(input, target, weight, size_average, ignore_index, reduce, reduction) and
// cross_entropy (the same, then label_smoothing) with class-index targets: each target is a
// class of input's class dimension (1, or 0 for one unbatched row) or ignore_index. Class
// probabilities (a floating target) are not checked: left to the break.
std::optional<IndexUse> class_target_use(
    const std::string& op, const std::vector<ValuePtr>& args,
    const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  if ((op != "nll_loss" && op != "cross_entropy") || args.size() < 2) return std::nullopt;
  const ValuePtr &input = args[0], &target = args[1];
  if (!input || !target || !input->is_tensor() || !target->is_tensor() || !target->node)
    return std::nullopt;
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(target->meta.get(), "dtype"));
  PyRef floating =
      dtype ? PyRef::steal(PyObject_GetAttrString(dtype.get(), "is_floating_point")) : PyRef();
  if (!floating) throw PythonError();
  if (floating.get() != Py_False) return std::nullopt;
  ValuePtr ignore = args.size() > 4 ? args[4] : nullptr;
  static const std::unordered_set<std::string> known = {
      "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"};
  for (const auto& kv : kwargs) {
    if (!known.count(kv.first)) return std::nullopt;
    if (kv.first == "ignore_index") ignore = kv.second;
  }
  PyRef ignore_obj = ignore ? ignore->obj : PyRef::steal(PyLong_FromLong(-100));
  if (ignore && !const_int(ignore)) return std::nullopt;
  PyRef ndim = PyRef::steal(PyObject_GetAttrString(input->meta.get(), "ndim"));
  if (!ndim || !ignore_obj) throw PythonError();
  return IndexUse{input, PyLong_AsLongLong(ndim.get()) >= 2 ? 1 : 0, target, ignore_obj};
}

}  // namespace

bool is_index_bounds_check(const ir::Node& n) {
  if (n.op != ir::OpKind::CallFunction || !n.target) return false;
  return n.target.get() == python_helper("index_bounds.check").get();
}

// Whether `g` checks `index` against `size` (ignoring `ignore`) already. The op's name and
// dimension only word the IndexError, which the frame never shows (it runs eagerly instead).
static bool has_check(const ir::Graph& g, const ir::Node* index, PyObject* size, PyObject* ignore) {
  auto same = [](const ir::Arg& a, PyObject* v) {
    if (a.kind != ir::Arg::Kind::Const) return false;
    PyObject* have = a.value ? a.value.get() : Py_None;
    if (!v) v = Py_None;
    if (have == v) return true;
    if (!PyLong_CheckExact(have) || !PyLong_CheckExact(v)) return false;
    int eq = PyObject_RichCompareBool(have, v, Py_EQ);
    if (eq < 0) throw PythonError();
    return eq == 1;
  };
  for (const auto& n : g.nodes())
    if (is_index_bounds_check(*n) && n->args.size() == 5 &&
        n->args[0].kind == ir::Arg::Kind::Node && n->args[0].node == index &&
        same(n->args[1], size) && same(n->args[4], ignore))
      return true;
  return false;
}

bool check_indices_first(CaptureContext& ctx, const std::string& op,
                         const std::vector<ValuePtr>& args,
                         const std::vector<std::pair<std::string, ValuePtr>>& kwargs,
                         const ir::Node& first_effect) {
  std::optional<IndexUse> use = dim_index_use(op, args, kwargs);
  if (!use) use = class_target_use(op, args, kwargs);
  if (!use) return false;
  const ValuePtr& index = use->index;
  ir::Graph& g = ctx.graph();
  const int effect_at = first_effect.id;

  // The index computation from the first effect on (copied before it), and the values it reads
  // that exist before the effect (read in place there).
  std::vector<const ir::Node*> chain;
  std::unordered_set<const ir::Node*> seen, reads;
  bool copyable = true;
  std::function<void(const ir::Node*)> collect = [&](const ir::Node* n) {
    if (!copyable || !seen.insert(n).second) return;
    if (n->op == ir::OpKind::Placeholder || n->id < effect_at) {
      reads.insert(n);
      return;
    }
    if (!copyable_op(*n) || ir::visible_effect(*n)) {
      copyable = false;
      return;
    }
    for_each_operand(*n, collect);
    chain.push_back(n);
  };
  collect(index->node);
  if (!copyable) return false;
  std::sort(chain.begin(), chain.end(),
            [](const ir::Node* a, const ir::Node* b) { return a->id < b->id; });

  // What the copy reads must hold the same values before the effect as where the original reads
  // them: no write from the effect up to the last original read may reach its memory.
  std::unordered_set<const ir::Node*> read_roots;
  for (const ir::Node* r : reads) storage_roots(r, read_roots);
  const int read_until = chain.empty() ? static_cast<int>(g.nodes().size()) : chain.back()->id;
  for (int i = effect_at; i < read_until; ++i) {
    const ir::Node& w = *g.nodes()[i];
    if (!ir::visible_effect(w) && !ir::writes_operand(w)) continue;
    if (!ir::writes_operand(w)) {
      // NOTE: random draws, grad-mode switches and seeds write no tensor; a hook or a backward
      // may write anything.
      const std::string& t = w.target_name;
      if (t.find("hook") != std::string::npos || t.find("backward") != std::string::npos)
        return false;
      continue;
    }
    // NOTE: an in-place op, a setitem, `inplace=True` write their first operand; `out=` its own.
    std::unordered_set<const ir::Node*> written;
    auto add_roots = [&](const ir::Node* in) { storage_roots(in, written); };
    if (!w.args.empty()) for_each_node(w.args[0], add_roots);
    for (const auto& kv : w.kwargs)
      if (kv.first == "out") for_each_node(kv.second, add_roots);
    for (const ir::Node* r : written)
      if (read_roots.count(r)) return false;
  }

  // The copies' arguments, made before anything changes the graph.
  std::vector<std::vector<ir::Arg>> copy_args;
  std::vector<std::vector<std::pair<std::string, ir::Arg>>> copy_kwargs;
  for (const ir::Node* n : chain) {
    copy_args.push_back(n->args);
    copy_kwargs.push_back(n->kwargs);
    for (ir::Arg& a : copy_args.back())
      if (!pin_sizes(ctx, a)) return false;
    for (auto& kv : copy_kwargs.back())
      if (!pin_sizes(ctx, kv.second)) return false;
  }
  // NOTE: the size the indices are checked against, a plain number: a relation keeps it.
  ValuePtr size = ctx.size_value(use->self, use->dim);
  ctx.specialise(size);
  // NOTE: a check of these very indices against this size is there already (a cache layer's
  // `keys.index_copy_(2, pos, k)` then `values.index_copy_(2, pos, v)`): it decides the same,
  // before the same effects, so a second one is work on every call (a host sync on each).
  const ir::Node* before = index->node;
  if (!chain.empty()) {
    auto copied = ctx.index_copies.find(index->node);
    before = copied == ctx.index_copies.end() ? nullptr : copied->second;
  }
  if (before && has_check(g, before, size->obj.get(), use->ignore.get())) return true;

  std::unordered_map<const ir::Node*, ir::Node*> copies;
  ir::Node* effect = g.nodes()[effect_at].get();
  // NOTE: an input first read after the effect is made a placeholder there: it moves up.
  for (const ir::Node* r : reads)
    if (r->op == ir::OpKind::Placeholder && r->id > effect->id)
      ctx.move_node_before(const_cast<ir::Node*>(r), effect);
  for (size_t k = 0; k < chain.size(); ++k) {
    const ir::Node* n = chain[k];
    std::vector<ir::Arg> a;
    for (const ir::Arg& x : copy_args[k]) a.push_back(remapped(x, copies));
    std::vector<std::pair<std::string, ir::Arg>> kw;
    for (const auto& kv : copy_kwargs[k]) kw.emplace_back(kv.first, remapped(kv.second, copies));
    ir::Node* c = n->op == ir::OpKind::CallMethod
                      ? g.add_call_method(n->target_name, std::move(a), std::move(kw))
                      : g.add_call_function(n->target, std::move(a), std::move(kw));
    c->meta = n->meta;
    c->example = n->example;
    c->location = n->location;
    ctx.move_node_before(c, effect);
    copies[n] = c;
  }
  auto idx = copies.find(index->node);
  ir::Node* checked = idx == copies.end() ? index->node : idx->second;
  if (idx != copies.end()) ctx.index_copies[index->node] = idx->second;
  PyRef op_name = PyRef::steal(PyUnicode_FromString(op.c_str()));
  PyRef dim_obj = PyRef::steal(PyLong_FromLongLong(use->dim));
  if (!op_name || !dim_obj) throw PythonError();
  ir::Node* check = g.add_call_function(
      python_helper("index_bounds.check"),
      {ir::Arg::of_node(checked), ir::Arg::constant(size->obj), ir::Arg::constant(dim_obj),
       ir::Arg::constant(op_name), ir::Arg::constant(use->ignore)},
      {});
  check->location = ctx.location;
  ctx.move_node_before(check, effect);
  return true;
}

}  // namespace tl::capture
