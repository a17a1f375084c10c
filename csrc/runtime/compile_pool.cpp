#include "runtime/compile_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

namespace tl::runtime {

// NOTE: threads are started per batch, not kept: a batch's compile (tens of ms
// per kernel) dwarfs starting them, and no idle threads are left behind for a
// fork (a DataLoader worker) to inherit half-held.
void compile_in_parallel(size_t n, const std::function<void(size_t)>& job) {
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(n);
  auto work = [&] {
    for (size_t i; (i = next++) < n;) {
      try {
        job(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  size_t n_threads = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (size_t t = 1; t < n_threads; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace tl::runtime
