// Data movement that copies (torch returns a new tensor): each rule is a
// Pointwise body over the result's shape that reads its inputs at remapped
// coordinates. Shifted or permuted coordinates go through Gather (offsets built
// from Index exprs and clamped into the input, so an operand a Where discards
// is still a safe read); stack uses plain loads and cat loads at shifted
// (clamped) coordinates, so their producers fuse.
// Output strides are the node's (meta) strides, as for every stored value.
#include "passes/lower_data.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/errors.h"
#include "passes/dtype.h"
#include "passes/graph_rewrite.h"
#include "passes/lower_reduction.h"

namespace tl::passes {
namespace {

using ir::ExprOp;
using ir::Node;
using ir::ScalarType;
constexpr ScalarType kI64 = ScalarType::I64;
constexpr size_t kMaxParts = 64;  // cat/stack: longer Where chains stay extern

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;) st[i - 1] = st[i] * sizes[i];
  return st;
}

// Index arithmetic on i64 body values.
struct Body {
  RuleCtx& c;
  int k(int64_t v) { return c.constant(static_cast<double>(v), kI64); }
  int add(int a, int b) { return c.binary(ExprOp::Add, a, b); }
  int sub(int a, int b) { return c.binary(ExprOp::Sub, a, b); }
  int mul(int a, int b) { return c.binary(ExprOp::Mul, a, b); }
  int mod(int a, int64_t n) { return c.binary(ExprOp::Remainder, a, k(n)); }
  int div(int a, int64_t n) { return c.binary(ExprOp::FloorDiv, a, k(n)); }
  int clamp(int a, int64_t lo, int64_t hi) {
    return c.binary(ExprOp::Minimum, c.binary(ExprOp::Maximum, a, k(lo)), k(hi));
  }
  ScalarType out() const { return compute_type(c.out_type()); }

  // x at coordinates `coord` (per x axis: an i64 expr, or -1 for the node axis
  // `direct[j]`), in the node's compute type. Coordinates must be in bounds.
  int read(const Node* x, const std::vector<int>& coord, const std::vector<int>& direct) {
    const ir::TensorMeta& m = *x->meta;
    int off = -1;
    std::vector<int> axes(m.sizes.size(), -1);
    for (size_t j = 0; j < m.sizes.size(); ++j) {
      if (coord[j] < 0) {
        axes[j] = direct[j];
      } else if (m.sizes[j] != 1) {
        int term = mul(coord[j], k(m.strides[j]));
        off = off < 0 ? term : add(off, term);
      }
    }
    return c.cast(c.gather(x, std::move(axes), off < 0 ? k(0) : off), out());
  }

  // A tensor operand loaded with explicit axes (per operand axis, the node
  // axis indexing it), so it fuses with its producer; -1 if not a tensor.
  // With `shifts` (per operand axis), read at shifted coordinates (a cat part).
  int load(const ir::Arg* a, std::vector<int> axes, ScalarType t,
           std::vector<AxisShift> shifts = {}) {
    if (!c.is_tensor(a)) return -1;
    int v = c.value(a, t);
    size_t i = 0;
    while (c.out.inputs[i] != a->node) ++i;
    c.out.input_axes.resize(c.out.inputs.size());
    c.out.input_shifts.resize(c.out.inputs.size());
    auto& slot = c.out.input_axes[i];
    auto& shift_slot = c.out.input_shifts[i];
    if (!slot.empty() && (slot != axes || shift_slot != shifts)) return -1;
    slot = std::move(axes);
    shift_slot = std::move(shifts);
    return v;
  }

  // Row-major linear index of the point in the node's shape.
  int linear() {
    const auto& s = c.node.meta->sizes;
    std::vector<int64_t> st = contiguous_strides(s);
    int l = -1;
    for (size_t a = 0; a < s.size(); ++a) {
      if (s[a] == 1) continue;
      int t = mul(c.index(static_cast<int>(a)), k(st[a]));
      l = l < 0 ? t : add(l, t);
    }
    return l < 0 ? k(0) : l;
  }

  // Reads x at row-major linear index `l` of x's own shape.
  int read_linear(const Node* x, int l) {
    const auto& s = x->meta->sizes;
    std::vector<int64_t> st = contiguous_strides(s);
    std::vector<int> coord(s.size(), -1);
    for (size_t j = 0; j < s.size(); ++j) coord[j] = s[j] == 1 ? k(0) : mod(div(l, st[j]), s[j]);
    return read(x, coord, std::vector<int>(s.size(), -1));
  }
};

std::optional<int64_t> norm_dim(std::optional<std::vector<int64_t>> d, size_t rank) {
  if (!d || d->size() != 1) return std::nullopt;
  int64_t v = (*d)[0] < 0 ? (*d)[0] + static_cast<int64_t>(rank) : (*d)[0];
  if (v < 0 || v >= static_cast<int64_t>(std::max<size_t>(rank, 1))) return std::nullopt;
  return v;
}

// A "dim" argument (default 0), normalised; nullopt if it is not an int.
std::optional<int64_t> dim_arg(RuleCtx& c, size_t pos, size_t rank) {
  const ir::Arg* a = c.arg(pos, "dim");
  return norm_dim(a ? c.ints(a) : std::vector<int64_t>{0}, rank);
}

std::vector<int> identity_axes(size_t n) {
  std::vector<int> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int>(i);
  return v;
}

const Node* same_type_input(RuleCtx& c) {
  const ir::Arg* x = c.arg(0, "input");
  if (!c.is_tensor(x) || c.type_of(x) != c.out_type()) return nullptr;
  return x->node;
}

// Strides equal where the size is not 1 (those strides are arbitrary).
bool same_layout(const ir::TensorMeta& a, const ir::TensorMeta& b) {
  if (a.sizes != b.sizes) return false;
  for (size_t i = 0; i < a.sizes.size(); ++i)
    if (a.sizes[i] != 1 && a.strides[i] != b.strides[i]) return false;
  return true;
}

// clone: always a copy. contiguous: torch returns x itself when it already has
// the layout asked for (an alias: an inlined identity view), else a copy.
bool copy(RuleCtx& c) {
  const Node* x = same_type_input(c);
  if (!x || x->meta->sizes != c.node.meta->sizes) return false;
  c.arg(1, "memory_format");  // the meta strides already follow it
  if (op_base_name(c.node) == "contiguous" && same_layout(*x->meta, *c.node.meta)) {
    c.out.kind = OpLowering::Kind::View;
    c.out.inputs = {x};
    c.out.base_axes = identity_axes(x->meta->sizes.size());
    return c.all_kwargs_read();
  }
  Body b{c};
  return c.finish(c.value(c.arg(0, "input"), b.out()));
}

// Dims as varargs (x.repeat(2, 3)) or one sequence (x.repeat([2, 3])).
std::optional<std::vector<int64_t>> int_list(RuleCtx& c, size_t first, const char* kw) {
  if (c.node.args.size() <= first + 1) return c.ints(c.arg(first, kw));
  std::vector<int64_t> out;
  for (size_t i = first; i < c.node.args.size(); ++i) {
    auto v = c.ints(&c.node.args[i]);
    if (!v || v->size() != 1) return std::nullopt;
    out.push_back((*v)[0]);
  }
  return out;
}

bool flip(RuleCtx& c) {
  const Node* x = same_type_input(c);
  auto dims = int_list(c, 1, "dims");
  if (!x || !dims) return false;
  const auto& s = x->meta->sizes;
  Body b{c};
  std::vector<int> coord(s.size(), -1);
  for (int64_t d : *dims) {
    auto nd = norm_dim(std::vector<int64_t>{d}, s.size());
    if (!nd || s.empty()) return false;
    if (s[*nd] > 1) coord[*nd] = b.sub(b.k(s[*nd] - 1), c.index(static_cast<int>(*nd)));
  }
  return c.finish(b.read(x, coord, identity_axes(s.size())));
}

bool repeat(RuleCtx& c) {
  const Node* x = same_type_input(c);
  auto reps = int_list(c, 1, "repeats");
  const auto& s = x ? x->meta->sizes : c.node.meta->sizes;
  if (!x || !reps || reps->size() < s.size()) return false;
  size_t off = reps->size() - s.size();
  Body b{c};
  std::vector<int> coord(s.size(), -1), direct(s.size());
  for (size_t j = 0; j < s.size(); ++j) {
    direct[j] = static_cast<int>(j + off);
    if ((*reps)[j + off] != 1 && s[j] != 1)
      coord[j] = b.mod(c.index(static_cast<int>(j + off)), s[j]);
  }
  return c.finish(b.read(x, coord, direct));
}

bool roll(RuleCtx& c) {
  const Node* x = same_type_input(c);
  auto shifts = c.ints(c.arg(1, "shifts"));
  const ir::Arg* dims_arg = c.arg(2, "dims");
  bool no_dims =
      !dims_arg || (dims_arg->kind == ir::Arg::Kind::Const && dims_arg->value.get() == Py_None);
  auto dims = no_dims ? std::optional<std::vector<int64_t>>() : c.ints(dims_arg);
  if (!x || !shifts || (!no_dims && (!dims || dims->size() != shifts->size()))) return false;
  const auto& s = x->meta->sizes;
  Body b{c};
  auto rotate = [&](int i, int64_t n, int64_t shift) {  // (i - shift) mod n, i in [0, n)
    int64_t back = ((shift % n) + n) % n;
    return back == 0 ? i : b.mod(b.add(i, b.k(n - back)), n);
  };
  if (no_dims) {
    if (shifts->size() != 1) return false;
    return c.finish(b.read_linear(x, rotate(b.linear(), numel(s), (*shifts)[0])));
  }
  std::vector<int64_t> total(s.size(), 0);
  for (size_t i = 0; i < dims->size(); ++i) {
    auto nd = norm_dim(std::vector<int64_t>{(*dims)[i]}, s.size());
    if (!nd || s.empty()) return false;
    total[*nd] += (*shifts)[i];
  }
  std::vector<int> coord(s.size(), -1);
  for (size_t j = 0; j < s.size(); ++j)
    if (s[j] > 1 && total[j] % s[j] != 0)
      coord[j] = rotate(c.index(static_cast<int>(j)), s[j], total[j]);
  return c.finish(b.read(x, coord, identity_axes(s.size())));
}

// F.pad(x, pad, mode="constant", value=None) and torch.constant_pad_nd(x, pad, value=0).
bool pad(RuleCtx& c) {
  const Node* x = same_type_input(c);
  auto p = c.ints(c.arg(1, "pad"));
  bool nd = op_base_name(c.node) == "constant_pad_nd";
  if (!nd) {
    const ir::Arg* mode = c.arg(2, "mode");
    if (mode && c.str(mode).value_or("") != "constant") return false;
  }
  const ir::Arg* value = c.arg(nd ? 2 : 3, "value");
  bool none = !value || (value->kind == ir::Arg::Kind::Const && value->value.get() == Py_None);
  std::optional<double> fill = none ? std::optional<double>(0.0) : c.number(value);
  if (!x || !p || !fill || p->size() % 2 != 0) return false;
  const auto& s = x->meta->sizes;
  if (p->size() / 2 > s.size()) return false;
  Body b{c};
  std::vector<int> coord(s.size(), -1);
  int mask = -1;
  for (size_t i = 0; i < p->size() / 2; ++i) {
    size_t d = s.size() - 1 - i;
    int64_t lo = (*p)[2 * i], hi = (*p)[2 * i + 1];
    if (lo == 0 && hi == 0) continue;
    int t = b.sub(c.index(static_cast<int>(d)), b.k(lo));
    int ok =
        c.binary(ExprOp::And, c.binary(ExprOp::Ge, t, b.k(0)), c.binary(ExprOp::Lt, t, b.k(s[d])));
    mask = mask < 0 ? ok : c.binary(ExprOp::And, mask, ok);
    coord[d] = b.clamp(t, 0, s[d] - 1);
  }
  int v = b.read(x, coord, identity_axes(s.size()));
  return c.finish(mask < 0 ? v : c.where(mask, v, c.constant(*fill, b.out())));
}

// A pooling size pair from an int or a 1- or 2-list; `fallback` when absent, None or [].
std::optional<std::vector<int64_t>> pool_pair(RuleCtx& c, size_t pos, const char* name,
                                              std::optional<std::vector<int64_t>> fallback) {
  const ir::Arg* a = c.arg(pos, name);
  bool none = !a || (a->kind == ir::Arg::Kind::Const && a->value.get() == Py_None);
  auto v = none ? fallback : c.ints(a);
  if (v && v->empty()) v = fallback;
  if (v && v->size() == 1) v->push_back((*v)[0]);
  return v && v->size() == 2 ? v : std::nullopt;
}

bool is_floating_pool_type(ScalarType t) {
  return t == ScalarType::F32 || t == ScalarType::F64 || t == ScalarType::F16 ||
         t == ScalarType::BF16;
}

// F.max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1,
// ceil_mode=False, return_indices=False) over a floating (N, C, H, W) or
// (C, H, W) input: the largest in-bounds element of each window (padding
// counts as -inf, as in torch), NaN propagating. Output sizes are the node's.
// Kernels walk the output in memory order, so a channels-last pool reads
// neighbouring channels together. On the CPU the kernel beats torch's
// (8x64x112x112 f32: 17 ms against 26 ms).
bool max_pool2d(RuleCtx& c) {
  const Node* x = same_type_input(c);
  if (!x || !is_floating_pool_type(c.out_type())) return false;
  const auto& s = x->meta->sizes;
  const auto& o = c.node.meta->sizes;
  if ((s.size() != 3 && s.size() != 4) || o.size() != s.size()) return false;
  auto kernel = pool_pair(c, 1, "kernel_size", std::nullopt);
  auto stride = pool_pair(c, 2, "stride", kernel);
  auto padding = pool_pair(c, 3, "padding", std::vector<int64_t>{0});
  auto dilation = pool_pair(c, 4, "dilation", std::vector<int64_t>{1});
  const ir::Arg* ceil = c.arg(5, "ceil_mode");
  const ir::Arg* indices = c.arg(6, "return_indices");
  if (!kernel || !stride || !padding || !dilation) return false;
  if (ceil && !c.number(ceil)) return false;  // ceil_mode only changes the node's output sizes
  if (indices && c.number(indices).value_or(1) != 0) return false;
  const int64_t window = (*kernel)[0] * (*kernel)[1];
  if (window <= 0 || window > 64) return false;  // larger windows: torch's kernel
  Body b{c};
  size_t hd = s.size() - 2, wd = s.size() - 1;
  ScalarType ct = b.out();
  int neg_inf = c.constant(-std::numeric_limits<double>::infinity(), ct);
  int best = -1;
  for (int64_t kh = 0; kh < (*kernel)[0]; ++kh)
    for (int64_t kw = 0; kw < (*kernel)[1]; ++kw) {
      std::vector<int> coord(s.size(), -1);
      int ok = -1;
      const size_t axes[2] = {hd, wd};
      const int64_t ks[2] = {kh, kw};
      for (int i = 0; i < 2; ++i) {
        size_t d = axes[i];
        int at = b.add(b.mul(c.index(static_cast<int>(d)), b.k((*stride)[i])),
                       b.k(ks[i] * (*dilation)[i] - (*padding)[i]));
        int in = c.binary(ExprOp::And, c.binary(ExprOp::Ge, at, b.k(0)),
                          c.binary(ExprOp::Lt, at, b.k(s[d])));
        ok = ok < 0 ? in : c.binary(ExprOp::And, ok, in);
        coord[d] = b.clamp(at, 0, s[d] - 1);
      }
      int v = c.where(ok, b.read(x, coord, identity_axes(s.size())), neg_inf);
      best = best < 0 ? v : c.binary(ExprOp::Maximum, best, v);
    }
  return c.finish(best);
}

// The sum over a kernel[0] x kernel[1] window of x, read at start[i] + k along axes[i]
// (coordinates clamped into x), each element taken where `inside(i, coordinate)` holds on
// both axes, else `zero`: avg_pool2d's and adaptive_avg_pool2d's windows.
template <class Inside>
int window_sum(RuleCtx& c, Body& b, const Node* x, const size_t axes[2], const int start[2],
               const int64_t kernel[2], int zero, Inside inside) {
  const auto& s = x->meta->sizes;
  int sum = -1;
  for (int64_t kh = 0; kh < kernel[0]; ++kh)
    for (int64_t kw = 0; kw < kernel[1]; ++kw) {
      std::vector<int> coord(s.size(), -1);
      int ok = -1;
      const int64_t ks[2] = {kh, kw};
      for (int i = 0; i < 2; ++i) {
        int at = b.add(start[i], b.k(ks[i]));
        int in = inside(i, at);
        ok = ok < 0 ? in : c.binary(ExprOp::And, ok, in);
        coord[axes[i]] = b.clamp(at, 0, s[axes[i]] - 1);
      }
      int v = c.where(ok, b.read(x, coord, identity_axes(s.size())), zero);
      sum = sum < 0 ? v : c.binary(ExprOp::Add, sum, v);
    }
  return sum;
}

// F.avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False,
// count_include_pad=True, divisor_override=None) over a floating (N, C, H, W)
// or (C, H, W) input: the in-bounds sum of each window, accumulated in the
// compute type (float32 for f16/bf16, as torch's kernels do), over torch's
// divisor: the window clipped to the padded input (count_include_pad), else
// to the input, or divisor_override. Before, it ran as torch's kernel and its
// neighbours (PoolFormer's `pool(x) - x`, Inception's 3x3 branch pools) as a
// kernel after it; now it is one kernel with them.
bool avg_pool2d(RuleCtx& c) {
  const Node* x = same_type_input(c);
  if (!x || !is_floating_pool_type(c.out_type())) return false;
  const auto& s = x->meta->sizes;
  const auto& o = c.node.meta->sizes;
  if ((s.size() != 3 && s.size() != 4) || o.size() != s.size()) return false;
  auto kernel = pool_pair(c, 1, "kernel_size", std::nullopt);
  auto stride = pool_pair(c, 2, "stride", kernel);
  auto padding = pool_pair(c, 3, "padding", std::vector<int64_t>{0});
  const ir::Arg* ceil = c.arg(4, "ceil_mode");
  const ir::Arg* include = c.arg(5, "count_include_pad");
  const ir::Arg* override_arg = c.arg(6, "divisor_override");
  if (!kernel || !stride || !padding) return false;
  if (ceil && !c.number(ceil)) return false;  // ceil_mode only changes the node's output sizes
  const bool include_pad = !include || c.number(include).value_or(-1) != 0;
  if (include && !c.number(include)) return false;
  std::optional<double> divisor;
  if (override_arg &&
      !(override_arg->kind == ir::Arg::Kind::Const && override_arg->value.get() == Py_None)) {
    divisor = c.number(override_arg);
    if (!divisor || *divisor == 0) return false;
  }
  const int64_t window = (*kernel)[0] * (*kernel)[1];
  if (window <= 0 || window > 64) return false;  // larger windows: torch's kernel
  for (int i = 0; i < 2; ++i)
    if ((*stride)[i] <= 0 || (*padding)[i] < 0) return false;
  Body b{c};
  const size_t axes[2] = {s.size() - 2, s.size() - 1};
  ScalarType ct = b.out();
  int zero = c.constant(0, ct);
  int start[2], count[2], span[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t size = s[axes[i]], pad = (*padding)[i];
    // torch: start = o*stride - pad, end = min(start + k, size + pad), then both clipped
    start[i] = b.sub(b.mul(c.index(static_cast<int>(axes[i])), b.k((*stride)[i])), b.k(pad));
    int end = c.binary(ExprOp::Minimum, b.add(start[i], b.k((*kernel)[i])), b.k(size + pad));
    span[i] = b.sub(end, start[i]);
    int lo = c.binary(ExprOp::Maximum, start[i], b.k(0));
    int hi = c.binary(ExprOp::Minimum, end, b.k(size));
    count[i] = b.sub(hi, lo);
  }
  const int64_t window_sizes[2] = {(*kernel)[0], (*kernel)[1]};
  int sum = window_sum(c, b, x, axes, start, window_sizes, zero, [&](int i, int at) {
    return c.binary(ExprOp::And, c.binary(ExprOp::Ge, at, b.k(0)),
                    c.binary(ExprOp::Lt, at, b.k(s[axes[i]])));
  });
  int div = divisor ? c.constant(*divisor, ct)
                    : c.cast(include_pad ? b.mul(span[0], span[1]) : b.mul(count[0], count[1]), ct);
  return c.finish(c.binary(ExprOp::Div, sum, div));
}

// F.adaptive_avg_pool2d(x, output_size) over a floating (N, C, H, W) or (C, H, W) input.
// Output sizes are the node's (output_size may hold None: the input's size). Output
// 1x1 (squeeze-excitation pooling, a classifier head's global pool) is the mean over
// H and W: a reduction, so the SiLU before it and the flatten after it join its
// kernel. Other sizes take torch's windows, rows floor(o * H / OH) to
// ceil((o + 1) * H / OH) (and the same for columns): a gather of at most the
// largest window, masked to each output's own, summed in the compute type and
// divided by its size, as avg_pool2d's rule does. Windows over 64 elements: extern.
bool adaptive_avg_pool2d(RuleCtx& c) {
  const Node* x = same_type_input(c);
  c.arg(1, "output_size");
  if (!x || !is_floating_pool_type(c.out_type())) return false;
  const auto& s = x->meta->sizes;
  const auto& o = c.node.meta->sizes;
  if ((s.size() != 3 && s.size() != 4) || o.size() != s.size()) return false;
  const size_t axes[2] = {s.size() - 2, s.size() - 1};
  for (size_t d : axes)
    if (s[d] <= 0 || o[d] <= 0) return false;
  ScalarType ct = compute_type(c.out_type());
  if (o[axes[0]] == 1 && o[axes[1]] == 1) {
    const ir::Arg* in = c.arg(0, "input");
    std::vector<int64_t> dims{static_cast<int64_t>(axes[0]), static_cast<int64_t>(axes[1])};
    if (!reduction::setup(c, in, dims)) return false;
    int sum = c.reduce(ExprOp::ReduceSum, c.value(in, ct));
    return c.finish(c.binary(ExprOp::Div, sum, c.count(s[axes[0]] * s[axes[1]], ct)));
  }
  // The largest window along an axis of input size n and output size m.
  auto widest = [](int64_t n, int64_t m) {
    int64_t w = 0;
    for (int64_t i = 0; i < m; ++i) w = std::max(w, ((i + 1) * n + m - 1) / m - i * n / m);
    return w;
  };
  const int64_t kernel[2] = {widest(s[axes[0]], o[axes[0]]), widest(s[axes[1]], o[axes[1]])};
  if (kernel[0] * kernel[1] > 64) return false;  // larger windows: torch's kernel
  Body b{c};
  int zero = c.constant(0, ct);
  int start[2], end[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t n = s[axes[i]], m = o[axes[i]];
    int at = b.mul(c.index(static_cast<int>(axes[i])), b.k(n));
    start[i] = b.div(at, m);
    end[i] = b.div(b.add(at, b.k(n + m - 1)), m);  // ceil((o + 1) * n / m)
  }
  int sum = window_sum(c, b, x, axes, start, kernel, zero,
                       [&](int i, int at) { return c.binary(ExprOp::Lt, at, end[i]); });
  int count = b.mul(b.sub(end[0], start[0]), b.sub(end[1], start[1]));
  return c.finish(c.binary(ExprOp::Div, sum, c.cast(count, ct)));
}

const ir::Arg* tensor_list(RuleCtx& c) {
  const ir::Arg* a = c.arg(0, "tensors");
  bool seq = a && (a->kind == ir::Arg::Kind::List || a->kind == ir::Arg::Kind::Tuple);
  return seq && !a->items.empty() && a->items.size() <= kMaxParts ? a : nullptr;
}

bool cat(RuleCtx& c) {
  const ir::Arg* list = tensor_list(c);
  size_t rank = c.node.meta->sizes.size();
  auto d = dim_arg(c, 1, rank);
  if (!list || !d || rank == 0) return false;
  std::vector<const ir::Arg*> parts;
  for (const ir::Arg& it : list->items) {
    if (it.kind != ir::Arg::Kind::Node || !it.node->meta) return false;
    if (numel(it.node->meta->sizes) == 0) continue;  // torch skips empty parts
    if (!c.is_tensor(&it) || it.node->meta->sizes.size() != rank) return false;
    parts.push_back(&it);
  }
  if (parts.empty()) return false;
  Body b{c};
  if (parts.size() == 1) {
    // A copy (a KV cache's `cat([empty, k])`): a plain load, so its producer
    // views fuse instead of being made in memory for a gather.
    int v = b.load(parts[0], identity_axes(rank), b.out());
    return v >= 0 && c.finish(v);
  }
  int i = c.index(static_cast<int>(*d));
  int64_t off = 0;
  std::vector<int> vals;
  std::vector<int64_t> ends;
  for (const ir::Arg* p : parts) {
    int64_t n = p->node->meta->sizes[*d];
    // A part is loaded at a shifted coordinate, so its producer computes in
    // this kernel (rotary's rotate_half: `-x2` fuses instead of being stored
    // for a gather). A node that is two parts is read from memory for the others.
    std::vector<AxisShift> shifts(rank);
    shifts[*d] = AxisShift{-off, n};
    int v = b.load(p, identity_axes(rank), b.out(), std::move(shifts));
    if (v < 0) {
      std::vector<int> coord(rank, -1);
      coord[*d] = b.clamp(b.sub(i, b.k(off)), 0, n - 1);
      v = b.read(p->node, coord, identity_axes(rank));
    }
    vals.push_back(v);
    off += n;
    ends.push_back(off);
  }
  int r = vals.back();
  for (size_t k = vals.size() - 1; k-- > 0;)
    r = c.where(c.binary(ExprOp::Lt, i, b.k(ends[k])), vals[k], r);
  return c.finish(r);
}

bool stack(RuleCtx& c) {
  const ir::Arg* list = tensor_list(c);
  size_t rank = c.node.meta->sizes.size();
  auto d = dim_arg(c, 1, rank);
  if (!list || !d) return false;
  Body b{c};
  std::vector<int> axes;
  for (size_t j = 0; j + 1 < rank; ++j)
    axes.push_back(static_cast<int>(static_cast<int64_t>(j) < *d ? j : j + 1));
  std::vector<int> vals;
  for (const ir::Arg& it : list->items) {
    if (!c.is_tensor(&it) || it.node->meta->sizes.size() + 1 != rank) return false;
    vals.push_back(b.load(&it, axes, b.out()));
    if (vals.back() < 0) return false;
  }
  int i = c.index(static_cast<int>(*d));
  int r = vals.back();
  for (size_t k = vals.size() - 1; k-- > 0;)
    r = c.where(c.binary(ExprOp::Eq, i, b.k(static_cast<int64_t>(k))), vals[k], r);
  return c.finish(r);
}

bool is_index_type(ScalarType t) { return t == ScalarType::I64 || t == ScalarType::I32; }

// x read with its axis `dim` taken from `idx` (an i64 expr). An index outside
// x stops the kernel with a device-side assert, as torch's CUDA kernels do
// (CheckIndex), and is clamped as well so no read leaves x.
// `check` false: the indices are proven in bounds (CPU kernels hold no CheckIndex).
int read_indexed(Body& b, const Node* x, size_t dim, int idx, const std::vector<int>& direct,
                 bool check = true) {
  const auto& s = x->meta->sizes;
  std::vector<int> coord(s.size(), -1);
  int checked = check ? b.c.binary(ExprOp::CheckIndex, idx, b.k(s[dim])) : idx;
  coord[dim] = b.clamp(checked, 0, s[dim] - 1);
  return b.read(x, coord, direct);
}

// Indexing by tensor values is fused on CUDA only: there a bad index stops
// torch's own kernel with a device-side assert, and ours stops the same way.
// On the CPU torch raises IndexError, which a kernel cannot.
bool on_cuda(const RuleCtx& c) { return device_type(c.node.meta->device.get()) == "cuda"; }

std::optional<std::pair<int64_t, int64_t>> value_range(const Node* n, int depth = 0);

bool index_select(RuleCtx& c) {
  if (!on_cuda(c)) return false;
  const Node* x = same_type_input(c);
  const ir::Arg* index = c.arg(2, "index");
  size_t rank = c.node.meta->sizes.size();
  auto d = c.arg(1, "dim") ? dim_arg(c, 1, rank) : std::nullopt;
  if (!x || !d || rank == 0 || x->meta->sizes.size() != rank || !c.is_tensor(index)) return false;
  if (!is_index_type(c.type_of(index)) || index->node->meta->sizes.size() > 1) return false;
  Body b{c};
  std::vector<int> idx_axes;
  if (index->node->meta->sizes.size() == 1) idx_axes = {static_cast<int>(*d)};
  int idx = b.load(index, idx_axes, kI64);
  return idx >= 0 && c.finish(read_indexed(b, x, *d, idx, identity_axes(rank)));
}

bool gather(RuleCtx& c) {
  const Node* x = same_type_input(c);
  const ir::Arg* index = c.arg(2, "index");
  auto sparse = c.number(c.arg(3, "sparse_grad"));
  size_t rank = c.node.meta->sizes.size();
  auto d = c.arg(1, "dim") ? dim_arg(c, 1, rank) : std::nullopt;
  if (!x || !d || rank == 0 || x->meta->sizes.size() != rank || !c.is_tensor(index)) return false;
  if (!is_index_type(c.type_of(index)) || sparse.value_or(0) != 0) return false;
  Body b{c};
  int idx = c.value(index, kI64);
  return c.finish(read_indexed(b, x, *d, idx, identity_axes(rank)));
}

// F.embedding(input, weight, padding_idx, max_norm, ...) and
// torch.embedding(weight, indices, ...): a row gather of a 2-D weight.
bool embedding(RuleCtx& c) {
  bool functional = c.node.target_name.find("functional") != std::string::npos;
  const ir::Arg* index = functional ? c.arg(0, "input") : c.arg(1, "indices");
  const ir::Arg* weight = functional ? c.arg(1, "weight") : c.arg(0, "weight");
  c.arg(2, "padding_idx");  // forward values do not depend on these
  for (const char* kw : {"norm_type", "scale_grad_by_freq", "sparse"}) c.arg(99, kw);
  const ir::Arg* max_norm = functional ? c.arg(3, "max_norm") : nullptr;
  if (max_norm && !(max_norm->kind == ir::Arg::Kind::Const && max_norm->value.get() == Py_None))
    return false;  // renormalises the weight in place
  if (!c.is_tensor(weight) || !c.is_tensor(index) || c.type_of(weight) != c.out_type())
    return false;
  if (weight->node->meta->sizes.size() != 2 || !is_index_type(c.type_of(index))) return false;
  size_t q = index->node->meta->sizes.size();
  if (c.node.meta->sizes.size() != q + 1) return false;
  // NOTE: on the CPU only position ids the graph proves in range (bart's arange + 2).
  const bool cuda = on_cuda(c);
  if (!cuda) {
    auto r = value_range(index->node);
    if (!r || r->first < 0 || r->second >= weight->node->meta->sizes[0]) return false;
  }
  Body b{c};
  int idx = b.load(index, identity_axes(q), kI64);
  return idx >= 0 &&
         c.finish(read_indexed(b, weight->node, 0, idx, {-1, static_cast<int>(q)}, cuda));
}

constexpr int64_t kRangeLimit = 1000000000000000;  // 1e15: sums of two stay far from overflow

// The values an integer tensor can hold, [lo, hi], when the graph says so:
// arange, a constant added or subtracted, and views, expands and same-type
// casts of such values (transformers' mask functions index by aranges).

std::optional<std::pair<int64_t, int64_t>> value_range(const Node* n, int depth) {
  if (!n || !n->meta || depth > 16) return std::nullopt;
  auto t = scalar_type_of(n->meta->dtype.get());
  if (!t || !is_index_type(*t) || n->args.empty()) return std::nullopt;
  const std::string name = op_base_name(*n);
  auto int_arg = [&](size_t i) -> std::optional<int64_t> {
    if (i >= n->args.size() || n->args[i].kind != ir::Arg::Kind::Const) return std::nullopt;
    PyObject* v = n->args[i].value.get();
    if (!PyLong_Check(v) || PyBool_Check(v)) return std::nullopt;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return std::nullopt;
    }
    return x;
  };
  auto node_arg = [&](size_t i) -> const Node* {
    return i < n->args.size() && n->args[i].kind == ir::Arg::Kind::Node ? n->args[i].node : nullptr;
  };
  if (name == "arange") {
    if (n->meta->sizes.size() != 1 || n->meta->sizes[0] < 1 || n->args.size() > 3)
      return std::nullopt;
    for (const auto& kw : n->kwargs)
      if (kw.first == "start" || kw.first == "end" || kw.first == "step" || kw.first == "out")
        return std::nullopt;
    int64_t start = 0, step = 1;
    if (n->args.size() >= 2) {
      auto s0 = int_arg(0);
      if (!s0) return std::nullopt;
      start = *s0;
    }
    if (n->args.size() == 3) {
      auto s2 = int_arg(2);
      if (!s2) return std::nullopt;
      step = *s2;
    }
    if (std::fabs(static_cast<double>(start)) +
            std::fabs(static_cast<double>(step)) * static_cast<double>(n->meta->sizes[0]) >
        static_cast<double>(kRangeLimit))
      return std::nullopt;
    int64_t last = start + step * (n->meta->sizes[0] - 1);
    return std::make_pair(std::min(start, last), std::max(start, last));
  }
  const Node* in = node_arg(0);
  auto r = in ? value_range(in, depth + 1) : std::nullopt;
  if (!r) return std::nullopt;
  if ((name == "add" || name == "sub") && n->args.size() == 2 && n->kwargs.empty()) {
    auto k = int_arg(1);
    if (const Node* other = node_arg(1)) {
      auto r2 = value_range(other, depth + 1);
      if (!r2) return std::nullopt;
      // NOTE: every bound returned is at most 1e15 in magnitude, so these sums cannot overflow.
      auto sum = name == "add" ? std::make_pair(r->first + r2->first, r->second + r2->second)
                               : std::make_pair(r->first - r2->second, r->second - r2->first);
      if (std::llabs(sum.first) > kRangeLimit || std::llabs(sum.second) > kRangeLimit)
        return std::nullopt;
      return sum;
    }
    if (!k || std::llabs(*k) > kRangeLimit) return std::nullopt;
    int64_t d = name == "add" ? *k : -*k;
    if (std::llabs(r->first + d) > kRangeLimit || std::llabs(r->second + d) > kRangeLimit)
      return std::nullopt;
    return std::make_pair(r->first + d, r->second + d);
  }
  // Views and same-type copies read only values of their input.
  bool plain_index = name != "getitem";
  if (name == "getitem" && n->args.size() == 2) {
    const ir::Arg& idx = n->args[1];
    plain_index = idx.kind != ir::Arg::Kind::Node;
    for (const ir::Arg& a : idx.items) plain_index = plain_index && a.kind == ir::Arg::Kind::Const;
  }
  static const char* kViews[] = {"getitem", "view",   "reshape",   "unsqueeze",
                                 "squeeze", "expand", "expand_as", "contiguous",
                                 "clone",   "to",     "narrow",    "flatten"};
  bool is_view = false;
  for (const char* v : kViews) is_view = is_view || name == v;
  if (!is_view || !plain_index || in->meta->dtype.get() != n->meta->dtype.get())
    return std::nullopt;
  return r;
}

}  // namespace

// x[i0, i1, ...] with integer tensors indexing x's leading axes (broadcast
// together): a Gather at those coordinates. Negative indices count from the
// end, as in torch. On CUDA a bad index stops the kernel as torch's does; on
// the CPU (where torch raises IndexError) only indices the graph proves in
// bounds (value_range) are lowered.
bool tensor_index(RuleCtx& c) {
  if (c.node.args.size() != 2 || !c.node.kwargs.empty()) return false;
  const ir::Arg& x_arg = c.node.args[0];
  const ir::Arg& idx = c.node.args[1];
  std::vector<const ir::Arg*> parts;
  if (idx.kind == ir::Arg::Kind::Node) {
    parts.push_back(&idx);
  } else if (idx.kind == ir::Arg::Kind::Tuple) {
    for (const ir::Arg& a : idx.items) parts.push_back(&a);
  }
  if (parts.empty() || !c.is_tensor(&x_arg) || c.type_of(&x_arg) != c.out_type()) return false;
  const Node* x = x_arg.node;
  const auto& xs = x->meta->sizes;
  const auto& out = c.node.meta->sizes;
  if (parts.size() > xs.size()) return false;
  std::vector<int64_t> bshape;  // the indices' broadcast shape
  for (const ir::Arg* p : parts) {
    if (!c.is_tensor(p) || !is_index_type(c.type_of(p))) return false;
    const auto& s = p->node->meta->sizes;
    if (s.size() > bshape.size()) bshape.insert(bshape.begin(), s.size() - bshape.size(), 1);
    for (size_t j = 0; j < s.size(); ++j) {
      int64_t& b = bshape[bshape.size() - s.size() + j];
      if (s[j] != 1 && b != 1 && s[j] != b) return false;
      if (s[j] != 1) b = s[j];
    }
  }
  const size_t rb = bshape.size(), k = parts.size();
  if (out.size() != rb + xs.size() - k) return false;
  for (size_t j = 0; j < rb; ++j)
    if (out[j] != bshape[j]) return false;
  for (size_t j = k; j < xs.size(); ++j)
    if (out[rb + j - k] != xs[j]) return false;
  const bool cuda = on_cuda(c);
  if (!cuda)
    for (size_t i = 0; i < k; ++i) {
      auto r = value_range(parts[i]->node);
      if (!r || r->first < -xs[i] || r->second >= xs[i]) return false;
    }
  c.out = OpLowering{};
  Body b{c};
  std::vector<int> coord(xs.size(), -1), direct(xs.size(), -1);
  for (size_t i = 0; i < k; ++i) {
    const auto& s = parts[i]->node->meta->sizes;
    std::vector<int> axes(s.size());
    for (size_t j = 0; j < s.size(); ++j) axes[j] = static_cast<int>(rb - s.size() + j);
    int v = b.load(parts[i], axes, kI64);
    if (v < 0) return false;
    // NOTE: negative indices count from the end, as x[-1] does.
    v = c.where(c.binary(ExprOp::Lt, v, b.k(0)), b.add(v, b.k(xs[i])), v);
    // NOTE: CPU kernels hold no CheckIndex; there the indices were proven in bounds.
    if (cuda) v = c.binary(ExprOp::CheckIndex, v, b.k(xs[i]));
    coord[i] = b.clamp(v, 0, xs[i] - 1);
  }
  for (size_t j = k; j < xs.size(); ++j) direct[j] = static_cast<int>(rb + j - k);
  return c.finish(b.read(x, coord, direct));
}

bool copy_by_linear_index(RuleCtx& c, const Node* x) {
  Body b{c};
  c.out.kind = OpLowering::Kind::Pointwise;
  c.out.inputs.clear();
  c.out.base_axes.clear();
  return c.finish(b.read_linear(x, b.linear()));
}

void add_data_movement_rules(RuleTable& t) {
  for (const char* n : {"contiguous", "clone"}) t[n] = copy;
  t["flip"] = flip, t["repeat"] = repeat, t["roll"] = roll;
  for (const char* n : {"pad", "constant_pad_nd"}) t[n] = pad;
  for (const char* n : {"cat", "concat", "concatenate"}) t[n] = cat;
  t["stack"] = stack;
  t["max_pool2d"] = max_pool2d;
  t["avg_pool2d"] = avg_pool2d;
  t["adaptive_avg_pool2d"] = adaptive_avg_pool2d;
  t["index_select"] = index_select;
  t["embedding"] = embedding;
  // NOTE: torch.gather keeps its rule unregistered until its bad-index
  // behaviour on CUDA is checked against eager's as the two above are.
  (void)gather;
}

}  // namespace tl::passes
