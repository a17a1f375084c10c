#include "passes/cuda_layouts.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/errors.h"
#include "core/python_helpers.h"
#include "passes/graph_rewrite.h"

namespace tl::passes {
namespace {

using ir::Arg;
using ir::Node;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool on_cuda(const Node& n) { return n.meta && device_type(n.meta->device.get()) == "cuda"; }

// True for float16 and bfloat16 (borrowed dtype).
bool is_half(PyObject* dtype) {
  static PyRef f16 = torch_fn("float16"), bf16 = torch_fn("bfloat16");  // NOTE: process-long
  return dtype == f16.get() || dtype == bf16.get();
}

PyRef py_int(int64_t v) {
  PyRef r = PyRef::steal(PyLong_FromLongLong(v));
  if (!r) throw PythonError();
  return r;
}

std::vector<Node*> nodes_of(const ir::Graph& g) {
  std::vector<Node*> out;
  for (auto& n : g.nodes()) out.push_back(n.get());
  return out;
}

bool same_layout(const Node* a, const Node* b) {
  return a->meta->sizes == b->meta->sizes && a->meta->strides == b->meta->strides &&
         a->meta->dtype.get() == b->meta->dtype.get();
}

// The scalar arguments of scaled_dot_product_attention after attn_mask, with
// their defaults; false if one is not a constant.
constexpr const char* kAttentionScalars[] = {"dropout_p", "is_causal", "scale", "enable_gqa"};
constexpr const char* kAttentionInputs[] = {"query", "key", "value"};

const Node* attention_input(const Node& n, size_t i) {
  return tensor_arg(n, i, kAttentionInputs[i]);
}

bool attention_scalars(const Node& n, std::vector<PyRef>& out) {
  const PyRef defaults[] = {PyRef::steal(PyFloat_FromDouble(0.0)), PyRef::borrow(Py_False),
                            PyRef::borrow(Py_None), PyRef::borrow(Py_False)};
  if (!defaults[0]) throw PythonError();
  out.clear();
  for (size_t i = 0; i < 4; ++i) {
    const Arg* a = find_arg(n, 4 + i, kAttentionScalars[i]);
    if (a && a->kind != Arg::Kind::Const) return false;
    out.push_back(a ? a->value : defaults[i]);
  }
  return true;
}

bool same_values(const std::vector<PyRef>& a, const std::vector<PyRef>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    int eq = PyObject_RichCompareBool(a[i].get(), b[i].get(), Py_EQ);
    if (eq < 0) PyErr_Clear();
    if (eq != 1) return false;
  }
  return true;
}

}  // namespace

int share_attention_masks(ir::Graph& g) {
  const PyRef bool_dtype = torch_fn("bool");
  struct Group {
    std::vector<Node*> users;
    std::vector<PyRef> scalars;
  };
  std::vector<std::pair<const Node*, Group>> groups;  // graph order of the first reader
  for (Node* n : nodes_of(g)) {
    if (!ends_with(n->target_name, "scaled_dot_product_attention") || !on_cuda(*n)) continue;
    const Node* mask = tensor_arg(*n, 3, "attn_mask");
    std::vector<PyRef> scalars;
    if (!mask || !attention_input(*n, 0) || !attention_input(*n, 1) || !attention_input(*n, 2) ||
        mask->meta->dtype.get() != bool_dtype.get() || n->meta->requires_grad ||
        !attention_scalars(*n, scalars))
      continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& e) { return e.first == mask; });
    if (it == groups.end()) {
      groups.push_back({mask, {{n}, std::move(scalars)}});
      continue;
    }
    // NOTE: torch picks the backend (and so the fill) from q, k, v and these scalars.
    const Node* first = it->second.users[0];
    bool same = same_values(scalars, it->second.scalars);
    for (size_t i = 0; i < 3 && same; ++i)
      same = same_layout(attention_input(*n, i), attention_input(*first, i));
    if (same) it->second.users.push_back(n);
  }
  PyRef helper = python_helper("attention_mask.shared_additive_mask");
  int shared = 0;
  for (auto& [mask, group] : groups) {
    if (group.users.size() < 2) continue;
    Node* first = group.users[0];
    std::vector<Arg> args = {Arg::of_node(const_cast<Node*>(mask))};
    for (size_t i = 0; i < 3; ++i)
      args.push_back(Arg::of_node(const_cast<Node*>(attention_input(*first, i))));
    std::vector<std::pair<std::string, Arg>> kwargs;
    for (size_t i = 0; i < 4; ++i)
      kwargs.push_back({kAttentionScalars[i], Arg::constant(group.scalars[i])});
    Node* additive =
        insert_call(g, first, helper, "", std::move(args), std::move(kwargs), first->meta->device);
    replace_uses(group.users, mask, additive);
    ++shared;
  }
  return shared;
}

int dense_attention_masks(ir::Graph& g) {
  std::unordered_map<const Node*, Node*> dense;
  int made = 0;
  for (Node* n : nodes_of(g)) {
    if (!ends_with(n->target_name, "scaled_dot_product_attention") || !on_cuda(*n)) continue;
    const Node* mask = tensor_arg(*n, 3, "attn_mask");
    if (!mask || mask->meta->sizes.empty() || mask->meta->sizes.back() <= 1 ||
        mask->meta->strides.back() != 0)
      continue;
    Node*& d = dense[mask];
    if (!d) {
      Node* m = const_cast<Node*>(mask);
      d = insert_call(g, n, {}, "contiguous", {Arg::of_node(m)}, {}, m->meta->device);
      d->meta->requires_grad = m->meta->requires_grad;
      ++made;
    }
    replace_uses({n}, mask, d);
  }
  return made;
}

namespace {

// F.linear(x, w) computed into rows of `width` elements, narrowed back: no
// weight copy (torchlite/_padded_weights.py).
Node* product_into_padded_rows(ir::Graph& g, Node* n, const Node* x, const Node* w, int64_t width) {
  PyRef into = python_helper("padded_weights.linear_into_padded_rows");
  return insert_call(g, n, into, "",
                     {Arg::of_node(const_cast<Node*>(x)), Arg::of_node(const_cast<Node*>(w)),
                      Arg::constant(py_int(width))},
                     {}, n->meta->device);
}

// F.linear(x, w, b) with w and b zero-padded to `width` rows, narrowed back.
Node* linear_of_padded_weight(ir::Graph& g, Node* n, const Node* x, const Node* w, const Node* b,
                              int64_t width) {
  PyRef pad = python_helper("padded_weights.padded_rows");
  auto padded_of = [&](const Node* t) {
    Node* m = const_cast<Node*>(t);
    return insert_call(g, n, pad, "", {Arg::of_node(m), Arg::constant(py_int(width))}, {},
                       m->meta->device);
  };
  Node* wide = insert_call(
      g, n, n->target, "",
      {Arg::of_node(const_cast<Node*>(x)), Arg::of_node(padded_of(w)), Arg::of_node(padded_of(b))},
      {}, n->meta->device);
  const int64_t last = static_cast<int64_t>(n->meta->sizes.size()) - 1;
  const int64_t cols = w->meta->sizes[0];
  // NOTE: the result keeps the padded row stride, as torch.compile's does: making it
  // contiguous would cost a copy of all of it (350 us for GPT-2's logits on an H100).
  Node* cut = insert_call(g, n, {}, "narrow",
                          {Arg::of_node(wide), Arg::constant(py_int(last)),
                           Arg::constant(py_int(0)), Arg::constant(py_int(cols))},
                          {}, n->meta->device);
  cut->location = wide->location = n->location;
  return cut;
}

}  // namespace

int pad_unaligned_linears(ir::Graph& g) {
  int padded = 0;
  for (Node* n : nodes_of(g)) {
    if (n->target_name != "torch._C._nn.linear" && n->target_name != "torch.nn.functional.linear")
      continue;
    if (!on_cuda(*n) || n->meta->requires_grad) continue;
    const Node* w = tensor_arg(*n, 1, "weight");
    const Node* b = tensor_arg(*n, 2, "bias");
    const Node* x = tensor_arg(*n, 0, "input");
    if (!w || !x || w->meta->sizes.size() != 2) continue;
    if (!is_half(n->meta->dtype.get())) continue;
    const int64_t cols = w->meta->sizes[0], align = 8;  // 16 bytes
    // NOTE: only large outputs: the padded rows (and, with a bias, the weight copy) pay off.
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < n->meta->sizes.size(); ++i) rows *= n->meta->sizes[i];
    if (cols % align == 0 || cols < 1024 || rows < 256) continue;
    if (w->meta->sizes[1] % align != 0) continue;  // an unaligned K needs more than this
    const int64_t extra = align - cols % align;
    Node* cut = b ? linear_of_padded_weight(g, n, x, w, b, cols + extra)
                  : product_into_padded_rows(g, n, x, w, cols + extra);
    replace_uses(readers_of(g, n), n, cut);
    g.erase(n);
    ++padded;
  }
  return padded;
}

}  // namespace tl::passes
