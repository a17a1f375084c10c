#pragma once
// mode="max-autotune" (the autotune setting): the grid of each generated CUDA kernel,
// pointwise or reduction (rows or tiles a block: the reduction layouts loop over them with a
// grid stride too). Those kernels are grid-stride loops, so any grid computes the same
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
// count; `time_us(grid)` times the kernel at that grid (launch_timer below on a GPU; tests
// pass a fake one). Grids tried: default_grid / 8 to default_grid * 4, capped at `max_grid`
// (a reduction passes its default: more blocks than rows or tiles would idle). Keeps
// `default_grid` unless another grid is at least 3% faster; the choice goes to the disk cache,
// and a later call with the same key, grid and GPU reads it without timing. Throws
// PythonError or tl::Error (the caller then keeps the default grid).
GridChoice choose_grid(const std::string& key, const std::string& gpu, unsigned default_grid,
                       unsigned max_grid, const std::function<double(unsigned)>& time_us);

// A timer for choose_grid: `launch(grid)` launches the kernel once on torch's current stream;
// the time is the best of 3 runs of 10 back-to-back launches, measured with CUDA events.
std::function<double(unsigned)> launch_timer(std::function<void(unsigned)> launch);

}  // namespace tl::runtime
