#include "codegen/common/loop_space.h"

#include <algorithm>
#include <cstdlib>

#include "core/errors.h"

namespace tl::codegen {

namespace {
struct Axes {
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides;  // [buffer][axis]
  std::vector<char> fixed;                    // per axis: a model constant (LoopSpace::fixed)
};

// Drops size-1 axes, then merges axis d into the previous kept one when
// every buffer has stride[prev] == stride[d] * size[d].
Axes merge(const Axes& a) {
  Axes out;
  out.strides.resize(a.strides.size());
  for (size_t d = 0; d < a.sizes.size(); ++d) {
    if (a.sizes[d] == 1) continue;
    bool mergeable = !out.sizes.empty();
    for (size_t b = 0; mergeable && b < a.strides.size(); ++b)
      mergeable = out.strides[b].back() == a.strides[b][d] * a.sizes[d];
    if (mergeable) {
      out.sizes.back() *= a.sizes[d];
      out.fixed.back() &= a.fixed[d];
      for (size_t b = 0; b < a.strides.size(); ++b) out.strides[b].back() = a.strides[b][d];
      continue;
    }
    out.sizes.push_back(a.sizes[d]);
    out.fixed.push_back(a.fixed[d]);
    for (size_t b = 0; b < a.strides.size(); ++b) out.strides[b].push_back(a.strides[b][d]);
  }
  return out;
}

void permute(Axes& a, const std::vector<size_t>& order) {
  Axes out;
  for (size_t d : order) out.sizes.push_back(a.sizes[d]);
  for (size_t d : order) out.fixed.push_back(a.fixed[d]);
  for (const auto& bs : a.strides) {
    out.strides.emplace_back();
    for (size_t d : order) out.strides.back().push_back(bs[d]);
  }
  a = std::move(out);
}

// Memory order of one buffer over `sizes`: largest stride outermost, ties
// (and size-1 axes, last) keeping their order.
std::vector<size_t> memory_order_of(const std::vector<int64_t>& sizes,
                                    const std::vector<int64_t>& st) {
  std::vector<size_t> order, ones;
  for (size_t d = 0; d < sizes.size(); ++d) (sizes[d] == 1 ? ones : order).push_back(d);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return std::abs(st[x]) > std::abs(st[y]); });
  order.insert(order.end(), ones.begin(), ones.end());
  return order;
}

// Reorders the axes so that buffer `b` is walked in memory order (largest
// stride outermost; ties keep their order). A kernel writing a channels-last
// tensor then stores contiguously instead of with a stride of C.
void memory_order(Axes& a, size_t b) {
  const auto& st = a.strides[b];
  // Size-1 axes go last: merge() drops them, wherever they are.
  std::vector<size_t> order, ones;
  for (size_t d = 0; d < a.sizes.size(); ++d) (a.sizes[d] == 1 ? ones : order).push_back(d);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return st[x] > st[y]; });
  order.insert(order.end(), ones.begin(), ones.end());
  permute(a, order);
}

// A scalar loop still runs one axis of size 1.
void ensure_axis(Axes& a) {
  if (!a.sizes.empty()) return;
  a.sizes.push_back(1);
  a.fixed.push_back(1);
  for (auto& s : a.strides) s.push_back(0);
}
}  // namespace

std::vector<size_t> reduction_order(const std::vector<int64_t>& sizes,
                                    const std::vector<std::vector<int64_t>>& strides,
                                    const std::vector<int64_t>& elem) {
  constexpr int64_t kLine = 64;  // bytes a strided access brings in
  std::vector<size_t> row_major(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d) row_major[d] = d;
  // The innermost loop is the last axis of size > 1 (merge() drops the others).
  auto cost = [&](const std::vector<size_t>& order) {
    double bytes = 0;
    size_t inner = order.size();
    for (size_t i = order.size(); i-- > 0;)
      if (sizes[order[i]] > 1) {
        inner = order[i];
        break;
      }
    for (size_t b = 0; b < strides.size(); ++b) {
      double touched = 1;
      for (size_t d = 0; d < sizes.size(); ++d)
        if (strides[b][d] != 0) touched *= static_cast<double>(sizes[d]);
      int64_t s = inner < sizes.size() ? std::abs(strides[b][inner]) : 0;
      int64_t per = s <= 1 ? elem[b] : std::min(kLine, elem[b] * s);
      bytes += touched * static_cast<double>(per);
    }
    return bytes;
  };
  std::vector<size_t> best = row_major;
  double best_cost = cost(row_major);
  for (const auto& st : strides) {
    std::vector<size_t> order = memory_order_of(sizes, st);
    double c = cost(order);
    if (c < best_cost) best = std::move(order), best_cost = c;
  }
  return best;
}

LoopSpace coalesce(const ir::Kernel& k, bool index_buffers, bool order_reduction) {
  size_t n = k.shape.size();
  TL_CHECK(k.reduction_axes >= 0 && static_cast<size_t>(k.reduction_axes) <= n)
      << "kernel " << k.name << ": " << k.reduction_axes << " reduction axes of " << n;
  size_t n_outer = n - k.reduction_axes;
  std::vector<const ir::BufferView*> views;
  for (auto& v : k.inputs) views.push_back(&v);
  for (auto& o : k.outputs) views.push_back(&o.view);
  LoopSpace s;
  std::vector<ir::BufferView> index_views;
  for (const ir::Expr& e : k.exprs)
    if (index_buffers && e.op == ir::ExprOp::Index && e.ivalue >= 0 &&
        static_cast<size_t>(e.ivalue) < n && !s.index_buffer.count(e.ivalue)) {
      s.index_buffer[e.ivalue] = views.size() + index_views.size();
      ir::BufferView v{ir::ScalarType::I64, std::vector<int64_t>(n, 0), 0};
      v.strides[e.ivalue] = 1;
      index_views.push_back(std::move(v));
    }
  for (auto& v : index_views) views.push_back(&v);
  Axes outer, red;
  outer.strides.resize(views.size());
  red.strides.resize(views.size());
  for (size_t d = 0; d < n; ++d) {
    (d < n_outer ? outer : red).sizes.push_back(k.shape[d]);
    (d < n_outer ? outer : red)
        .fixed.push_back(k.runtime_sizes && d < k.static_axes.size() && k.static_axes[d]);
  }
  for (size_t b = 0; b < views.size(); ++b) {
    TL_CHECK(views[b]->strides.size() == n)
        << "kernel " << k.name << ": buffer " << b << " has " << views[b]->strides.size()
        << " strides for " << n << " axes";
    for (size_t d = 0; d < n; ++d)
      (d < n_outer ? outer : red).strides[b].push_back(views[b]->strides[d]);
  }
  // NOTE: only pointwise kernels are reordered: reductions keep row-major
  // order (argmax/argmin take the first index). Coordinates (Index exprs) then
  // come from index pseudo-buffers, which reordering keeps exact.
  bool reads_index = std::any_of(k.exprs.begin(), k.exprs.end(),
                                 [](const ir::Expr& e) { return e.op == ir::ExprOp::Index; });
  if (k.reduction_axes == 0 && !k.outputs.empty() && (index_buffers || !reads_index))
    memory_order(outer, k.inputs.size());
  // NOTE: a sum over the channels and the spatial axes of a channels-last tensor (GroupNorm(1, C)
  // in PoolFormer) walked row-major steps C elements at a time in its innermost loop: a cache
  // line per element, and no vector loads. Reduction order does not change a sum's value beyond
  // rounding (the CPU sums are reassociated anyway: reduce_ops.cpp); argmax/argmin's first-index
  // rule reads the row-major position (rlin), so those keep it.
  bool arg_reduce = std::any_of(k.exprs.begin(), k.exprs.end(), [](const ir::Expr& e) {
    return e.op == ir::ExprOp::ReduceArgMax || e.op == ir::ExprOp::ReduceArgMin;
  });
  if (order_reduction && red.sizes.size() > 1 && !arg_reduce && (index_buffers || !reads_index)) {
    std::vector<int64_t> elem;
    std::vector<std::vector<int64_t>> data_strides;  // index pseudo-buffers are not memory
    for (size_t b = 0; b < views.size() - index_views.size(); ++b) {
      elem.push_back(ir::scalar_type_size(views[b]->type));
      data_strides.push_back(red.strides[b]);
    }
    permute(red, reduction_order(red.sizes, data_strides, elem));
  }
  outer = merge(outer);
  red = merge(red);
  ensure_axis(outer);
  if (k.reduction_axes > 0) ensure_axis(red);
  s.outer = outer.sizes;
  s.red = red.sizes;
  s.fixed = outer.fixed;
  s.fixed.insert(s.fixed.end(), red.fixed.begin(), red.fixed.end());
  for (size_t b = 0; b < views.size(); ++b) {
    auto st = outer.strides[b];
    st.insert(st.end(), red.strides[b].begin(), red.strides[b].end());
    s.strides.push_back(std::move(st));
    s.offsets.push_back(views[b]->offset);
  }
  return s;
}

// NOTE: an input that is the same at every point of a tile (stride 0 along the
// last outer axis: a norm's per-row statistic in its weight gradient's column
// sum) is read once a reduction step either way, so it does not decide: it
// kept the weight gradients of RMSNorm and layer norm a column at a time
// (15x slower than a tile of columns on one core).
int outer_tile(const LoopSpace& s, size_t n_inputs) {
  if (s.red.empty()) return 1;
  size_t last = s.outer.size() - 1, red_last = s.outer.size() + s.red.size() - 1;
  bool contiguous_outer = false;
  for (size_t bi = 0; bi < n_inputs; ++bi) {
    if (s.strides[bi][last] == 0) continue;
    if (s.strides[bi][red_last] == 1) return 1;
    contiguous_outer |= s.strides[bi][last] == 1;
  }
  return contiguous_outer && s.outer[last] > 1 ? 1024 : 1;
}

}  // namespace tl::codegen
