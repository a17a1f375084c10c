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

}  // namespace tl::runtime::cpu
