#include "passes/split_reductions.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "passes/dtype.h"
#include "passes/graph_rewrite.h"
#include "passes/lowering.h"

namespace tl::passes {

using ir::Arg;
using ir::Node;

int64_t split_parts(int64_t results, int64_t row, int64_t outer) {
  if (results * 32 >= kSplitLanes || row < kSplitMinRow) return 1;
  int64_t want = (kSplitLanes / 32 + results - 1) / results;
  int64_t best = 1;
  for (int64_t s = 2; s <= outer; ++s) {
    if (outer % s != 0) continue;
    if (row / s < kSplitMinRow / 4) break;
    best = s;
    if (s >= want) break;
  }
  return best;
}

namespace {

int64_t numel(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}

PyRef py_int(int64_t v) { return PyRef::steal(PyLong_FromLongLong(v)); }
PyRef py_float(double v) { return PyRef::steal(PyFloat_FromDouble(v)); }

Arg ints(const std::vector<int64_t>& v) {
  std::vector<Arg> items;
  for (int64_t x : v) items.push_back(Arg::constant(py_int(x)));
  return Arg::tuple(std::move(items));
}

// The reduced dims (sorted, non-negative) of a `dim` argument; all dims when absent or None.
std::optional<std::vector<int64_t>> reduced_dims(const Arg* a, size_t rank) {
  std::vector<int64_t> d;
  if (is_none_or_absent(a)) {
    for (size_t i = 0; i < rank; ++i) d.push_back(int64_t(i));
    return d;
  }
  std::vector<const Arg*> items;
  std::vector<Arg> unpacked;  // a constant tuple or list of ints
  if (a->kind == Arg::Kind::Const &&
      (PyTuple_Check(a->value.get()) || PyList_Check(a->value.get()))) {
    PyObject* seq = a->value.get();
    Py_ssize_t n = PySequence_Size(seq);
    for (Py_ssize_t i = 0; i < n; ++i)
      unpacked.push_back(Arg::constant(PyRef::steal(PySequence_GetItem(seq, i))));
    for (const Arg& i : unpacked) items.push_back(&i);
  } else if (a->kind == Arg::Kind::Const) {
    items.push_back(a);
  } else if (a->kind == Arg::Kind::Tuple || a->kind == Arg::Kind::List) {
    for (const Arg& i : a->items) items.push_back(&i);
  } else {
    return std::nullopt;
  }
  for (const Arg* i : items) {
    if (i->kind != Arg::Kind::Const || !PyLong_Check(i->value.get())) return std::nullopt;
    int64_t v = PyLong_AsLongLong(i->value.get());
    if (v < 0) v += int64_t(rank);
    if (v < 0 || v >= int64_t(rank)) return std::nullopt;
    d.push_back(v);
  }
  std::sort(d.begin(), d.end());
  d.erase(std::unique(d.begin(), d.end()), d.end());
  if (d.empty()) return std::nullopt;  // sum(x, ()) reduces everything in some versions
  return d;
}

std::vector<Node*> users_of(ir::Graph& g, const Node* n) {
  std::vector<Node*> out;
  for (auto& m : g.nodes())
    for (const Node* in : node_inputs(*m))
      if (in == n) {
        out.push_back(m.get());
        break;
      }
  return out;
}

struct Site {
  Node* node;
  Node* x;
  std::vector<int64_t> dims;  // reduced dims of x
  int64_t split_dim = -1, parts = 1;
  // x viewed with split_dim in (parts, rest) (empty: parts = the whole split dim, x read as it
  // is), and the dims of that view the partials reduce.
  std::vector<int64_t> split_sizes, dims2;
};

// Which reduced dim to split (largest stride: outermost in memory) and into how many parts.
bool plan(Site& s) {
  const auto& m = *s.x->meta;
  int64_t row = 1;
  for (int64_t d : s.dims) row *= m.sizes[d];
  int64_t results = numel(m.sizes) / std::max<int64_t>(row, 1);
  int64_t best = -1;
  for (int64_t d : s.dims)
    if (m.sizes[d] > 1 && (best < 0 || m.strides[d] > m.strides[best])) best = d;
  if (best < 0) return false;
  s.parts = split_parts(results, row, m.sizes[best]);
  if (s.parts < 2) return false;
  s.split_dim = best;
  if (row / m.sizes[best] >= kSplitMinPart && m.sizes[best] <= kSplitMaxParts) {
    // A part for each point of the split dim: the partials reduce x itself over the other
    // reduced dims, no view splitting an axis in two. NOTE: a pointwise producer of x (a
    // batch norm backward's ReLU gradient and its x - mean) is computed inside the partials'
    // kernel only when its axes map one to one onto the kernel's: through a split view it
    // was a kernel of its own, writing and reading back a full-size value.
    s.parts = m.sizes[best];
    for (int64_t d : s.dims)
      if (d != best) s.dims2.push_back(d);
    return true;
  }
  for (size_t d = 0; d < m.sizes.size(); ++d) {
    if (int64_t(d) == best) {
      s.split_sizes.push_back(s.parts);
      s.split_sizes.push_back(m.sizes[d] / s.parts);
    } else {
      s.split_sizes.push_back(m.sizes[d]);
    }
  }
  for (int64_t d : s.dims) s.dims2.push_back(d < best ? d : d + 1);
  return true;
}

bool float_tensor(const Node* x) {
  if (!x || !x->meta) return false;
  auto t = scalar_type_of(x->meta->dtype.get());
  return t && (*t == ir::ScalarType::F32 || ir::is_half(*t));
}

class Splitter {
 public:
  explicit Splitter(ir::Graph& g) : g_(g) {}

  // sum / mean without a dtype argument.
  bool sum_or_mean(Node* n, bool mean) {
    Site s{n, const_cast<Node*>(tensor_arg(*n, 0, "input")), {}};
    if (!float_tensor(s.x) || !n->meta || !is_none_or_absent(find_arg(*n, 3, "dtype")))
      return false;
    const Arg* keep = find_arg(*n, 2, "keepdim");
    if (keep && (keep->kind != Arg::Kind::Const || !PyBool_Check(keep->value.get()))) return false;
    auto dims = reduced_dims(find_arg(*n, 1, "dim"), s.x->meta->sizes.size());
    if (!dims) return false;
    s.dims = *dims;
    if (!plan(s)) return false;
    const PyRef& dev = s.x->meta->device;
    bool keepdim = keep && keep->value.get() == Py_True;
    Node* total = partial_then_fold(s, "sum", "sum", keepdim, n);
    if (mean) total = call(n, "div", {Arg::of_node(total), Arg::constant(py_float(row(s)))}, dev);
    finish(n, total, n);
    dead_.push_back(n);
    return true;
  }

  // var_mean(x, dim, correction=c, keepdim=k) whose users are its two getitems.
  bool var_mean(Node* n) {
    Site s{n, const_cast<Node*>(tensor_arg(*n, 0, "input")), {}};
    if (!float_tensor(s.x)) return false;
    double correction = 1;
    const Arg* unbiased = find_arg(*n, 2, "unbiased");
    if (unbiased && !number_arg(*n, 2, "unbiased", &correction)) return false;
    const Arg* corr = find_arg(*n, size_t(-1), "correction");
    if (!is_none_or_absent(corr) && !number_arg(*n, size_t(-1), "correction", &correction))
      return false;
    const Arg* keep = find_arg(*n, 3, "keepdim");
    if (keep && (keep->kind != Arg::Kind::Const || !PyBool_Check(keep->value.get()))) return false;
    auto dims = reduced_dims(find_arg(*n, 1, "dim"), s.x->meta->sizes.size());
    if (!dims) return false;
    s.dims = *dims;
    Node *var_out = nullptr, *mean_out = nullptr;
    for (Node* u : users_of(g_, n)) {
      double i = -1;
      if (op_base_name(*u) != "getitem" || !u->meta || !number_arg(*u, 1, "", &i)) return false;
      if (i != 0 && i != 1) return false;
      (i == 0 ? var_out : mean_out) = u;
    }
    if (!plan(s) || row(s) - correction <= 0) return false;
    const PyRef& dev = s.x->meta->device;
    Node* x2 = view(s, n);
    if (!(scalar_type_of(s.x->meta->dtype.get()) == ir::ScalarType::F32))
      x2 = g_call_method(n, "float", {Arg::of_node(x2)}, dev);
    auto over = [&](const char* fn, Node* v, const Arg& d,
                    std::vector<std::pair<std::string, Arg>> kw) {
      kw.emplace_back("keepdim", Arg::constant(PyRef::borrow(Py_True)));
      return insert_call(g_, n, torch_fn(fn), "", {Arg::of_node(v), d}, std::move(kw), dev);
    };
    Arg d2 = ints(s.dims2), split = ints({s.split_dim});
    // NOTE: var's own lowering would compute the part's mean again (another read of x);
    // written as mean((x - mean)^2), both come out of one two-pass kernel, as layer norm's do.
    Node* part_mean = over("mean", x2, d2, {});
    Node* dx = call(n, "sub", {Arg::of_node(x2), Arg::of_node(part_mean)}, dev);
    Node* part_var =
        over("mean", call(n, "mul", {Arg::of_node(dx), Arg::of_node(dx)}, dev), d2, {});
    Node* mean = over("mean", part_mean, split, {});
    Node* dev_ = call(n, "sub", {Arg::of_node(part_mean), Arg::of_node(mean)}, dev);
    Node* between =
        over("mean", call(n, "mul", {Arg::of_node(dev_), Arg::of_node(dev_)}, dev), split, {});
    Node* within = over("mean", part_var, split, {});
    Node* var = call(n, "add", {Arg::of_node(within), Arg::of_node(between)}, dev);
    if (correction != 0)
      var = call(n, "mul",
                 {Arg::of_node(var), Arg::constant(py_float(row(s) / (row(s) - correction)))}, dev);
    if (var_out) finish(var_out, var, n);
    if (mean_out) finish(mean_out, mean, n);
    for (Node* u : {var_out, mean_out})
      if (u) dead_.push_back(u);
    dead_.push_back(n);
    return true;
  }

 private:
  static double row(const Site& s) {
    double r = 1;
    for (int64_t d : s.dims) r *= double(s.x->meta->sizes[d]);
    return r;
  }

  Node* call(Node* pos, const char* fn, std::vector<Arg> args, const PyRef& dev) {
    return insert_call(g_, pos, torch_fn(fn), "", std::move(args), {}, dev);
  }
  Node* g_call_method(Node* pos, const char* m, std::vector<Arg> args, const PyRef& dev) {
    return insert_call(g_, pos, {}, m, std::move(args), {}, dev);
  }
  Node* view(const Site& s, Node* pos) {
    if (s.split_sizes.empty()) return s.x;
    return g_call_method(pos, "view", {Arg::of_node(s.x), ints(s.split_sizes)}, s.x->meta->device);
  }

  // fn over the split view's reduced dims (float32 partials), then fold over the parts, with
  // `keepdim` as the reduction replaced: the fold's result has its sizes (through a split
  // view the partials have one dim more: the fold drops it). NOTE: with keepdim off, the
  // partials drop their reduced dims too, so the parts' axis sits among the kept ones;
  // a fold ending in old's sizes needs no reshape after it, a view with a reader in every
  // kernel (the weight and the input gradient of a batch norm read sum(dy)) that kept the
  // fold's epilogues (the bias gradient's cast, sum(dy * xhat) * invstd) kernels of their own.
  Node* partial_then_fold(const Site& s, const char* fn, const char* fold, bool keepdim,
                          Node* pos) {
    const PyRef& dev = s.x->meta->device;
    Node* x2 = view(s, pos);
    PyRef f32 = torch_fn("float32");
    Node* part =
        insert_call(g_, pos, torch_fn(fn), "", {Arg::of_node(x2), ints(s.dims2)},
                    {{"keepdim", Arg::constant(PyRef::borrow(keepdim ? Py_True : Py_False))},
                     {"dtype", Arg::constant(f32)}},
                    dev);
    return insert_call(
        g_, pos, torch_fn(fold), "", {Arg::of_node(part), ints({parts_axis(s, keepdim)})},
        {{"keepdim",
          Arg::constant(PyRef::borrow(keepdim && s.split_sizes.empty() ? Py_True : Py_False))}},
        dev);
  }

  // The parts' axis in the partials: split_dim with keepdim, else split_dim less the reduced
  // dims before it (dropped).
  static int64_t parts_axis(const Site& s, bool keepdim) {
    if (keepdim) return s.split_dim;
    int64_t axis = s.split_dim;
    for (int64_t d : s.dims2)
      if (d < s.split_dim) --axis;
    return axis;
  }

  // `value` (float32) in place of `old`: rounded to old's dtype and reshaped to old's sizes
  // where they differ.
  void finish(Node* old, Node* value, Node* pos) {
    const PyRef& dev = old->meta->device;
    if (scalar_type_of(old->meta->dtype.get()) != ir::ScalarType::F32)
      value = g_call_method(pos, "to", {Arg::of_node(value), Arg::constant(old->meta->dtype)}, dev);
    if (!value->meta || value->meta->sizes != old->meta->sizes)
      value = g_call_method(pos, "reshape", {Arg::of_node(value), ints(old->meta->sizes)}, dev);
    replace_uses(users_of(g_, old), old, value);
  }

  ir::Graph& g_;

 public:
  std::vector<Node*> dead_;  // replaced nodes, users first: erased once every site is done
};

}  // namespace

int split_reductions(ir::Graph& g) {
  std::vector<Node*> todo;
  for (auto& n : g.nodes())
    if (n->op == ir::OpKind::CallFunction || n->op == ir::OpKind::CallMethod)
      todo.push_back(n.get());
  Splitter s(g);
  int count = 0;
  for (Node* n : todo) {
    std::string op = op_base_name(*n);
    if (op == "sum" || op == "mean")
      count += s.sum_or_mean(n, op == "mean");
    else if (op == "var_mean")
      count += s.var_mean(n);
  }
  for (Node* n : s.dead_) g.erase(n);
  return count;
}

}  // namespace tl::passes
