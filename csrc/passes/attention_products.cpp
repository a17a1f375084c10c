#include "passes/attention_products.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/python_helpers.h"
#include "passes/graph_rewrite.h"

namespace tl::passes {
namespace {

using ir::Arg;
using ir::Node;

// Scores above this many elements stay with torch: the products' tensors
// would be a few GB (torch's math path stores them too, in float32).
constexpr int64_t kMaxScores = int64_t{1} << 30;

PyRef py_int(int64_t v) {
  PyRef r = PyRef::steal(PyLong_FromLongLong(v));
  if (!r) throw PythonError();
  return r;
}

PyRef py_float(double v) {
  PyRef r = PyRef::steal(PyFloat_FromDouble(v));
  if (!r) throw PythonError();
  return r;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

struct Dtypes {
  PyRef f16 = torch_fn("float16"), bf16 = torch_fn("bfloat16"), f32 = torch_fn("float32"),
        f64 = torch_fn("float64");
  bool half(PyObject* d) const { return d == f16.get() || d == bf16.get(); }
  bool floating(PyObject* d) const { return half(d) || d == f32.get() || d == f64.get(); }
};

const Dtypes& dtypes() {
  static const Dtypes* d = new Dtypes();  // NOTE: process-long, never destroyed
  return *d;
}

// A constant argument equal to `expected` (absent counts as its default).
bool constant_is(const Node& n, size_t pos, const char* name, PyObject* expected) {
  const Arg* a = find_arg(n, pos, name);
  if (!a) return true;
  if (a->kind != Arg::Kind::Const) return false;
  int eq = PyObject_RichCompareBool(a->value.get(), expected, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1 && Py_TYPE(a->value.get()) == Py_TYPE(expected);
}

// The scale the call states, or 1/sqrt(E) for None / absent (torch's
// calculate_scale); false if it is not a constant number.
bool attention_scale(const Node& n, int64_t head, double* scale) {
  const Arg* a = find_arg(n, 6, "scale");
  if (!a || (a->kind == Arg::Kind::Const && a->value.get() == Py_None)) {
    *scale = 1.0 / std::sqrt(static_cast<double>(head));
    return true;
  }
  return number_arg(n, 6, "scale", scale) && !PyBool_Check(a->value.get());
}

// Whether torch runs `n` (eligible) on its math path: asked of torch with
// tensors of the operands' layouts on n's device (torchlite/_attention_mask.py).
bool runs_math(const Node& n, const Node* q, const Node* k, const Node* v, const Node* mask) {
  for (const Node* t : {q, k, v, mask})
    if (!t->example) return false;
  const Arg* s = find_arg(n, 6, "scale");
  PyObject* scale = s && s->kind == Arg::Kind::Const ? s->value.get() : Py_None;
  PyRef r = PyRef::steal(PyObject_CallFunctionObjArgs(
      python_helper("attention_mask.runs_math").get(), q->example.get(), k->example.get(),
      v->example.get(), mask->example.get(), n.meta->device.get(), scale, nullptr));
  if (!r) throw PythonError();
  return r.get() == Py_True;
}

// Whether `n` is a call this pass handles (see the header); sets its operands.
bool eligible(const Node& n, bool any_device, const Node** q, const Node** k, const Node** v,
              const Node** mask, double* scale) {
  if (n.op != ir::OpKind::CallFunction ||
      !ends_with(n.target_name, "scaled_dot_product_attention") || !n.meta || n.meta->requires_grad)
    return false;
  if (!any_device && device_type(n.meta->device.get()) != "cuda") return false;
  static const char* kKnown[] = {"query",     "key",       "value", "attn_mask",
                                 "dropout_p", "is_causal", "scale", "enable_gqa"};
  if (n.args.size() > 8) return false;
  for (const auto& kv : n.kwargs)
    if (std::find_if(std::begin(kKnown), std::end(kKnown),
                     [&](const char* s) { return kv.first == s; }) == std::end(kKnown))
      return false;
  *q = tensor_arg(n, 0, "query"), *k = tensor_arg(n, 1, "key"), *v = tensor_arg(n, 2, "value");
  *mask = tensor_arg(n, 3, "attn_mask");
  if (!*q || !*k || !*v || !*mask) return false;
  double dropout = 0;
  const Arg* p = find_arg(n, 4, "dropout_p");
  if (p && (!number_arg(n, 4, "dropout_p", &dropout) || dropout != 0)) return false;
  if (!constant_is(n, 5, "is_causal", Py_False) || !constant_is(n, 7, "enable_gqa", Py_False))
    return false;
  const auto &qm = *(*q)->meta, &km = *(*k)->meta, &vm = *(*v)->meta, &mm = *(*mask)->meta;
  const Dtypes& dt = dtypes();
  PyObject* d = qm.dtype.get();
  if (!dt.floating(d) || km.dtype.get() != d || vm.dtype.get() != d || n.meta->dtype.get() != d)
    return false;
  if (mm.dtype.get() != d && !(dt.half(d) && mm.dtype.get() == dt.f32.get())) return false;
  const size_t rank = qm.sizes.size();
  if (rank < 3 || km.sizes.size() != rank || vm.sizes.size() != rank || mm.sizes.size() > rank)
    return false;
  for (size_t i = 0; i + 2 < rank; ++i)
    if (km.sizes[i] != qm.sizes[i] || vm.sizes[i] != qm.sizes[i]) return false;
  const int64_t head = qm.sizes[rank - 1];
  if (head < 1 || km.sizes[rank - 1] != head || vm.sizes[rank - 2] != km.sizes[rank - 2])
    return false;
  int64_t scores = 1;
  for (size_t i = 0; i + 1 < rank; ++i) scores *= qm.sizes[i];
  scores *= km.sizes[rank - 2];
  if (scores > kMaxScores) return false;
  return attention_scale(n, head, scale);
}

// Dims of `strides` from outermost to innermost; empty if they are not a
// dense permutation of `sizes`.
std::vector<int64_t> dense_order(const std::vector<int64_t>& sizes,
                                 const std::vector<int64_t>& strides) {
  std::vector<int64_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  int64_t step = 1;
  for (size_t i = order.size(); i-- > 0;) {
    if (sizes[order[i]] != 1 && strides[order[i]] != step) return {};
    step *= sizes[order[i]];
  }
  return order;
}

Arg ints_arg(const std::vector<int64_t>& v) {
  std::vector<Arg> items;
  for (int64_t i : v) items.push_back(Arg::constant(py_int(i)));
  return Arg::list(std::move(items));
}

// The decomposition of `n`, inserted before it, with n's layout; null (and
// nothing left inserted) when it cannot have it.
Node* decompose(ir::Graph& g, Node* n, Node* q, Node* k, Node* v, Node* mask, double scale) {
  const PyRef& device = n->meta->device;
  const Dtypes& dt = dtypes();
  std::vector<Node*> made;
  auto call = [&](const char* method, std::vector<Arg> args) {
    made.push_back(insert_call(g, n, {}, method, std::move(args), {}, device));
    return made.back();
  };
  auto fn = [&](const char* name, std::vector<Arg> args) {
    made.push_back(insert_call(g, n, torch_fn(name), "", std::move(args), {}, device));
    return made.back();
  };
  Node* kt =
      call("transpose", {Arg::of_node(k), Arg::constant(py_int(-2)), Arg::constant(py_int(-1))});
  Node* x = fn("matmul", {Arg::of_node(q), Arg::of_node(kt)});
  const bool half = dt.half(q->meta->dtype.get());
  // NOTE: the scores are rounded to q's dtype once, by the product (as torch.compile's
  // decomposition and HF's eager attention do); scale, bias and softmax run in float32.
  if (half) x = call("float", {Arg::of_node(x)});
  if (scale != 1.0) x = call("mul", {Arg::of_node(x), Arg::constant(py_float(scale))});
  x = call("add", {Arg::of_node(x), Arg::of_node(mask)});
  Node* p = fn("_safe_softmax", {Arg::of_node(x), Arg::constant(py_int(-1))});
  if (p->meta->dtype.get() != q->meta->dtype.get())
    p = call("to", {Arg::of_node(p), Arg::constant(q->meta->dtype)});
  Node* out = fn("matmul", {Arg::of_node(p), Arg::of_node(v)});
  const auto& want = *n->meta;
  if (out->meta->strides != want.strides && out->meta->sizes == want.sizes) {
    // NOTE: the layout torch's fused kernels write (capture's fused_attention_layout: q's own
    // when q is dense), which n's readers were traced with: one copy of the (small) result.
    std::vector<int64_t> order = dense_order(want.sizes, want.strides);
    if (!order.empty()) {
      std::vector<int64_t> back(order.size());
      for (size_t i = 0; i < order.size(); ++i) back[order[i]] = static_cast<int64_t>(i);
      Node* moved = call("permute", {Arg::of_node(out), ints_arg(order)});
      moved = call("contiguous", {Arg::of_node(moved)});
      out = call("permute", {Arg::of_node(moved), ints_arg(back)});
    }
  }
  if (out->meta->sizes == want.sizes && out->meta->strides == want.strides &&
      out->meta->dtype.get() == want.dtype.get())
    return out;
  for (auto it = made.rbegin(); it != made.rend(); ++it) g.erase(*it);
  return nullptr;
}

}  // namespace

int decompose_biased_attention(ir::Graph& g, bool every_call) {
  std::vector<Node*> calls;
  for (auto& n : g.nodes()) calls.push_back(n.get());
  int done = 0;
  for (Node* n : calls) {
    const Node *q, *k, *v, *mask;
    double scale = 1.0;
    if (!eligible(*n, every_call, &q, &k, &v, &mask, &scale)) continue;
    // NOTE: where a fused kernel takes the call (cuDNN, efficient attention), it reads the bias
    // once and stores no scores: faster than the products (H100, T5's encoder attention
    // 8x8x512x512 bf16: cuDNN 0.037 ms).
    if (!every_call && !runs_math(*n, q, k, v, mask)) continue;
    // NOTE: a returned result keeps torch's call: its strides are those of the kernel torch
    // picks at run time (q's layout from the fused kernels, dense from the math path), which
    // the graph's readers do not see but the caller does.
    std::vector<Node*> readers = readers_of(g, n);
    if (std::any_of(readers.begin(), readers.end(),
                    [](const Node* r) { return r->op == ir::OpKind::Output; }))
      continue;
    Node* out = decompose(g, n, const_cast<Node*>(q), const_cast<Node*>(k), const_cast<Node*>(v),
                          const_cast<Node*>(mask), scale);
    if (!out) continue;
    replace_uses(readers, n, out);
    g.erase(n);
    ++done;
  }
  return done;
}

}  // namespace tl::passes
