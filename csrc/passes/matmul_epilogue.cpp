#include "passes/matmul_epilogue.h"

#include <cmath>
#include <functional>

#include "core/errors.h"
#include "ir/dtype.h"
#include "passes/graph_info.h"
#include "passes/graph_rewrite.h"
#include "passes/lowering.h"

namespace tl::passes {
namespace {

using ir::Arg;
using ir::Node;

bool is_view_name(const std::string& base) { return base == "view" || base == "reshape"; }

std::optional<ir::ScalarType> dtype_of(const Node* n) {
  if (!n || !n->meta) return std::nullopt;
  return ir::scalar_type_of(n->meta->dtype.get());
}

// A string constant argument ("tanh"), else "".
std::string str_arg(const Node& n, size_t pos, const char* name) {
  const Arg* a = find_arg(n, pos, name);
  if (!a || a->kind != Arg::Kind::Const || !PyUnicode_Check(a->value.get())) return "";
  const char* s = PyUnicode_AsUTF8(a->value.get());
  if (!s) PyErr_Clear();
  return s ? s : "";
}

size_t arg_count(const Node& n) { return n.args.size() + n.kwargs.size(); }

// The readers of `n` (through reshapes) are pointwise ops of ours or the graph's output: false
// when one is anything else; counts the pointwise ones and notes an output.
bool fusable_readers(const Node* n, const GraphInfo& info, int& pointwise, bool& output,
                     int depth = 0) {
  if (depth > 4) return false;
  for (const Node* u : info.users_of(n)) {
    if (u->op == ir::OpKind::Output) {
      output = true;
      continue;
    }
    std::optional<OpLowering> l = lower_node(*u, info);
    if (!l) return false;
    if (l->kind == OpLowering::Kind::View || l->kind == OpLowering::Kind::StridedView) {
      if (!fusable_readers(u, info, pointwise, output, depth + 1)) return false;
    } else if (l->kind == OpLowering::Kind::Pointwise) {
      ++pointwise;
    } else {
      return false;
    }
  }
  return true;
}

// Every path from `n` to its readers (through reshapes) ends in a pointwise op of ours or in the
// graph's output, at least one in a pointwise op: a bias added after `n` fuses there. A path to
// the output (a training forward saving the pre-activation for backward) sets `to_output`: the
// kernel with the add then also writes the sum.
bool pointwise_readers(const Node* n, const GraphInfo& info, bool* to_output) {
  int pointwise = 0;
  bool output = false;
  if (!fusable_readers(n, info, pointwise, output) || pointwise == 0) return false;
  *to_output = output;
  return true;
}

// No kernel of ours reads `n` (through reshapes): its readers are extern calls or the output.
bool only_extern_readers(const Node* n, const GraphInfo& info, int depth = 0) {
  if (depth > 4) return false;
  for (const Node* u : info.users_of(n)) {
    if (u->op == ir::OpKind::Output) continue;
    std::optional<OpLowering> l = lower_node(*u, info);
    if (!l) continue;
    if (l->kind == OpLowering::Kind::View && only_extern_readers(u, info, depth + 1)) continue;
    return false;
  }
  return true;
}

// A number constant argument close to `c` (relative 1e-6) and a node argument of binary op
// `n` (either order: `0.5 * x`, `x * 0.5`); else null.
const Node* with_constant(const Node* n, const char* base, double c) {
  if (!n || op_base_name(*n) != base || n->args.size() != 2 || !n->kwargs.empty()) return nullptr;
  for (int i = 0; i < 2; ++i) {
    const Arg& k = n->args[i];
    const Arg& x = n->args[1 - i];
    if (k.kind != Arg::Kind::Const || x.kind != Arg::Kind::Node) continue;
    double v = PyFloat_AsDouble(k.value.get());
    if (v == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      continue;
    }
    if (std::abs(v - c) <= 1e-6 * std::abs(c)) return x.node;
  }
  return nullptr;
}

// Binary op `n` of the nodes `a` and `b` (either order).
bool of_nodes(const Node* n, const char* base, const Node* a, const Node* b) {
  if (!n || op_base_name(*n) != base || n->args.size() != 2 || !n->kwargs.empty()) return false;
  const Arg& x = n->args[0];
  const Arg& y = n->args[1];
  if (x.kind != Arg::Kind::Node || y.kind != Arg::Kind::Node) return false;
  return (x.node == a && y.node == b) || (x.node == b && y.node == a);
}

// The one reader of `n`, else null.
Node* only_reader(const Node* n, const GraphInfo& info) {
  const auto& users = info.users_of(n);
  return users.size() == 1 && users[0]->op != ir::OpKind::Output ? const_cast<Node*>(users[0])
                                                                 : nullptr;
}

// GPT-2's tanh GELU of `v` written out: 0.5 * v * (1 + tanh(sqrt(2 / pi) * (v + 0.044715 *
// pow(v, 3)))), every op read only by the next. Sets site.activation (the last op) and
// site.formula; false when `v`'s readers are anything else.
bool tanh_gelu_formula(EpilogueSite& site, const Node* v, const GraphInfo& info) {
  const auto& users = info.users_of(v);
  if (users.size() != 3) return false;
  const Node *pow = nullptr, *half = nullptr, *sum = nullptr;
  for (const Node* u : users) {
    double e = 0;
    if (op_base_name(*u) == "pow" && arg_count(*u) == 2 && tensor_arg(*u, 0, "input") == v &&
        number_arg(*u, 1, "exponent", &e) && e == 3)
      pow = u;
    else if (with_constant(u, "mul", 0.5) == v)
      half = u;
    else if (op_base_name(*u) == "add")
      sum = u;
  }
  if (!pow || !half || !sum) return false;
  Node* cube = only_reader(pow, info);
  if (with_constant(cube, "mul", 0.044715) != pow || only_reader(cube, info) != sum ||
      !of_nodes(sum, "add", v, cube))
    return false;
  Node* scaled = only_reader(sum, info);
  if (with_constant(scaled, "mul", 0.7978845608028654) != sum) return false;
  Node* tanh = only_reader(scaled, info);
  if (!tanh || op_base_name(*tanh) != "tanh" || arg_count(*tanh) != 1 ||
      tensor_arg(*tanh, 0, "input") != scaled)
    return false;
  Node* one_plus = only_reader(tanh, info);
  if (with_constant(one_plus, "add", 1.0) != tanh) return false;
  Node* last = only_reader(one_plus, info);
  if (!last || only_reader(half, info) != last || !of_nodes(last, "mul", half, one_plus))
    return false;
  const std::initializer_list<const Node*> ops = {last, one_plus, tanh, scaled,
                                                  sum,  cube,     pow,  half};
  for (const Node* n : ops)
    if (!n->meta || n->meta->requires_grad || n->meta->sizes != v->meta->sizes ||
        n->meta->dtype.get() != v->meta->dtype.get())
      return false;
  if (!contiguous(*last->meta)) return false;
  site.activation = last;
  site.gelu = true;
  site.formula = {one_plus,
                  tanh,
                  scaled,
                  const_cast<Node*>(sum),
                  cube,
                  const_cast<Node*>(pow),
                  const_cast<Node*>(half)};
  return true;
}

// The relu / tanh-GELU that is `site.product`'s one reader, through reshapes of contiguous
// values; sets site.reshapes, activation, gelu.
void find_activation(EpilogueSite& site, const GraphInfo& info) {
  const Node* cur = site.product;
  std::vector<Node*> reshapes;
  for (int depth = 0; depth < 4; ++depth) {
    const auto& users = info.users_of(cur);
    if (users.size() == 3 && tanh_gelu_formula(site, cur, info)) {
      site.reshapes = std::move(reshapes);
      site.activation_alone = only_extern_readers(site.activation, info);
      return;
    }
    if (users.size() != 1 || users[0]->op == ir::OpKind::Output) return;
    Node* u = const_cast<Node*>(users[0]);
    if (!u->meta || u->meta->requires_grad || !contiguous(*u->meta) ||
        u->meta->dtype.get() != site.product->meta->dtype.get())
      return;
    const std::string base = op_base_name(*u);
    const Node* first = tensor_arg(*u, 0, "input");
    if (first != cur) return;
    if (is_view_name(base)) {
      reshapes.push_back(u);
      cur = u;
      continue;
    }
    bool relu = base == "relu" && arg_count(*u) == 1;
    bool gelu = base == "gelu" && str_arg(*u, 1, "approximate") == "tanh" && arg_count(*u) == 2;
    if (!relu && !gelu) return;
    site.reshapes = std::move(reshapes);
    site.activation = u;
    site.gelu = gelu;
    site.activation_alone = only_extern_readers(u, info);
    return;
  }
}

PyRef int_tuple(const std::vector<int64_t>& v) {
  PyRef t = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(v.size())));
  if (!t) throw PythonError();
  for (size_t i = 0; i < v.size(); ++i) {
    PyObject* x = PyLong_FromLongLong(v[i]);
    if (!x) throw PythonError();
    PyTuple_SET_ITEM(t.get(), static_cast<Py_ssize_t>(i), x);
  }
  return t;
}

bool same_layout(const Node* a, const ir::TensorMeta& m) {
  return a->meta && a->meta->sizes == m.sizes && a->meta->strides == m.strides &&
         a->meta->dtype.get() == m.dtype.get();
}

// Erases `made` (newest first): a rewrite that did not keep the layouts.
void undo(ir::Graph& g, std::vector<Node*>& made) {
  for (auto it = made.rbegin(); it != made.rend(); ++it) g.erase(*it);
  made.clear();
}

bool bias_in_kernel(ir::Graph& g, const EpilogueSite& s) {
  Node* p = s.product;
  const ir::TensorMeta meta = *p->meta;
  const PyRef& dev = meta.device;
  std::vector<Node*> readers = readers_of(g, p);
  if (readers.empty()) return false;
  std::vector<Node*> made;
  try {
    Node* bare = p;
    if (!s.linear) {
      bare = insert_call(
          g, p, torch_fn("mm"), "",
          {Arg::of_node(const_cast<Node*>(s.input)), Arg::of_node(const_cast<Node*>(s.weight))}, {},
          dev);
      made.push_back(bare);
      bare->location = p->location;
    }
    // NOTE: a linear's meta (and the add's, run on its example) are the same with or without
    // its bias; the bias leaves the call only once nothing can throw.
    Node* sum = insert_call(g, readers[0], torch_fn("add"), "",
                            {Arg::of_node(bare), Arg::of_node(const_cast<Node*>(s.bias))}, {}, dev);
    made.push_back(sum);
    sum->location = p->location;
    if (!same_layout(bare, meta) || !same_layout(sum, meta)) {
      undo(g, made);
      return false;
    }
    if (s.linear) *find_arg(*p, 2, "bias") = Arg::constant(PyRef::borrow(Py_None));
    replace_uses(readers, p, sum);
    if (!s.linear) g.erase(p);
  } catch (...) {
    undo(g, made);
    throw;
  }
  return true;
}

bool cublas_activation(ir::Graph& g, const EpilogueSite& s) {
  Node* p = s.product;
  Node* act = s.activation;
  const PyRef& dev = p->meta->device;
  std::vector<Node*> made;
  Node* out = nullptr;
  try {
    Node* x = const_cast<Node*>(s.input);
    if (x->meta->sizes.size() != 2) {
      x = insert_call(g, p, {}, "reshape", {Arg::of_node(x), Arg::constant(int_tuple({-1, s.k}))},
                      {}, dev);
      made.push_back(x);
    }
    Node* w = const_cast<Node*>(s.weight);
    if (s.linear) {
      w = insert_call(g, p, {}, "t", {Arg::of_node(w)}, {}, dev);
      made.push_back(w);
    }
    Node* y =
        insert_call(g, p, torch_fn("_addmm_activation"), "",
                    {Arg::of_node(const_cast<Node*>(s.bias)), Arg::of_node(x), Arg::of_node(w)},
                    {{"use_gelu", Arg::constant(PyRef::borrow(s.gelu ? Py_True : Py_False))}}, dev);
    made.push_back(y);
    y->location = p->location;
    out = y;
    if (y->meta->sizes != act->meta->sizes) {
      out = insert_call(g, p, {}, "view",
                        {Arg::of_node(y), Arg::constant(int_tuple(act->meta->sizes))}, {}, dev);
      made.push_back(out);
    }
    if (!same_layout(out, *act->meta)) {
      undo(g, made);
      return false;
    }
  } catch (...) {
    undo(g, made);
    throw;
  }
  replace_uses(readers_of(g, act), act, out);
  g.erase(act);
  for (Node* n : s.formula) g.erase(n);
  for (auto it = s.reshapes.rbegin(); it != s.reshapes.rend(); ++it) g.erase(*it);
  g.erase(p);
  return true;
}

}  // namespace

std::vector<EpilogueSite> find_matmul_epilogues(const ir::Graph& g) {
  std::vector<EpilogueSite> out;
  GraphInfo info;
  bool analyzed = false;
  for (auto& node : g.nodes()) {
    Node* p = node.get();
    if (p->op != ir::OpKind::CallFunction) continue;
    const bool linear =
        p->target_name == "torch._C._nn.linear" || p->target_name == "torch.nn.functional.linear";
    const bool addmm = p->target_name == "torch.addmm";
    if (!linear && !addmm) continue;
    if (!p->meta || p->meta->requires_grad) continue;
    EpilogueSite s;
    s.product = p;
    s.linear = linear;
    s.input = tensor_arg(*p, linear ? 0 : 1, linear ? "input" : "mat1");
    s.weight = tensor_arg(*p, linear ? 1 : 2, linear ? "weight" : "mat2");
    s.bias = tensor_arg(*p, linear ? 2 : 0, linear ? "bias" : "input");
    if (!s.input || !s.weight || !s.bias) continue;
    if (addmm) {  // beta = alpha = 1 (keywords) only
      bool plain = p->args.size() == 3;
      for (const auto& kv : p->kwargs) {
        double v = 0;
        plain = plain && (kv.first == "beta" || kv.first == "alpha") &&
                number_arg(*p, 99, kv.first.c_str(), &v) && v == 1;
      }
      if (!plain) continue;
    } else if (arg_count(*p) != 3) {
      continue;
    }
    auto t = dtype_of(p);
    if (!t || !(*t == ir::ScalarType::F32 || ir::is_half(*t))) continue;
    if (dtype_of(s.input) != t || dtype_of(s.weight) != t || dtype_of(s.bias) != t) continue;
    const auto& xs = s.input->meta->sizes;
    const auto& ws = s.weight->meta->sizes;
    if (ws.size() != 2 || xs.size() < 2 || (addmm && xs.size() != 2)) continue;
    s.k = xs.back();
    s.n = linear ? ws[0] : ws[1];
    if ((linear ? ws[1] : ws[0]) != s.k) continue;
    if (s.bias->meta->sizes != std::vector<int64_t>{s.n}) continue;
    s.m = 1;
    for (size_t i = 0; i + 1 < xs.size(); ++i) s.m *= xs[i];
    if (s.m == 0 || s.k == 0 || s.n == 0) continue;
    if (!analyzed) info = analyze_graph(g), analyzed = true;
    s.forms.push_back(EpilogueForm::Addmm);
    if (pointwise_readers(p, info, &s.product_out)) s.forms.push_back(EpilogueForm::BiasInKernel);
    // NOTE: a linear over a >2-d input not laid out row-major would need a copy to flatten.
    if (xs.size() == 2 || contiguous(*s.input->meta)) find_activation(s, info);
    // NOTE: torch's CPU _addmm_activation computes the exact GELU (CUDA's: the tanh one,
    // in cuBLASLt's epilogue or its fallback), so only a CUDA product takes a GELU there.
    if (s.activation && (!s.gelu || device_type(p->meta->device.get()) == "cuda"))
      s.forms.push_back(EpilogueForm::Activation);
    if (s.forms.size() > 1) out.push_back(std::move(s));
  }
  return out;
}

bool apply_matmul_epilogue(ir::Graph& g, const EpilogueSite& site, EpilogueForm form) {
  switch (form) {
    case EpilogueForm::Addmm:
      return true;
    case EpilogueForm::BiasInKernel:
      return bias_in_kernel(g, site);
    case EpilogueForm::Activation:
      return site.activation && cublas_activation(g, site);
  }
  return false;
}

std::string form_label(const EpilogueSite& site, EpilogueForm form) {
  switch (form) {
    case EpilogueForm::Addmm:
      return "addmm";
    case EpilogueForm::BiasInKernel:
      return "mm+bias";
    case EpilogueForm::Activation:
      return std::string("addmm_activation(") + (site.gelu ? "gelu" : "relu") + ")";
  }
  return "";
}

}  // namespace tl::passes
