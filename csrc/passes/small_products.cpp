#include "passes/small_products.h"

#include <string>
#include <vector>

#include "core/errors.h"
#include "passes/graph_rewrite.h"

namespace tl::passes {
namespace {

using ir::Arg;
using ir::Node;

constexpr int64_t kMaxInner = 8;    // K: multiply-adds per output element
constexpr int64_t kMaxOuter = 16;   // N: outputs per input row
constexpr int64_t kMinRows = 1024;  // below it the product is a launch either way

PyRef py_int(int64_t v) {
  PyRef r = PyRef::steal(PyLong_FromLongLong(v));
  if (!r) throw PythonError();
  return r;
}

bool is_floating(PyObject* dtype) {
  static PyRef f32 = torch_fn("float32"), f16 = torch_fn("float16"),
               bf16 = torch_fn("bfloat16");  // NOTE: process-long
  return dtype == f32.get() || dtype == f16.get() || dtype == bf16.get();
}

// The rewrite of `n` (linear(x, w[, b])) inserted before it; null (nothing
// left inserted) when its result's layout is not the linear's.
Node* expand(ir::Graph& g, Node* n, Node* x, Node* w, Node* b) {
  const PyRef& device = n->meta->device;
  static PyRef f32 = torch_fn("float32");  // NOTE: process-long
  const bool wide = n->meta->dtype.get() != f32.get();
  std::vector<Node*> made;
  auto call = [&](const char* method, std::vector<Arg> args) {
    Node* c = insert_call(g, n, {}, method, std::move(args), {}, device);
    made.push_back(c);
    return c;
  };
  // NOTE: each slice is cast on its own: a value read at several points (x read at K offsets)
  // is stored by a kernel of its own rather than recomputed in its readers.
  auto as_float = [&](Node* t) { return wide ? call("float", {Arg::of_node(t)}) : t; };
  const int64_t k_size = w->meta->sizes[1];
  Node* acc = nullptr;
  for (int64_t k = 0; k < k_size; ++k) {
    Node* xk = as_float(call("narrow", {Arg::of_node(x), Arg::constant(py_int(-1)),
                                        Arg::constant(py_int(k)), Arg::constant(py_int(1))}));
    Node* wk = as_float(
        call("select", {Arg::of_node(w), Arg::constant(py_int(1)), Arg::constant(py_int(k))}));
    Node* term = call("mul", {Arg::of_node(xk), Arg::of_node(wk)});
    acc = acc ? call("add", {Arg::of_node(acc), Arg::of_node(term)}) : term;
  }
  if (b) acc = call("add", {Arg::of_node(acc), Arg::of_node(as_float(b))});
  if (wide) acc = call("to", {Arg::of_node(acc), Arg::constant(n->meta->dtype)});
  acc = call("contiguous", {Arg::of_node(acc)});
  if (acc->meta->sizes == n->meta->sizes && acc->meta->strides == n->meta->strides &&
      acc->meta->dtype.get() == n->meta->dtype.get())
    return acc;
  for (auto it = made.rbegin(); it != made.rend(); ++it) g.erase(*it);
  return nullptr;
}

}  // namespace

int expand_small_products(ir::Graph& g) {
  std::vector<Node*> linears;
  for (auto& n : g.nodes())
    if ((n->target_name == "torch._C._nn.linear" ||
         n->target_name == "torch.nn.functional.linear") &&
        n->meta && !n->meta->requires_grad)
      linears.push_back(n.get());
  int expanded = 0;
  for (Node* n : linears) {
    if (n->kwargs.size() > 0 && !(n->kwargs.size() == 1 && n->kwargs[0].first == "bias")) continue;
    Node* x = const_cast<Node*>(tensor_arg(*n, 0, "input"));
    Node* w = const_cast<Node*>(tensor_arg(*n, 1, "weight"));
    Node* b = const_cast<Node*>(tensor_arg(*n, 2, "bias"));
    const Arg* bias_arg = find_arg(*n, 2, "bias");
    if (!x || !w || (bias_arg && !b && !is_none_or_absent(bias_arg))) continue;
    const auto& wm = *w->meta;
    if (wm.sizes.size() != 2 || x->meta->sizes.empty() || (b && b->meta->sizes.size() != 1))
      continue;
    const int64_t outer = wm.sizes[0], inner = wm.sizes[1];
    if (inner < 1 || inner > kMaxInner || outer > kMaxOuter || x->meta->sizes.back() != inner)
      continue;
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < x->meta->sizes.size(); ++i) rows *= x->meta->sizes[i];
    if (rows < kMinRows) continue;
    PyObject* dt = n->meta->dtype.get();
    if (!is_floating(dt) || x->meta->dtype.get() != dt || wm.dtype.get() != dt ||
        (b && b->meta->dtype.get() != dt))
      continue;
    Node* out = expand(g, n, x, w, b);
    if (!out) continue;
    std::vector<Node*> users;
    for (auto& u : g.nodes()) {
      bool reads = false;
      auto refers = [&](const Arg& a, auto& self) -> bool {
        if (a.kind == Arg::Kind::Node) return a.node == n;
        for (const Arg& i : a.items)
          if (self(i, self)) return true;
        return false;
      };
      for (const Arg& a : u->args) reads = reads || refers(a, refers);
      for (const auto& kv : u->kwargs) reads = reads || refers(kv.second, refers);
      if (reads) users.push_back(u.get());
    }
    replace_uses(users, n, out);
    g.erase(n);
    ++expanded;
  }
  return expanded;
}

}  // namespace tl::passes
