#include "passes/move_reshapes.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/errors.h"
#include "passes/graph_info.h"
#include "passes/graph_rewrite.h"
#include "passes/lowering.h"

namespace tl::passes {
namespace {

using ir::Arg;
using ir::Node;

int64_t numel(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}

// The same strides on every axis of more than one element (sizes equal).
bool same_layout(const ir::TensorMeta& a, const ir::TensorMeta& b) {
  if (a.sizes != b.sizes || a.strides.size() != b.strides.size()) return false;
  for (size_t i = 0; i < a.sizes.size(); ++i)
    if (a.sizes[i] != 1 && a.strides[i] != b.strides[i]) return false;
  return true;
}

std::vector<int64_t> without_ones(const std::vector<int64_t>& v) {
  std::vector<int64_t> out;
  for (int64_t x : v)
    if (x != 1) out.push_back(x);
  return out;
}

std::vector<int64_t> without_leading_ones(const std::vector<int64_t>& v) {
  size_t k = 0;
  while (k < v.size() && v[k] == 1) ++k;
  return {v.begin() + static_cast<std::ptrdiff_t>(k), v.end()};
}

// A reshape of a contiguous base to contiguous sizes with the same elements
// in the same order: the base node, else null.
const Node* reshape_base(const Node& r) {
  static const std::unordered_set<std::string> kNames = {
      "view", "reshape", "flatten", "unflatten", "view_as", "reshape_as", "_unsafe_view"};
  if (r.op != ir::OpKind::CallFunction && r.op != ir::OpKind::CallMethod) return nullptr;
  if (!r.meta || r.args.empty() || !kNames.count(op_base_name(r))) return nullptr;
  const Arg& a = r.args[0];
  if (a.kind != Arg::Kind::Node || !a.node->meta) return nullptr;
  const ir::TensorMeta &m = *r.meta, &b = *a.node->meta;
  if (m.dtype.get() != b.dtype.get() || numel(m.sizes) != numel(b.sizes) || numel(m.sizes) == 0)
    return nullptr;  // NOTE: view(dtype) reinterprets bits
  if (!contiguous(m) || !contiguous(b)) return nullptr;
  return a.node;
}

// An int or a sequence of ints (a constant or a tuple/list of constants).
std::optional<std::vector<int64_t>> int_list(const Arg& a) {
  auto one = [](PyObject* v) -> std::optional<int64_t> {
    if (!v || !PyLong_Check(v) || PyBool_Check(v)) return std::nullopt;
    return PyLong_AsLongLong(v);
  };
  std::vector<int64_t> out;
  if (a.kind == Arg::Kind::Tuple || a.kind == Arg::Kind::List) {
    for (const Arg& it : a.items) {
      auto v = it.kind == Arg::Kind::Const ? one(it.value.get()) : std::nullopt;
      if (!v) return std::nullopt;
      out.push_back(*v);
    }
    return out;
  }
  if (a.kind != Arg::Kind::Const) return std::nullopt;
  PyObject* v = a.value.get();
  if (PyTuple_Check(v) || PyList_Check(v)) {
    for (Py_ssize_t i = 0; i < PySequence_Size(v); ++i) {
      PyRef it = PyRef::steal(PySequence_GetItem(v, i));
      auto x = one(it.get());
      if (!x) return std::nullopt;
      out.push_back(*x);
    }
    return out;
  }
  auto x = one(v);
  if (!x) return std::nullopt;
  return std::vector<int64_t>{*x};
}

Arg int_tuple(const std::vector<int64_t>& v) {
  std::vector<Arg> items;
  for (int64_t x : v) {
    PyRef i = PyRef::steal(PyLong_FromLongLong(x));
    if (!i) throw PythonError();
    items.push_back(Arg::constant(std::move(i)));
  }
  return Arg::tuple(std::move(items));
}

// Walks the runs of axes whose sizes multiply to the same count in `from` and its reshape
// `to`, calling `run(i0, i, j0, j)` with each run's axes [i0, i) of `from` and [j0, j) of `to`;
// false when the sizes do not split into such runs or `run` returns false.
template <typename Run>
bool for_each_matching_run(const std::vector<int64_t>& from, const std::vector<int64_t>& to,
                           Run&& run) {
  size_t i = 0, j = 0;
  while (i < from.size() || j < to.size()) {
    const size_t i0 = i, j0 = j;
    int64_t pf = 1, pt = 1;
    if (i < from.size()) pf *= from[i++];
    if (j < to.size()) pt *= to[j++];
    while (pf != pt) {
      if (pf < pt) {
        if (i >= from.size()) return false;
        pf *= from[i++];
      } else {
        if (j >= to.size()) return false;
        pt *= to[j++];
      }
    }
    if (!run(i0, i, j0, j)) return false;
  }
  return true;
}

// The sizes an operand of sizes `a`, broadcast (right-aligned) to `from`,
// takes when `from` is reshaped to `to`: per run of axes whose sizes multiply
// to the same count on both sides, the operand's axes there are all full
// (then `to`'s sizes) or all broadcast (then 1s). nullopt for any other.
std::optional<std::vector<int64_t>> operand_sizes(const std::vector<int64_t>& a,
                                                  const std::vector<int64_t>& from,
                                                  const std::vector<int64_t>& to) {
  if (a.size() > from.size()) return std::nullopt;
  std::vector<int64_t> pa(from.size() - a.size(), 1);
  pa.insert(pa.end(), a.begin(), a.end());
  std::vector<int64_t> out;
  bool ok = for_each_matching_run(from, to, [&](size_t i0, size_t i, size_t j0, size_t j) {
    bool full = true, ones = true;
    for (size_t k = i0; k < i; ++k) {
      full = full && pa[k] == from[k];
      ones = ones && pa[k] == 1;
    }
    if (!full && !ones) return false;
    for (size_t k = j0; k < j; ++k) out.push_back(full ? to[k] : 1);
    return true;
  });
  if (!ok) return std::nullopt;
  return out;
}

// The axes of contiguous `from` that a reduction over axes `dims` of its reshape `to` covers:
// per run of axes whose sizes multiply to the same count on both sides, the run's axes of
// `to` (size-1 ones aside) are all reduced (then so are `from`'s) or none are. nullopt for
// any other, or when no axis of `from` is reduced.
std::optional<std::vector<int64_t>> reduced_base_axes(const std::vector<int64_t>& from,
                                                      const std::vector<int64_t>& to,
                                                      const std::vector<int64_t>& dims) {
  std::vector<bool> reduced(to.size(), false);
  for (int64_t d : dims) {
    if (d < 0) d += static_cast<int64_t>(to.size());
    if (d < 0 || d >= static_cast<int64_t>(to.size())) return std::nullopt;
    reduced[d] = true;
  }
  std::vector<int64_t> out;
  bool ok = for_each_matching_run(from, to, [&](size_t i0, size_t i, size_t j0, size_t j) {
    bool any = false, all = true;
    for (size_t k = j0; k < j; ++k) {
      if (to[k] == 1) continue;
      any = any || reduced[k];
      all = all && reduced[k];
    }
    if (any && !all) return false;
    if (any)
      for (size_t k = i0; k < i; ++k)
        if (from[k] != 1) out.push_back(static_cast<int64_t>(k));
    return true;
  });
  if (!ok || out.empty()) return std::nullopt;
  return out;
}

// Pointwise with operands broadcast right-aligned, and a value per element
// that does not depend on the element's coordinates (no arange-like index,
// no gather): what a reshape commutes with.
// A conversion that is its input as it is (`.to` its own dtype) counts too.
bool plain_pointwise(const Node& p, const GraphInfo& info) {
  std::optional<OpLowering> l = lower_node(p, info);
  // NOTE: only dtype conversions: a view op with sizes among its arguments (an
  // expand to its own sizes) would be rebuilt with the old sizes.
  static const std::unordered_set<std::string> kConversions = {
      "to", "type", "type_as", "float", "double", "half", "bfloat16", "contiguous"};
  if (l && l->kind == OpLowering::Kind::View && l->inputs.size() == 1 &&
      kConversions.count(op_base_name(p)) && l->inputs[0]->meta->sizes == p.meta->sizes &&
      l->inputs[0]->meta->dtype.get() == p.meta->dtype.get()) {
    for (size_t j = 0; j < l->base_axes.size(); ++j)
      if (l->base_axes[j] != static_cast<int>(j) && p.meta->sizes[j] != 1) return false;
    return true;
  }
  if (!l || l->kind != OpLowering::Kind::Pointwise) return false;
  for (const auto& axes : l->input_axes)
    if (!axes.empty()) return false;
  for (const auto& shifts : l->input_shifts)
    if (!shifts.empty()) return false;
  for (const ir::Expr& e : l->body)
    if (e.op == ir::ExprOp::Index || e.op == ir::ExprOp::Gather || e.op == ir::ExprOp::CheckIndex)
      return false;
  return true;
}

class Mover {
 public:
  Mover(ir::Graph& g, int64_t saved_outputs_from) : g_(g), saved_from_(saved_outputs_from) {}

  int run() {
    int count = 0;
    for (bool changed = true; changed;) {
      changed = false;
      GraphInfo info = analyze_graph(g_);
      touched_.clear();
      std::vector<Node*> nodes;
      // NOTE: consumers first, so a reshape pair around a pointwise op collapses
      // before the inner one moves up on its own.
      for (auto it = g_.nodes().rbegin(); it != g_.nodes().rend(); ++it) nodes.push_back(it->get());
      for (Node* r : nodes) {
        // NOTE: `info` holds for the nodes no rewrite of this round touched (an
        // erased node's address may be reused by a new node: touched as well).
        if (touched_.count(r) || rejected_.count(r->name)) continue;
        stale_ = false;
        if (rewrite(r, info)) {
          ++count;
          changed = true;
        } else if (!stale_) {
          rejected_.insert(r->name);
        }
      }
    }
    return count;
  }

 private:
  // False, and `stale_` set, when `n` changed in this round: try again in the next.
  bool fresh(const Node* n) {
    if (touched_.count(n)) stale_ = true;
    return !stale_;
  }

  std::vector<Node*> users(const Node* n, const GraphInfo& info) const {
    std::vector<Node*> out;
    for (const Node* u : info.users_of(n))
      if (std::find(out.begin(), out.end(), u) == out.end()) out.push_back(const_cast<Node*>(u));
    return out;
  }

  void replace(Node* r, Node* with, const GraphInfo& info) {
    replace_uses(users(r, info), r, with);
    g_.erase(r);
  }

  bool rewrite(Node* r, const GraphInfo& info) {
    const Node* base = reshape_base(*r);
    if (!base || !fresh(base)) return false;
    touched_.insert(r);  // NOTE: whatever happens now, r is looked at again next round
    touched_.insert(base);
    const std::vector<int64_t>& to = r->meta->sizes;
    // A reshape to its base's sizes: the base (not where the graph returns the
    // reshape: a caller may tell a view from its base).
    if (to == base->meta->sizes) {
      for (const Node* u : info.users_of(r))
        if (u->op == ir::OpKind::Output) return untouch(r, base);
      replace(r, const_cast<Node*>(base), info);
      return true;
    }
    // A reshape of a reshape of a contiguous value: one reshape of that value.
    if (const Node* inner = reshape_base(*base)) {
      Node* one =
          insert_call(g_, r, PyRef(), "reshape",
                      {Arg::of_node(const_cast<Node*>(inner)), int_tuple(to)}, {}, r->meta->device);
      touched_.insert(one);
      touched_.insert(inner);
      replace(r, one, info);
      const auto& bu = info.users_of(base);
      if (std::all_of(bu.begin(), bu.end(), [&](const Node* u) { return u == r; })) g_.erase(base);
      return true;
    }
    // NOTE: a reshape that only inserts or drops size-1 axes fuses as it is.
    if (without_ones(to) == without_ones(base->meta->sizes)) return untouch(r, base);
    if (hoist(r, base, info)) return true;
    // NOTE: below, the reshape moves toward its readers instead; only for a value a kernel
    // computes (one read from memory fuses with nothing anyway) and only once hoisting failed,
    // so the two never undo each other.
    if (!in_memory(base, info) && (sink_sums(r, base, info) || sink(r, base, info))) return true;
    return untouch(r, base);
  }

  static bool read_by_output(const Node* n, const GraphInfo& info) {
    for (const Node* u : info.users_of(n))
      if (u->op == ir::OpKind::Output) return true;
    return false;
  }

  // True when the graph returns `n` to its caller (not only as a value saved for backward,
  // which only the backward half reads: a view there is as good as its base).
  bool returned_to_caller(const Node* n, const GraphInfo& info) const {
    for (const Node* u : info.users_of(n)) {
      if (u->op != ir::OpKind::Output) continue;
      if (saved_from_ < 0) return true;
      for (size_t i = 0; i < u->args.size(); ++i) {
        bool reads = false;
        for (const Node* x : node_inputs_of(u->args[i])) reads = reads || x == n;
        if (reads && static_cast<int64_t>(i) < saved_from_) return true;
      }
    }
    return false;
  }

  // sum(reshape(b), dims) -> reshape(sum(b, dims of b)) where the reduced axes are whole runs
  // of b's axes: a bias gradient `grad.view(-1, C).sum(0)` reduces the value the kernel before
  // the reshape computes, so the sum fuses with it (or with other sums over it) instead of
  // reading it back from memory through the reshape.
  bool sink_sums(Node* r, const Node* base, const GraphInfo& info) {
    bool any = false;
    std::unordered_set<const Node*> replaced;
    for (Node* u : users(r, info)) {
      if (op_base_name(*u) != "sum" || !u->meta || u->args.empty() ||
          u->args[0].kind != Arg::Kind::Node || u->args[0].node != r ||
          info.segment.at(u) != info.segment.at(r) || read_by_output(u, info) || !fresh(u))
        continue;
      if (u->op != ir::OpKind::CallFunction && u->op != ir::OpKind::CallMethod) continue;
      const Arg* dim = find_arg(*u, 1, "dim");
      const Arg* keepdim = find_arg(*u, 2, "keepdim");
      const Arg* dtype = find_arg(*u, 3, "dtype");
      if (!dim || dim->kind == Arg::Kind::Node) continue;
      if (keepdim && (keepdim->kind != Arg::Kind::Const || !PyBool_Check(keepdim->value.get())))
        continue;
      if (dtype && dtype->kind == Arg::Kind::Node) continue;
      const size_t known = 2 + (keepdim != nullptr) + (dtype != nullptr);
      if (u->args.size() + u->kwargs.size() > known) continue;  // NOTE: an `out=` or unknown
      auto dims = int_list(*dim);
      if (!dims) continue;
      auto base_dims = reduced_base_axes(base->meta->sizes, r->meta->sizes, *dims);
      if (!base_dims) continue;
      std::vector<std::pair<std::string, Arg>> kwargs;
      if (dtype) kwargs.emplace_back("dtype", *dtype);
      PyRef no = PyRef::borrow(Py_False);
      Node* s = insert_call(
          g_, u, torch_fn("sum"), "",
          {Arg::of_node(const_cast<Node*>(base)), int_tuple(*base_dims), Arg::constant(no)},
          std::move(kwargs), u->meta->device);
      if (numel(s->meta->sizes) != numel(u->meta->sizes) ||
          s->meta->dtype.get() != u->meta->dtype.get()) {
        g_.erase(s);  // NOTE: not the reduction it looked like: left as it was
        continue;
      }
      Node* v = insert_call(g_, u, PyRef(), "reshape", {Arg::of_node(s), int_tuple(u->meta->sizes)},
                            {}, u->meta->device);
      touched_.insert(s);
      touched_.insert(v);
      replaced.insert(u);
      replace(u, v, info);
      any = true;
    }
    if (!any) return false;
    const auto& left = info.users_of(r);
    if (std::all_of(left.begin(), left.end(), [&](const Node* u) { return replaced.count(u); }))
      g_.erase(r);
    return true;
  }

  // p(reshape(b), ...) -> reshape(p(b, ...)) where p, pointwise, is the reshape's only reader
  // and only matmuls or other externs read p: `ln(x).view(-1, C).to(bf16)` before a linear
  // under autocast. Then p joins the kernel computing b and the reshape is a view of its
  // result, so b (GPT-2's float32 layer-norm output) is not written out for p to read.
  bool sink(Node* r, const Node* base, const GraphInfo& info) {
    std::vector<Node*> ru = users(r, info);
    if (ru.size() != 1 || read_by_output(r, info)) return false;
    Node* p = ru[0];
    if (!p->meta || !fresh(p) || info.segment.at(p) != info.segment.at(r) ||
        !contiguous(*p->meta) || !plain_pointwise(*p, info) || returned_to_caller(p, info))
      return false;
    const auto& pu = info.users_of(p);
    if (pu.empty()) return false;
    for (const Node* u : pu)
      if (lower_node(*u, info) && !reshape_base(*u)) return false;  // a kernel reads p
    const std::vector<int64_t>&from = r->meta->sizes, &to = base->meta->sizes;
    std::unordered_map<const Node*, Node*> swapped = {{r, const_cast<Node*>(base)}};
    std::vector<Node*> made;
    auto undo = [&] {
      for (auto it = made.rbegin(); it != made.rend(); ++it) g_.erase(*it);
      return false;
    };
    std::vector<const Node*> operands;
    for (const Arg& a : p->args)
      for (const Node* x : node_inputs_of(a)) operands.push_back(x);
    for (const auto& kv : p->kwargs)
      for (const Node* x : node_inputs_of(kv.second)) operands.push_back(x);
    for (const Node* x : operands) {
      if (swapped.count(x)) continue;
      if (!x->meta) return undo();
      auto sizes = operand_sizes(x->meta->sizes, from, to);
      if (!sizes) return undo();
      if (x->meta->sizes.size() <= to.size() &&
          (without_leading_ones(*sizes) == without_leading_ones(x->meta->sizes) ||
           numel(x->meta->sizes) == 1))
        continue;
      if (!contiguous(*x->meta) || !in_memory(x, info) || !fresh(x)) return undo();
      Node* v =
          insert_call(g_, p, PyRef(), "reshape",
                      {Arg::of_node(const_cast<Node*>(x)), int_tuple(*sizes)}, {}, p->meta->device);
      made.push_back(v);
      swapped[x] = v;
    }
    Node* q = call_again(p, swapped, p);
    made.push_back(q);
    if (q->meta->sizes != to || q->meta->dtype.get() != p->meta->dtype.get()) return undo();
    Node* v = insert_call(g_, p, PyRef(), "reshape", {Arg::of_node(q), int_tuple(from)}, {},
                          p->meta->device);
    replace(p, v, info);
    g_.erase(r);
    for (Node* m : made) touched_.insert(m);
    touched_.insert(v);
    return true;
  }

  // p's call again (before `pos`), with each operand in `now` replaced, at any depth of list
  // arguments; its meta is computed for the new operands.
  Node* call_again(const Node* p, const std::unordered_map<const Node*, Node*>& now, Node* pos) {
    std::function<Arg(Arg)> swap = [&](Arg a) {
      if (a.kind == Arg::Kind::Node && now.count(a.node)) a.node = now.at(a.node);
      for (Arg& item : a.items) item = swap(item);
      return a;
    };
    std::vector<Arg> args;
    for (const Arg& a : p->args) args.push_back(swap(a));
    std::vector<std::pair<std::string, Arg>> kwargs;
    for (const auto& [k, v] : p->kwargs) kwargs.emplace_back(k, swap(v));
    const bool method = p->op == ir::OpKind::CallMethod;
    Node* q = insert_call(g_, pos, method ? PyRef() : p->target, method ? p->target_name : "",
                          std::move(args), std::move(kwargs), pos->meta->device);
    q->target_name = p->target_name;
    q->location = p->location;
    return q;
  }

  bool untouch(const Node* r, const Node* base) {
    touched_.erase(r);
    touched_.erase(base);
    return false;
  }

  // An operand of a moving op and its sizes after the move; `inner`: the operand moves as well
  // (its own operands to reshape), else it is reshaped where it is.
  struct Move {
    const Node* x;
    std::vector<int64_t> sizes;
    std::shared_ptr<std::vector<Move>> inner;
  };
  using Moves = std::vector<Move>;

  // A value kernels read from memory: a graph input, an op no kernel computes
  // (a matmul), or a reshape (reshapes of reshapes collapse).
  static bool in_memory(const Node* x, const GraphInfo& info) {
    return x->op == ir::OpKind::Placeholder || !lower_node(*x, info) || reshape_base(*x);
  }

  // The operands of p to reshape (with their sizes after the move) when p,
  // read by `reader` alone, moves below a reshape of its value to `to`; nullopt
  // when it cannot. NOTE: each operand to reshape must be in memory or move
  // too (to kMaxDepth): a reshape of a value a kernel computes (a reduction's
  // result) would stop fusion there instead, splitting that kernel's epilogue.
  static constexpr int kMaxDepth = 16;
  std::optional<Moves> plan_move(const Node* p, const Node* reader, const std::vector<int64_t>& to,
                                 const GraphInfo& info, int depth) {
    if (depth > kMaxDepth || !p->meta || (depth > 0 && !fresh(p))) return std::nullopt;
    const auto& pu = info.users_of(p);
    if (pu.empty() || info.segment.at(p) != info.segment.at(reader)) return std::nullopt;
    for (const Node* u : pu)
      if (u != reader) return std::nullopt;
    if (!plain_pointwise(*p, info)) return std::nullopt;
    const std::vector<int64_t>& from = p->meta->sizes;
    Moves moved;  // NOTE: nested tensor arguments are not moved
    auto plan = [&](const Arg& a) {
      if (a.kind != Arg::Kind::Node) {
        for (const Arg& item : a.items)
          if (!node_inputs_of(item).empty()) return false;
        return true;
      }
      const Node* x = a.node;
      if (!x->meta) return false;
      auto sizes = operand_sizes(x->meta->sizes, from, to);
      if (!sizes) return false;
      // NOTE: an operand that broadcasts to the new sizes as it is stays (a one-element operand
      // keeps its rank: type promotion tells a 0-d tensor from others).
      if (x->meta->sizes.size() <= to.size() &&
          (without_leading_ones(*sizes) == without_leading_ones(x->meta->sizes) ||
           numel(x->meta->sizes) == 1))
        return true;
      if (!fresh(x)) return false;
      for (const Move& m : moved)
        if (m.x == x) return m.sizes == *sizes;  // an operand read twice (x * x)
      if (!contiguous(*x->meta)) {
        // NOTE: a strided view of memory (a padded product narrowed back, passes/pad_matmuls.h)
        // that torch views at the new sizes: reshaped where it is, read through its strides.
        if (!memory_view(x, info) || !views_as(*x, *sizes)) return false;
        moved.push_back({x, std::move(*sizes), nullptr});
        return true;
      }
      std::shared_ptr<Moves> inner;
      if (!in_memory(x, info)) {
        std::optional<Moves> sub = plan_move(x, p, *sizes, info, depth + 1);
        if (!sub) return false;
        inner = std::make_shared<Moves>(std::move(*sub));
      }
      moved.push_back({x, std::move(*sizes), std::move(inner)});
      return true;
    };
    for (const Arg& a : p->args)
      if (!plan(a)) return std::nullopt;
    for (const auto& kv : p->kwargs)
      if (!plan(kv.second)) return std::nullopt;
    return moved;
  }

  // A value read from memory as it is: a graph input, an extern's result, or a view of one
  // (a kernel computes none of them).
  static bool memory_view(const Node* x, const GraphInfo& info) {
    if (x->op == ir::OpKind::Placeholder) return true;
    std::optional<OpLowering> l = lower_node(*x, info);
    if (!l) return true;
    if (l->kind != OpLowering::Kind::View && l->kind != OpLowering::Kind::StridedView) return false;
    return !l->inputs.empty() && memory_view(l->inputs[0], info);
  }

  // True when torch views `x`'s traced value at `sizes` (no copy): the same elements in the
  // same order, addressed through x's memory.
  static bool views_as(const Node& x, const std::vector<int64_t>& sizes) {
    if (!x.example) return false;
    PyRef shape = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(sizes.size())));
    if (!shape) throw PythonError();
    for (size_t i = 0; i < sizes.size(); ++i) {
      PyObject* v = PyLong_FromLongLong(sizes[i]);
      if (!v) throw PythonError();
      PyTuple_SET_ITEM(shape.get(), static_cast<Py_ssize_t>(i), v);
    }
    PyRef viewed = PyRef::steal(PyObject_CallMethod(x.example.get(), "view", "O", shape.get()));
    if (!viewed) PyErr_Clear();
    return static_cast<bool>(viewed);
  }

  // p's op again, at sizes `to`, on its operands as `moved` says (before `pos`): each operand
  // that moves too is rebuilt the same way, the others reshaped. Null when the op does not
  // come out as p at `to` (a rule's view of it was wrong); `made` lists what was inserted.
  Node* rebuild(const Node* p, const std::vector<int64_t>& to, const Moves& moved, Node* pos,
                std::vector<Node*>& made) {
    std::unordered_map<const Node*, Node*> now;
    for (const Move& m : moved) {
      Node* v = m.inner ? rebuild(m.x, m.sizes, *m.inner, pos, made)
                        : insert_call(g_, pos, PyRef(), "reshape",
                                      {Arg::of_node(const_cast<Node*>(m.x)), int_tuple(m.sizes)},
                                      {}, pos->meta->device);
      if (!v) return nullptr;
      if (!m.inner) made.push_back(v);
      now[m.x] = v;
    }
    Node* q = call_again(p, now, pos);
    made.push_back(q);
    if (q->meta->sizes != to || q->meta->dtype.get() != p->meta->dtype.get()) return nullptr;
    return q;
  }

  // Erases what a move left unread: `moved`'s operands that moved too (each read by its mover
  // alone), readers first.
  void erase_moved(const Moves& moved) {
    for (const Move& m : moved) {
      if (!m.inner) continue;
      touched_.insert(m.x);
      g_.erase(m.x);
      erase_moved(*m.inner);
    }
  }

  // reshape(p(a, ...)) -> p(reshape(a), ...) where p is read by the reshape alone; an operand
  // of p that a kernel computes moves the same way in the same step (a GELU's chain of 8 ops:
  // one step, one round, not 8 with a reshape inserted and moved again at each).
  bool hoist(Node* r, const Node* p, const GraphInfo& info) {
    std::optional<Moves> plan = plan_move(p, r, r->meta->sizes, info, 0);
    if (!plan) return false;
    std::vector<Node*> made;
    Node* q = rebuild(p, r->meta->sizes, *plan, r, made);
    // NOTE: readers were compiled for r's layout; an operand read through its strides must not
    // change it (a conversion keeps its input's layout where that is dense).
    if (q && !same_layout(*q->meta, *r->meta)) q = nullptr;
    if (!q) {
      // NOTE: not the op it was: left as it was, the nodes made erased (users first)
      for (auto it = made.rbegin(); it != made.rend(); ++it) g_.erase(*it);
      return false;
    }
    replace(r, q, info);
    g_.erase(p);
    erase_moved(*plan);
    for (Node* v : made) touched_.insert(v);
    for (const Move& m : *plan) touched_.insert(m.x);
    return true;
  }

  static std::vector<const Node*> node_inputs_of(const Arg& a) {
    std::vector<const Node*> out;
    if (a.kind == Arg::Kind::Node) out.push_back(a.node);
    for (const Arg& item : a.items) {
      auto more = node_inputs_of(item);
      out.insert(out.end(), more.begin(), more.end());
    }
    return out;
  }

  ir::Graph& g_;
  const int64_t saved_from_;
  // Nodes (by name: an erased node's address may be reused) that had no rewrite.
  std::unordered_set<std::string> rejected_;
  std::unordered_set<const Node*> touched_;  // changed this round: `info` is stale for them
  bool stale_ = false;
};

}  // namespace

int move_reshapes(ir::Graph& g, int64_t saved_outputs_from) {
  return Mover(g, saved_outputs_from).run();
}

}  // namespace tl::passes
