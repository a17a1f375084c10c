#pragma once
// mode="max-autotune" (the autotune setting), first slice: the grid of each generated
// pointwise CUDA kernel. Those kernels are grid-stride loops, so any grid computes the same
// result; the code generator's grid (a multiple of the SM count) is a guess, and on the real
// sizes a smaller or larger one can be faster. Chosen once on the first run by timing the
// kernel on its real buffers (pointwise kernels only write fresh outputs, so a launch can be
// repeated), cached in the disk cache (runtime/disk_cache.h) under the kernel's body, its
// default grid and the GPU, so another process reads the choice instead of timing again.
#include <functional>
#include <string>

namespace tl::runtime {

struct GridChoice {
  unsigned grid = 0;
  bool cached = false;  // read from the disk cache, no timing
  std::string report;   // one line for the trace: the trials and their times
};

// `key`: the kernel body's hash (LoadedKernel::tune_key); `gpu`: the device's name and SM
// count; `launch(grid)` launches the kernel once on torch's current stream. Keeps
// `default_grid` unless another grid is at least 3% faster. Throws PythonError or tl::Error
// (the caller then keeps the default grid).
GridChoice choose_grid(const std::string& key, const std::string& gpu, unsigned default_grid,
                       unsigned max_grid, const std::function<void(unsigned)>& launch);

}  // namespace tl::runtime
