#include "runtime/cpu/parallel.h"

#include <omp.h>

#include <algorithm>

namespace tl::runtime::cpu {

void parallel_run(KernelFn fn, int64_t outer_numel, int64_t work_per_point, char* const* bufs,
                  int num_threads) {
  if (outer_numel <= 0) return;
  int64_t work = outer_numel * std::max<int64_t>(work_per_point, 1);
  // Each thread gets at least kSerialElements / 2 elements of work.
  int64_t useful = std::max<int64_t>(1, work / (kSerialElements / 2));
  int n = static_cast<int>(std::min<int64_t>({num_threads, useful, outer_numel}));
  if (n <= 1 || work < kSerialElements) {
    fn(0, outer_numel, bufs);
    return;
  }
  // Chunks are multiples of 16 points so neighbouring threads rarely write the
  // same cache line.
  int64_t chunk = (outer_numel + n - 1) / n;
  chunk = std::min(outer_numel, (chunk + 15) / 16 * 16);
#pragma omp parallel num_threads(n)
  {
    int64_t begin = omp_get_thread_num() * chunk;
    int64_t end = std::min(outer_numel, begin + chunk);
    if (begin < end) fn(begin, end, bufs);
  }
}

void parallel_run_group(const std::vector<GroupPiece>& members, int num_threads) {
  int64_t work = 0;
  for (const GroupPiece& m : members) work += m.end - m.begin;
  int64_t useful = std::max<int64_t>(1, work / (kSerialElements / 2));
  int n = static_cast<int>(std::min<int64_t>(num_threads, useful));
  if (n <= 1 || work < kSerialElements) {
    for (const GroupPiece& m : members)
      if (m.begin < m.end) m.fn(m.begin, m.end, m.bufs);
    return;
  }
  // NOTE: pieces of about work / (4 n) points (multiples of 16, at least kSerialElements / 2):
  // members of very different sizes (a bias and a matrix) still spread over every thread.
  int64_t piece = std::max<int64_t>(kSerialElements / 2, work / (4 * int64_t{n}));
  piece = (piece + 15) / 16 * 16;
  std::vector<GroupPiece> pieces;
  for (const GroupPiece& m : members)
    for (int64_t b = m.begin; b < m.end; b += piece)
      pieces.push_back({m.fn, m.bufs, b, std::min(m.end, b + piece)});
  const int64_t count = static_cast<int64_t>(pieces.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(n)
  for (int64_t i = 0; i < count; ++i) pieces[i].fn(pieces[i].begin, pieces[i].end, pieces[i].bufs);
}

}  // namespace tl::runtime::cpu
