#include "passes/pad_matmuls.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/errors.h"
#include "passes/graph_rewrite.h"
#include "passes/lowering.h"

namespace tl::passes {
namespace {

using ir::Arg;
using ir::Node;

constexpr int64_t kAlign = 8;  // elements: 16 bytes of float16/bfloat16

int64_t aligned(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

PyRef py_int(int64_t v) {
  PyRef r = PyRef::steal(PyLong_FromLongLong(v));
  if (!r) throw PythonError();
  return r;
}

PyRef int_list(const std::vector<int64_t>& v) {
  PyRef l = PyRef::steal(PyList_New(static_cast<Py_ssize_t>(v.size())));
  if (!l) throw PythonError();
  for (size_t i = 0; i < v.size(); ++i)
    PyList_SET_ITEM(l.get(), static_cast<Py_ssize_t>(i), py_int(v[i]).release());
  return l;
}

// Element size of a floating dtype (borrowed), 0 for any other; `half_only`
// admits float16 and bfloat16 only.
int64_t float_bytes(PyObject* dtype, bool half_only) {
  static PyRef f16 = torch_fn("float16"), bf16 = torch_fn("bfloat16"),  // NOTE: process-long
      f32 = torch_fn("float32"), f64 = torch_fn("float64");
  if (dtype == f16.get() || dtype == bf16.get()) return 2;
  if (half_only) return 0;
  if (dtype == f32.get()) return 4;
  if (dtype == f64.get()) return 8;
  return 0;
}

bool is_matrix(const Node* n) { return n && n->meta && n->meta->sizes.size() == 2; }

std::vector<Node*> nodes_of(const ir::Graph& g) {
  std::vector<Node*> out;
  for (auto& n : g.nodes()) out.push_back(n.get());
  return out;
}

bool refers_to(const Arg& a, const Examples& set) {
  if (a.kind == Arg::Kind::Node && set.count(a.node)) return true;
  for (const Arg& i : a.items)
    if (refers_to(i, set)) return true;
  return false;
}

bool uses_any(const Node& u, const Examples& set) {
  for (const Arg& a : u.args)
    if (refers_to(a, set)) return true;
  for (const auto& kv : u.kwargs)
    if (refers_to(kv.second, set)) return true;
  return false;
}

void collect_nodes(const Arg& a, std::vector<Node*>& out) {
  if (a.kind == Arg::Kind::Node) out.push_back(a.node);
  for (const Arg& i : a.items) collect_nodes(i, out);
}

std::vector<Node*> users_of(const ir::Graph& g, const Node* n) {
  Examples one{{n, PyRef()}};
  std::vector<Node*> out;
  for (auto& u : g.nodes())
    if (uses_any(*u, one)) out.push_back(u.get());
  return out;
}

// The dims of `m` outermost first when its strides are a dense permutation of
// its sizes (what a copy can restore), else empty.
std::vector<int64_t> dense_order(const ir::TensorMeta& m) {
  std::vector<int64_t> order(m.sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return m.strides[a] > m.strides[b]; });
  int64_t expect = 1;
  for (size_t i = order.size(); i-- > 0;) {
    int64_t d = order[i];
    if (m.sizes[d] != 1 && m.strides[d] != expect) return {};
    expect *= std::max<int64_t>(m.sizes[d], 1);
  }
  if (order.empty()) order.push_back(-1);  // NOTE: a 0-d value is trivially dense
  return order;
}

// Which sizes of a matrix are a contiguous width cuBLAS reads (its columns'
// for a row-major one, its rows' for a transposed one, both for any other
// layout: the padding copies those dense).
struct Widths {
  bool rows = false, cols = false;
};

Widths widths_of(const ir::TensorMeta& m) {
  const bool row_major = m.strides[1] == 1 || m.sizes[1] == 1;
  const bool col_major = m.strides[0] == 1 || m.sizes[0] == 1;
  if (row_major && !col_major) return {false, true};
  if (col_major && !row_major) return {true, false};
  return {true, true};
}

// The product's operands in torch's argument order.
struct Product {
  Node* node = nullptr;
  const Node* bias = nullptr;  // addmm's `input`
  const Node* a = nullptr;
  const Node* b = nullptr;
  int64_t m = 0, k = 0, n = 0;
};

bool product_of(Node* node, Product& p) {
  const bool addmm = node->target_name == "torch.addmm";
  if (node->target_name != "torch.mm" && !addmm) return false;
  p.node = node;
  p.a = tensor_arg(*node, addmm ? 1 : 0, addmm ? "mat1" : "input");
  p.b = tensor_arg(*node, addmm ? 2 : 1, "mat2");
  if (addmm) {
    p.bias = tensor_arg(*node, 0, "input");
    if (!p.bias || p.bias->meta->sizes.size() > 2) return false;
  }
  if (!is_matrix(p.a) || !is_matrix(p.b) || !node->meta) return false;
  p.m = p.a->meta->sizes[0], p.k = p.a->meta->sizes[1], p.n = p.b->meta->sizes[1];
  return p.m > 0 && p.k > 0 && p.n > 0;
}

// A 2-d transpose (torch.t, .t(), transpose(0, 1), permute(1, 0)) and its input.
const Node* transposed_input(const Node* x) {
  const std::string& t = x->target_name;
  const bool transpose = t == "torch.t" || t == "t" || t == "torch.transpose" || t == "transpose" ||
                         t == "torch.permute" || t == "permute";
  if (!transpose || x->args.empty() || x->args[0].kind != Arg::Kind::Node) return nullptr;
  const Node* in = x->args[0].node;
  if (!is_matrix(in) || !is_matrix(x)) return nullptr;
  if (t == "torch.t" || t == "t") return x->args.size() == 1 ? in : nullptr;
  // NOTE: a 2-d transpose or permute either swaps the two dims or is the identity; tell them
  // apart by the result's shape and strides.
  const auto& im = *in->meta;
  const auto& xm = *x->meta;
  const bool swapped = xm.sizes[0] == im.sizes[1] && xm.sizes[1] == im.sizes[0] &&
                       xm.strides[0] == im.strides[1] && xm.strides[1] == im.strides[0];
  const bool same = xm.sizes == im.sizes && xm.strides == im.strides;
  return swapped && !same ? in : nullptr;
}

// Zero-padded copies of matrices, made once per (value, padded shape) and
// placed before the first product that reads them.
class Padder {
 public:
  explicit Padder(ir::Graph& g) : g_(g) {}

  // Bytes a padding of `x` to rows x cols would copy (read and write), 0 when
  // it needs none or is already made; `copies` counts its launches.
  int64_t cost(const Node* x, int64_t rows, int64_t cols, int64_t elem, int& copies) const {
    const auto& s = x->meta->sizes;
    if (s[0] == rows && s[1] == cols) return 0;
    if (made_.count({x, rows, cols})) return 0;
    ++copies;
    return (s[0] * s[1] + rows * cols) * elem;
  }

  // `x` (a matrix) zero-padded to rows x cols, built before `pos`. A transpose
  // is padded through: its input padded, then transposed (cuBLAS reads the
  // transposed layout as it is; a pad of the view would copy it transposed).
  Node* pad(const Node* x, int64_t rows, int64_t cols, const Node* pos) {
    const auto& s = x->meta->sizes;
    Node* self = const_cast<Node*>(x);
    if (s[0] == rows && s[1] == cols) return self;
    auto key = std::make_tuple(x, rows, cols);
    if (auto it = made_.find(key); it != made_.end()) return it->second;
    Node* out;
    if (const Node* in = transposed_input(x)) {
      Node* inner = pad(in, cols, rows, pos);
      out = insert_call(g_, pos, torch_fn("t"), "", {Arg::of_node(inner)}, {}, x->meta->device);
    } else {
      out = insert_call(
          g_, pos, torch_fn("constant_pad_nd"), "",
          {Arg::of_node(self), Arg::constant(int_list({0, cols - s[1], 0, rows - s[0]})),
           Arg::constant(py_int(0))},
          {}, x->meta->device);
    }
    out->location = pos->location;
    made_[key] = out;
    return out;
  }

  // addmm's bias (a scalar, a row, a column or a matrix) padded where it
  // spans a padded dim of the product.
  Node* pad_bias(const Node* bias, int64_t mp, int64_t np, const Node* pos) {
    const auto& s = bias->meta->sizes;
    Node* self = const_cast<Node*>(bias);
    std::vector<int64_t> spec;  // constant_pad_nd's, last dim first
    bool any = false;
    for (size_t i = s.size(); i-- > 0;) {
      const int64_t target = i + 1 == s.size() ? np : mp;
      const int64_t extra = s[i] > 1 ? target - s[i] : 0;
      spec.insert(spec.end(), {0, extra});
      any = any || extra != 0;
    }
    if (!any) return self;
    Node* out =
        insert_call(g_, pos, torch_fn("constant_pad_nd"), "",
                    {Arg::of_node(self), Arg::constant(int_list(spec)), Arg::constant(py_int(0))},
                    {}, bias->meta->device);
    out->location = pos->location;
    return out;
  }

 private:
  ir::Graph& g_;
  std::map<std::tuple<const Node*, int64_t, int64_t>, Node*> made_;
};

// The layouts downstream of a product whose result now has padded rows:
// every later node's example recomputed from `changed` (seeded with the
// product's narrowed example), kept only where its strides differ. False when
// a node cannot run on the new layout or a graph output cannot be copied back.
bool plan_layouts(const ir::Graph& g, const Node* product, Examples& changed,
                  std::vector<Node*>& restore, int64_t& restore_bytes) {
  bool after = false;
  for (Node* u : nodes_of(g)) {
    if (u == product) {
      after = true;
      continue;
    }
    if (!after || !uses_any(*u, changed)) continue;
    if (u->op == ir::OpKind::Output) {
      std::vector<Node*> outs;
      for (const Arg& a : u->args) collect_nodes(a, outs);
      for (Node* o : outs) {
        if (!changed.count(o)) continue;
        if (!o->meta || dense_order(*o->meta).empty()) return false;
        if (std::find(restore.begin(), restore.end(), o) != restore.end()) continue;
        restore.push_back(o);
        int64_t numel = 1;
        for (int64_t s : o->meta->sizes) numel *= s;
        restore_bytes += 2 * numel * float_bytes(o->meta->dtype.get(), false);
      }
      continue;
    }
    PyRef ex = run_on_examples(*u, changed);
    if (!ex) return false;
    if (u->meta) {
      std::vector<int64_t> strides = strides_of(ex.get());
      if (strides.size() != u->meta->strides.size()) return false;
      if (strides == u->meta->strides) continue;
    }
    changed[u] = std::move(ex);  // NOTE: tuples (split's) and numbers are rerun downstream too
  }
  return true;
}

// `x`'s value in the layout `traced` (dense, possibly permuted), before `pos`.
Node* restored(ir::Graph& g, Node* x, const ir::TensorMeta& traced, const Node* pos) {
  std::vector<int64_t> order = dense_order(traced);
  bool identity = true;
  for (size_t i = 0; i < order.size(); ++i) identity = identity && order[i] == int64_t(i);
  if (identity || order[0] < 0)
    return insert_call(g, pos, {}, "contiguous", {Arg::of_node(x)}, {}, traced.device);
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[order[i]] = int64_t(i);
  Node* p = insert_call(g, pos, {}, "permute", {Arg::of_node(x), Arg::constant(int_list(order))},
                        {}, traced.device);
  Node* c = insert_call(g, pos, {}, "contiguous", {Arg::of_node(p)}, {}, traced.device);
  return insert_call(g, pos, {}, "permute", {Arg::of_node(c), Arg::constant(int_list(inverse))}, {},
                     traced.device);
}

// True when `o` is `cut` (the narrowed product) or reshapes it (view, reshape, flatten, ...:
// the same elements in the same order, whatever the layout).
bool reshapes(const Node* o, const Node* cut) {
  static const std::set<std::string> kReshapes = {"view",      "reshape", "_unsafe_view", "flatten",
                                                  "unflatten", "squeeze", "unsqueeze"};
  for (const Node* x = o; x; x = x->args[0].node) {
    if (x == cut) return true;
    if (x->op != ir::OpKind::CallFunction && x->op != ir::OpKind::CallMethod) return false;
    if (!kReshapes.count(op_base_name(*x)) || x->args.empty() ||
        x->args[0].kind != Arg::Kind::Node || !x->meta || !x->args[0].node->meta ||
        x->meta->dtype.get() != x->args[0].node->meta->dtype.get())
      return false;
  }
  return false;
}

// The narrowed product's example: rows of np elements, m x n of them read.
PyRef narrowed_example(const Node& product, int64_t m, int64_t n, int64_t np) {
  PyRef empty_strided = torch_fn("empty_strided");
  PyRef size = int_list({m, n}), stride = int_list({np, 1});
  PyRef args = PyRef::steal(PyTuple_Pack(2, size.get(), stride.get()));
  PyRef kwargs = PyRef::steal(PyDict_New());
  PyRef meta = PyRef::steal(PyUnicode_FromString("meta"));
  if (!args || !kwargs || !meta || PyDict_SetItemString(kwargs.get(), "device", meta.get()) < 0 ||
      PyDict_SetItemString(kwargs.get(), "dtype", product.meta->dtype.get()) < 0)
    throw PythonError();
  PyRef ex = PyRef::steal(PyObject_Call(empty_strided.get(), args.get(), kwargs.get()));
  if (!ex) throw PythonError();
  return ex;
}

}  // namespace

bool padding_pays(int64_t m, int64_t k, int64_t n, int64_t mp, int64_t kp, int64_t np,
                  int64_t copied_bytes, int copies) {
  constexpr double kFlopsPerByte = 300.0;  // H100: ~990 TFLOP/s bf16 over 3.35 TB/s
  constexpr double kAlign1Slowdown = 3.0;
  constexpr double kLaunchBytes = 15e6;  // ~5 us of memory traffic
  const double flops = 2.0 * double(m) * double(k) * double(n);
  const double padded_flops = 2.0 * double(mp) * double(kp) * double(np);
  const double unpadded = kAlign1Slowdown * flops / kFlopsPerByte;
  const double padded = padded_flops / kFlopsPerByte + double(copied_bytes) + copies * kLaunchBytes;
  return padded < unpadded;
}

int pad_unaligned_matmuls(ir::Graph& g, std::optional<bool> setting) {
  if (setting == false) return 0;
  const bool forced = setting == true;
  Padder padder(g);
  int padded = 0;
  for (Node* node : nodes_of(g)) {
    Product p;
    if (!product_of(node, p)) continue;
    const auto& meta = *node->meta;
    if (!forced && device_type(meta.device.get()) != "cuda") continue;
    const int64_t elem = float_bytes(meta.dtype.get(), !forced);
    if (elem == 0 || p.a->meta->dtype.get() != meta.dtype.get() ||
        p.b->meta->dtype.get() != meta.dtype.get())
      continue;
    // NOTE: a size matters where it is the contiguous width of an operand or of the (row-major)
    // result: M only for a transposed `a` (the backward's grad_w = g.t() @ x).
    const Widths wa = widths_of(*p.a->meta), wb = widths_of(*p.b->meta);
    const bool pad_m = wa.rows, pad_k = wa.cols || wb.rows;
    const int64_t mp = pad_m ? aligned(p.m) : p.m, kp = pad_k ? aligned(p.k) : p.k;
    const int64_t np = aligned(p.n);
    if (mp == p.m && kp == p.k && np == p.n) continue;
    Examples changed;
    std::vector<Node*> restore;
    int64_t restore_bytes = 0;
    if (np != p.n) {
      changed[node] = narrowed_example(*node, p.m, p.n, np);
      if (!plan_layouts(g, node, changed, restore, restore_bytes)) continue;
    }
    if (!forced) {
      int copies = static_cast<int>(restore.size());
      int64_t bytes = restore_bytes + padder.cost(p.a, mp, kp, elem, copies) +
                      padder.cost(p.b, kp, np, elem, copies);
      if (p.bias && (mp != p.m || np != p.n)) {
        ++copies;
        bytes += 2 * mp * np * elem;
      }
      if (!padding_pays(p.m, p.k, p.n, mp, kp, np, bytes, copies)) continue;
    }
    std::vector<Arg> args;
    if (p.bias) args.push_back(Arg::of_node(padder.pad_bias(p.bias, mp, np, node)));
    args.push_back(Arg::of_node(padder.pad(p.a, mp, kp, node)));
    args.push_back(Arg::of_node(padder.pad(p.b, kp, np, node)));
    Node* wide = insert_call(g, node, node->target, "", std::move(args), node->kwargs, meta.device);
    Node* cut = wide;
    const std::pair<int64_t, int64_t> narrowings[] = {{1, p.n}, {0, p.m}};
    for (auto [dim, size] : narrowings) {
      if (cut->meta->sizes[dim] == size) continue;
      cut = insert_call(g, node, {}, "narrow",
                        {Arg::of_node(cut), Arg::constant(py_int(dim)), Arg::constant(py_int(0)),
                         Arg::constant(py_int(size))},
                        {}, meta.device);
    }
    wide->location = cut->location = node->location;
    replace_uses(users_of(g, node), node, cut);
    changed.erase(node);
    std::vector<std::pair<Node*, ir::TensorMeta>> traced;
    for (Node* o : restore) traced.push_back({o, *o->meta});
    for (auto& [u, ex] : changed) {
      Node* un = const_cast<Node*>(u);
      if (un->meta) un->meta->strides = strides_of(ex.get());
      un->example = ex;
    }
    // NOTE: outputs that reshape the product (the logits returned to the caller, the product
    // saved for backward) share one copy of it, each a view of that copy (GPT-2 8x512: one
    // 412 MB copy, not two).
    Node* copy = nullptr;
    for (auto& [o, layout] : traced) {
      Node* now = o == node ? cut : o;  // NOTE: the product itself returned
      Node* r = nullptr;
      if (contiguous(layout) && contiguous(*node->meta) && reshapes(now, cut)) {
        if (!copy) copy = restored(g, cut, *node->meta, g.output());
        r = now == cut ? copy
                       : insert_call(g, g.output(), {}, "reshape",
                                     {Arg::of_node(copy), Arg::constant(int_list(layout.sizes))},
                                     {}, meta.device);
      } else {
        r = restored(g, now, layout, g.output());
      }
      replace_uses({g.output()}, now, r);
    }
    g.erase(node);
    padded++;
  }
  return padded;
}

}  // namespace tl::passes
