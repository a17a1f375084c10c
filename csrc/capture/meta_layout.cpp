#include "capture/meta_layout.h"

#include <algorithm>

namespace tl::capture {

int64_t numel(const Dims& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

Dims contiguous_strides(const Dims& sizes) {
  Dims strides(sizes.size());
  int64_t m = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = m;
    m *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

bool is_contiguous(const Layout& t) {
  if (numel(t.sizes) == 0) return true;
  int64_t expected = 1;
  for (size_t i = t.sizes.size(); i-- > 0;) {
    if (t.sizes[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.sizes[i];
  }
  return true;
}

bool is_channels_last(const Layout& t) {
  if (t.sizes.size() != 4) return false;
  int64_t expected = 1;
  for (int d : {1, 3, 2, 0}) {
    if (t.sizes[d] == 1) continue;
    if (t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

bool is_non_overlapping_and_dense(const Layout& t) {
  if (is_contiguous(t)) return true;
  if (t.sizes.size() == 1) return t.strides[0] == 1;
  std::vector<std::pair<int64_t, int64_t>> by_stride;  // (stride, size)
  for (size_t i = 0; i < t.sizes.size(); ++i) by_stride.emplace_back(t.strides[i], t.sizes[i]);
  std::stable_sort(by_stride.begin(), by_stride.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  int64_t expected = 1;
  for (auto [stride, size] : by_stride) {
    if (size == 1) continue;
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

std::optional<Dims> broadcast_shapes(const std::vector<const Dims*>& shapes) {
  size_t ndim = 0;
  for (const Dims* s : shapes) ndim = std::max(ndim, s->size());
  Dims out(ndim, 1);
  for (const Dims* s : shapes) {
    size_t off = ndim - s->size();
    for (size_t i = 0; i < s->size(); ++i) {
      int64_t a = out[off + i], b = (*s)[i];
      if (a == b || b == 1) continue;
      if (a != 1) return std::nullopt;
      out[off + i] = b;
    }
  }
  return out;
}

Layout expand_to(const Layout& t, const Dims& shape) {
  Layout r{shape, Dims(shape.size(), 0)};
  size_t off = shape.size() - t.sizes.size();
  for (size_t i = 0; i < t.sizes.size(); ++i)
    r.strides[off + i] = t.sizes[i] == shape[off + i] ? t.strides[i] : 0;
  return r;
}

namespace {

// NOTE: follows torch._prims_common.compute_elementwise_output_logical_to_physical_perm
// step by step, ties included: meta results must match it bit for bit.
int should_swap(const std::vector<Layout>& ops, size_t a, size_t b) {
  const Dims& shape = ops[0].sizes;
  auto ge = [](int64_t x, int64_t y) { return y == 0 || (x != 0 && (x >= y || x % y == 0)); };
  for (const Layout& t : ops) {
    int64_t sa = t.strides[a], sb = t.strides[b];
    if (sa == 0 || sb == 0) continue;
    if (sa == sb) {
      if (ge(shape[b], shape[a])) continue;
      return 1;
    }
    if (ge(sb, sa)) return -1;
    if (ge(sa, sb)) return 1;
  }
  return 0;
}

std::vector<size_t> logical_to_physical(const std::vector<Layout>& ops) {
  size_t ndim = ops[0].sizes.size();
  std::vector<size_t> perm(ndim);
  bool contiguous = true, channels_last = true;
  for (const Layout& t : ops) {
    contiguous = contiguous && is_contiguous(t);
    channels_last = channels_last && is_channels_last(t);
  }
  for (size_t i = 0; i < ndim; ++i) perm[i] = i;
  if (contiguous && !channels_last) return perm;
  if (channels_last && !contiguous) return {0, 2, 3, 1};
  for (size_t i = 0; i < ndim; ++i) perm[i] = ndim - 1 - i;
  for (size_t i = 1; i < ndim; ++i) {
    size_t d1 = i;
    for (size_t d0 = i; d0-- > 0;) {
      int c = should_swap(ops, perm[d0], perm[d1]);
      if (c > 0) {
        std::swap(perm[d0], perm[d1]);
        d1 = d0;
      } else if (c < 0) {
        break;
      }
    }
  }
  std::reverse(perm.begin(), perm.end());
  return perm;
}

}  // namespace

Dims elementwise_strides(const std::vector<Layout>& operands) {
  const Dims& shape = operands[0].sizes;
  size_t ndim = shape.size();
  if (ndim == 0) return {};
  if (ndim == 1) return {1};
  // NOTE: no shortcut for one dense operand: torch's elementwise prims lay out
  // even a single operand by permutation, which differs from copying its strides
  // in the strides of size-1 dimensions.
  std::vector<size_t> perm = logical_to_physical(operands);
  Dims physical(ndim);
  for (size_t i = 0; i < ndim; ++i) physical[i] = shape[perm[i]];
  Dims physical_strides = contiguous_strides(physical);
  Dims strides(ndim);
  for (size_t i = 0; i < ndim; ++i) strides[perm[i]] = physical_strides[i];
  return strides;
}

}  // namespace tl::capture
