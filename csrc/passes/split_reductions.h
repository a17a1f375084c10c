#pragma once
// Split reductions: a reduction with few results and long rows (a column sum
// of a tall matrix, batch-norm statistics over N, H, W of a few channels, a
// whole-tensor sum) gives each result one row and so keeps only a few lanes of
// the machine busy, however its row is read. It becomes two reductions: the
// outermost reduced dimension (in memory) is split in S parts, the first
// reduction makes S partial results per output over rows S times shorter (S
// times the lanes), and the second folds the S partials (a tiny kernel). Sums
// and means accumulate the partials in float32; var_mean combines per-part
// means and variances exactly (Chan et al.: equal counts).
#include <cstdint>

#include "ir/graph.h"

namespace tl::passes {

// Splits when results * 32 < kSplitLanes (fewer than a full machine's lanes
// even with 32 lanes a row) and the rows hold at least kSplitMinRow points.
constexpr int64_t kSplitLanes = 65536;
constexpr int64_t kSplitMinRow = 16384;
// Parts of at least kSplitMinPart points each when the split dimension is cut into all of its
// points (a part per image of a batch norm's N, H, W): the partials then read x as it is,
// without a view cutting an axis in two, so pointwise producers of x join their kernel; and at
// most kSplitMaxParts of them: the fold reads a row of that many partials (a whole
// tensor's sum over a tall matrix's million rows keeps the cut view and a short fold).
constexpr int64_t kSplitMinPart = 512;
constexpr int64_t kSplitMaxParts = 4096;

// The number of parts for `results` outputs of rows of `row` points whose
// outermost reduced dimension has `outer` points: the smallest divisor S of
// `outer` that gives results * S >= kSplitLanes / 32 rows, while each part
// keeps rows of kSplitMinRow / 4 points at least; 1 if none is worth it.
int64_t split_parts(int64_t results, int64_t row, int64_t outer);

// Rewrites every sum, mean and var_mean over float tensors that qualifies;
// returns how many.
int split_reductions(ir::Graph& g);

}  // namespace tl::passes
