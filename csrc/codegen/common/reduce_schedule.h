#pragma once
// How a reduction kernel's lanes (CUDA threads, CPU vector lanes) map onto its
// rows, chosen by a cost model of bytes moved and parallelism (both emitters,
// docs/reductions.md):
//  - Along: neighbouring lanes take neighbouring points of one row (a warp or a
//    block per row; rows contiguous in memory: softmax, layer norm);
//  - Across: neighbouring lanes take neighbouring rows, and `slices` groups of
//    lanes split each row's points between them, combined at the end (rows
//    strided in memory with neighbouring rows contiguous: a channels-last
//    spatial mean, batch-norm statistics, a column sum). One slice is a thread
//    per row.
// Short rows (up to kShortRow points) stay in one lane's registers (Across with
// one slice), whatever the layout.
#include <cstdint>
#include <vector>

#include "codegen/common/loop_space.h"

namespace tl::codegen {

enum class RowLayout { Along, Across };

struct ReduceSchedule {
  RowLayout layout = RowLayout::Along;
  int slices = 1;         // Across: lane groups splitting a row
  int tile_rows = 32;     // Across: neighbouring rows a tile takes (a sector's worth or more)
  double cost_along = 0;  // the estimates compared (byte-equivalents)
  double cost_across = 0;
};

struct ReduceTarget {
  double full_lanes = 132 * 2048;  // lanes that saturate memory bandwidth (an H100's threads)
  int max_lanes = 1024;            // Across: tile_rows x slices lanes share their partials
  int sector_bytes = 32;           // the unit memory is read in
};

constexpr int64_t kShortRow = 16;
constexpr int kLoadsInFlight = 4;  // a lane's unrolled loop (the CUDA Tile's #pragma unroll 4)

// `bytes[b]`: element size of buffer b of s.strides (inputs, then outputs;
// index pseudo-buffers are not read from memory and may be left out).
ReduceSchedule choose_reduce_schedule(const LoopSpace& s, const std::vector<int>& bytes,
                                      size_t n_inputs, const ReduceTarget& t);

// Fraction of the bytes a group of lanes reads that it uses, when neighbouring
// lanes are `stride` elements of `elem` bytes apart (0: one broadcast value).
double coalescing(int64_t stride, int elem, int sector_bytes);

}  // namespace tl::codegen
