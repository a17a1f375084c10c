#include "codegen/common/reduce_schedule.h"

#include <algorithm>
#include <cstdlib>

namespace tl::codegen {

namespace {
int64_t product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}
}  // namespace

double coalescing(int64_t stride, int elem, int sector_bytes) {
  if (stride == 0) return 1;
  double span = double(std::llabs(stride)) * elem;
  return span <= elem ? 1.0 : std::max(double(elem) / sector_bytes, elem / span);
}

// NOTE: each option's cost is the bytes its loads actually pull from memory
// (bytes used / coalescing of neighbouring lanes) divided by the share of the
// machine its lanes keep busy. Along gives a row up to 1024 lanes; Across gives
// a row `slices` lanes, taking as many as the rows leave room for.
ReduceSchedule choose_reduce_schedule(const LoopSpace& s, const std::vector<int>& bytes,
                                      size_t n_inputs, const ReduceTarget& t) {
  ReduceSchedule r;
  int64_t rows = product(s.outer), len = product(s.red);
  size_t last = s.outer.size() - 1, red_last = s.outer.size() + s.red.size() - 1;
  // NOTE: a tile needs only as many neighbouring rows as fill one memory sector
  // (16 of bf16, 8 of f32): narrower tiles leave more lanes for slicing rows.
  int widest = 1;
  for (size_t b = 0; b < n_inputs && b < bytes.size(); ++b) widest = std::max(widest, bytes[b]);
  int tile = 8;
  while (tile < 32 && tile * widest < t.sector_bytes) tile *= 2;
  r.tile_rows = tile;
  // Slices: enough lanes to fill the machine, at most one per point and max_lanes a tile.
  int64_t want = int64_t(t.full_lanes) / std::max<int64_t>(rows, 1);
  int slices = 1;
  // NOTE: a slice keeps 8 points at least: the tile's combine costs log2(slices) steps.
  while (slices * tile * 2 <= t.max_lanes && slices < want && slices * 16 <= len) slices *= 2;
  r.slices = slices;
  if (len <= kShortRow) {
    r.layout = RowLayout::Across;
    r.slices = 1;
    return r;
  }
  // NOTE: with rows to spare, a tile takes more of them, up to 256 lanes a
  // block: a tile of 16 rows x 2 slices was a 32-thread block, and an SM holds
  // at most 32 blocks (half its threads). Growth stops while two blocks an SM
  // are still left.
  const int64_t blocks_wanted = 2 * int64_t(t.full_lanes / 2048);
  while (r.tile_rows * r.slices * 2 <= std::min(256, t.max_lanes) &&
         rows / (int64_t{r.tile_rows} * 2) >= blocks_wanted)
    r.tile_rows *= 2;
  double along = 0, across = 0;
  for (size_t b = 0; b < n_inputs && b < bytes.size(); ++b) {
    double total = double(rows) * double(len) * bytes[b];
    if (s.strides[b][red_last] == 0 && s.strides[b][last] == 0) continue;  // per-row values
    // Across: neighbouring lanes step the last outer axis (when it has two rows or more).
    int64_t across_stride = s.outer[last] > 1 ? s.strides[b][last] : s.strides[b][red_last];
    along += total / coalescing(s.strides[b][red_last], bytes[b], t.sector_bytes);
    across += total / coalescing(across_stride, bytes[b], t.sector_bytes);
  }
  // NOTE: a lane with several points keeps up to kLoadsInFlight loads in flight
  // (its loop is unrolled), which counts as that many lanes for memory.
  auto use = [&](double lanes, double points_per_lane) {
    double in_flight = std::clamp(points_per_lane, 1.0, double(kLoadsInFlight));
    return std::clamp(lanes * in_flight / t.full_lanes, 1e-6, 1.0);
  };
  double along_lanes = double(std::min<int64_t>(len, 1024));
  r.cost_along = along / use(double(rows) * along_lanes, double(len) / along_lanes);
  r.cost_across = across / use(double(rows) * slices, double(len) / slices);
  r.layout = r.cost_across < r.cost_along ? RowLayout::Across : RowLayout::Along;
  return r;
}

}  // namespace tl::codegen
