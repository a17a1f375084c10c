#pragma once
// Shapes and strides of op results as torch's meta kernels compute them
// (torch._prims_common: broadcasting, contiguity tests, the elementwise output
// permutation), for the fast shape inference of fast_meta.cpp.
#include <cstdint>
#include <optional>
#include <vector>

namespace tl::capture {

using Dims = std::vector<int64_t>;

struct Layout {
  Dims sizes, strides;
};

int64_t numel(const Dims& sizes);
// Row-major strides, size-0 dimensions counted as 1 (make_contiguous_strides_for).
Dims contiguous_strides(const Dims& sizes);
bool is_contiguous(const Layout& t);
bool is_channels_last(const Layout& t);  // 4-d channels-last only, as torch tests it
bool is_non_overlapping_and_dense(const Layout& t);

// The broadcast shape of `shapes`, or nullopt when they do not broadcast.
std::optional<Dims> broadcast_shapes(const std::vector<const Dims*>& shapes);
// `t` expanded to `shape` (broadcast dimensions get stride 0).
Layout expand_to(const Layout& t, const Dims& shape);

// Strides of an elementwise result over `operands`, all already expanded to
// one shape (the logical-to-physical permutation of torch's elementwise prims,
// then empty_permuted). Needs at least one operand.
Dims elementwise_strides(const std::vector<Layout>& operands);

}  // namespace tl::capture
