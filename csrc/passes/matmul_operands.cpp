#include "passes/matmul_operands.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/errors.h"
#include "passes/graph_rewrite.h"

namespace tl::passes {
namespace {

using ir::Arg;
using ir::Node;

// How torch reads a product's operand: through bmm (a bmm, or a matmul of
// two operands of at least three dims: [batch, rows, cols] by a reshape),
// folded (a linear, or a matmul by a matrix or vector: [rows, cols] by a
// reshape of its leading dims), or not at all here (2-d products read
// transposed operands as they are).
enum class Read { None, Batched, Folded };

bool is_call(const Node& n) {
  return (n.op == ir::OpKind::CallFunction || n.op == ir::OpKind::CallMethod) && n.meta;
}

bool is_linear(const Node& n) {
  return n.target_name == "torch._C._nn.linear" || n.target_name == "torch.nn.functional.linear";
}

bool is_bmm(const Node& n) { return n.target_name == "torch.bmm" || n.target_name == "bmm"; }

// baddbmm(input, batch1, batch2): the products of BLOOM's and GPT-NeoX's attention.
bool is_baddbmm(const Node& n) {
  return n.target_name == "torch.baddbmm" || n.target_name == "baddbmm";
}

bool is_matmul(const Node& n) {
  const std::string& t = n.target_name;
  return t == "torch.matmul" || t == "matmul" || t == "operator.matmul";
}

// The product's two operands (a linear's input and weight).
std::pair<const Node*, const Node*> operands(const Node& n) {
  if (is_linear(n)) return {tensor_arg(n, 0, "input"), tensor_arg(n, 1, "weight")};
  if (is_baddbmm(n)) return {tensor_arg(n, 1, "batch1"), tensor_arg(n, 2, "batch2")};
  return {tensor_arg(n, 0, "input"), tensor_arg(n, 1, is_bmm(n) ? "mat2" : "other")};
}

Read read_of(const Node& n) {
  if (!is_call(n) || (!is_bmm(n) && !is_baddbmm(n) && !is_matmul(n) && !is_linear(n)) ||
      find_arg(n, 99, "out"))  // NOTE: keyword-only
    return Read::None;
  auto [a, b] = operands(n);
  if (!a || !b) return Read::None;
  const size_t ra = a->meta->sizes.size(), rb = b->meta->sizes.size();
  if (ra >= 3 && rb >= 3 && !is_linear(n)) return Read::Batched;
  // NOTE: a matmul of a matrix by a batch folds the batch's transpose: left to torch.
  if (ra >= 3 && rb <= 2) return Read::Folded;
  return Read::None;
}

// The batch sizes both operands are broadcast to (torch's rule, right-aligned).
std::vector<int64_t> broadcast_batch(const ir::TensorMeta& a, const ir::TensorMeta& b) {
  const size_t na = a.sizes.size() - 2, nb = b.sizes.size() - 2, n = std::max(na, nb);
  std::vector<int64_t> out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t sa = i + na >= n ? a.sizes[i + na - n] : 1;
    const int64_t sb = i + nb >= n ? b.sizes[i + nb - n] : 1;
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

// Whether torch reads `m` as it is: its batch dims merge into one by a view
// (each non-1 dim's stride is the next one's stride times its size) and each
// matrix is row- or column-major (a unit stride, the other one at least the
// inner size, as cuBLAS's leading dimension).
bool read_as_is(const ir::TensorMeta& m) {
  const size_t r = m.sizes.size();
  int64_t prev = -1;  // the last non-1 batch dim
  for (size_t i = 0; i + 2 < r; ++i) {
    if (m.sizes[i] == 1) continue;
    if (prev >= 0 && m.strides[prev] != m.strides[i] * m.sizes[i]) return false;
    prev = static_cast<int64_t>(i);
  }
  const int64_t rows = m.sizes[r - 2], cols = m.sizes[r - 1];
  const int64_t rs = m.strides[r - 2], cs = m.strides[r - 1];
  if (rows <= 1 || cols <= 1) return true;  // NOTE: torch's checks differ there: leave it to it
  return (cs == 1 && rs >= cols) || (rs == 1 && cs >= rows);
}

// Whether torch reads `m`, the 3+-d operand of a folded product, without a
// copy: it folds the leading dims into the rows of one matrix where that is a
// view, else it runs the product batched (over the other operand expanded),
// reading `m` as read_as_is says. A linear with a bias also wants `m`
// contiguous: else torch runs a matmul and then adds the bias in a kernel of
// its own.
bool folds_as_is(const ir::TensorMeta& m, bool biased) {
  if (biased) return m.strides == contiguous_strides(m.sizes);
  if (read_as_is(m)) return true;
  int64_t prev = -1;
  for (size_t i = 0; i + 1 < m.sizes.size(); ++i) {
    if (m.sizes[i] == 1) continue;
    if (prev >= 0 && m.strides[prev] != m.strides[i] * m.sizes[i]) return false;
    prev = static_cast<int64_t>(i);
  }
  return true;
}

int64_t numel(const ir::TensorMeta& m) {
  int64_t n = 1;
  for (int64_t s : m.sizes) n *= s;
  return n;
}

PyRef py_int(int64_t v) {
  PyRef r = PyRef::steal(PyLong_FromLongLong(v));
  if (!r) throw PythonError();
  return r;
}

// `x` copied dense before `pos`: row-major, or column-major (its last two dims
// swapped, copied, swapped back) when its rows are already the inner dim, so
// the copy keeps the order in which the producing kernel writes.
Node* dense_copy(ir::Graph& g, Node* x, const Node* pos) {
  const auto& m = *x->meta;
  const size_t r = m.sizes.size();
  const bool row_major = std::llabs(m.strides[r - 1]) <= std::llabs(m.strides[r - 2]);
  const PyRef& device = m.device;
  Node* out;
  if (row_major) {
    out = insert_call(g, pos, {}, "contiguous", {Arg::of_node(x)}, {}, device);
  } else {
    std::vector<Arg> swap = {Arg::constant(py_int(-2)), Arg::constant(py_int(-1))};
    Node* t = insert_call(g, pos, {}, "transpose", {Arg::of_node(x), swap[0], swap[1]}, {}, device);
    Node* c = insert_call(g, pos, {}, "contiguous", {Arg::of_node(t)}, {}, device);
    out = insert_call(g, pos, {}, "transpose", {Arg::of_node(c), swap[0], swap[1]}, {}, device);
    t->meta->requires_grad = c->meta->requires_grad = m.requires_grad;
  }
  out->meta->requires_grad = m.requires_grad;
  return out;
}

}  // namespace

int lay_out_matmul_operands(ir::Graph& g) {
  std::vector<Node*> products;
  for (auto& n : g.nodes())
    if (read_of(*n) != Read::None) products.push_back(n.get());
  int copied = 0;
  for (Node* p : products) {
    auto [a, b] = operands(*p);
    std::unordered_map<const Node*, Node*> copies;  // operand -> its copy (x @ x: one)
    if (read_of(*p) == Read::Folded) {
      const bool biased = is_linear(*p) && tensor_arg(*p, 2, "bias");
      if (numel(*a->meta) > 0 && !folds_as_is(*a->meta, biased)) {
        copies[a] = insert_call(g, p, {}, "contiguous", {Arg::of_node(const_cast<Node*>(a))}, {},
                                a->meta->device);
        copies[a]->meta->requires_grad = a->meta->requires_grad;
      }
    } else {
      const std::vector<int64_t> batch = broadcast_batch(*a->meta, *b->meta);
      for (const Node* x : {a, b}) {
        const auto& m = *x->meta;
        // NOTE: an operand broadcast over the batch is expanded and copied by torch whatever its
        // layout (a copy here would not save that one); empty ones copy nothing.
        const std::vector<int64_t> own(m.sizes.begin(), m.sizes.end() - 2);
        if (own != batch || numel(m) == 0 || read_as_is(m) || copies.count(x)) continue;
        copies[x] = dense_copy(g, const_cast<Node*>(x), p);
      }
    }
    if (copies.empty()) continue;
    Examples changed;
    for (auto& [x, c] : copies) changed[x] = c->example;
    PyRef ex = run_on_examples(*p, changed);
    // NOTE: bmm's and matmul's results are dense whatever their operands' layouts; checked, so a
    // torch that decides otherwise keeps its own copies rather than a layout kernels misread.
    if (!ex || strides_of(ex.get()) != p->meta->strides) {
      for (auto& [x, c] : copies) {
        for (Node* n = c; n && n != x;) {
          Node* in = n->args[0].node;
          g.erase(n);
          n = in;
        }
      }
      continue;
    }
    for (auto& [x, c] : copies) {
      replace_uses({p}, x, c);
      ++copied;
    }
  }
  return copied;
}

}  // namespace tl::passes
