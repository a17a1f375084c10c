#pragma once
// mode="max-autotune" (the autotune setting): the grid of each generated CUDA kernel,
// pointwise or reduction (rows or tiles a block: the reduction layouts loop over them with a
// grid stride too). Those kernels are grid-stride loops, so any grid computes the same
// result; the code generator's grid (a multiple of the SM count) is a guess, and on the real
// sizes a smaller or larger one can be faster. Chosen once on the first run by timing the
// kernel on its real buffers (pointwise kernels only write fresh outputs, so a launch can be
// repeated), cached in the disk cache (runtime/disk_cache.h) under the kernel's body, its
// default grid and the GPU, so another process reads the choice instead of timing again.
// Kernels are also built at other block sizes (a constant of their text: a pointwise
// kernel's threads a block, a reduction's rows a block or threads a row, a tile's slices
// splitting each of its rows), and a kernel with a 16-byte vector entry also tries its scalar
// one; the choice is then a (variant, grid) pair (choose_launch).
#include <functional>
#include <string>
#include <vector>

namespace tl::runtime {

struct GridChoice {
  unsigned grid = 0;
  bool cached = false;  // read from the disk cache, no timing
  std::string report;   // one line for the trace: the trials and their times
};

// One build (and entry) of a kernel to try: its name in the report ("block 128", "block 256
// scalar"; "" for a kernel with one), the code generator's grid for it and the most blocks
// worth trying.
struct LaunchVariant {
  std::string label;
  unsigned grid = 1, max_grid = 1;
};

struct LaunchChoice {
  size_t variant = 0;  // index into the variants
  unsigned grid = 0;
  bool cached = false;
  std::string report;
};

// `key`: the kernel body's hash (LoadedKernel::tune_key); `gpu`: the device's name and SM
// count; `time_us(grid)` times the kernel at that grid (launch_timer below on a GPU; tests
// pass a fake one). Grids tried: default_grid / 8 to default_grid * 4, capped at `max_grid`
// (a reduction passes its default: more blocks than rows or tiles would idle). Keeps
// `default_grid` unless another grid is at least 3% faster, and untried when the default runs
// under 5 us (launch-bound: see kMinTunedUs); the choice goes to the disk cache,
// and a later call with the same key, grid and GPU reads it without timing. Throws
// PythonError or tl::Error (the caller then keeps the default grid).
GridChoice choose_grid(const std::string& key, const std::string& gpu, unsigned default_grid,
                       unsigned max_grid, const std::function<double(unsigned)>& time_us);

// choose_grid over several builds of one kernel: every variant's grids (its grid / 8 to its
// grid * 4, capped at its max_grid) are timed by `time_us(variant, grid)`; the first variant
// at its own grid is the default, timed first and again last, kept unless another launch is
// at least 3% faster than its faster time, and then again when timed twice more beside the
// default, alternately (the medians compared: a chance winner of many trials keeps no lead).
// Cached under the key, the variants (labels and grids) and the GPU. `variants` not empty.
// choose_grid is its one-variant case.
LaunchChoice choose_launch(const std::string& key, const std::string& gpu,
                           const std::vector<LaunchVariant>& variants,
                           const std::function<double(size_t, unsigned)>& time_us);

// mode="max-autotune" for an extern call with several equivalent forms (a matmul with its bias
// in the call, its bias added in the kernel that reads it, or bias and activation in
// cuBLASLt's epilogue: pipeline/matmul_epilogues.h): each alternative's time is `time_us(v)`,
// the first (`labels[0]`, what the graph does without autotune) timed first and again last and
// kept unless another is at least 3% faster than its faster time and stays so timed twice more
// beside it (as choose_launch). Cached on disk under `key` (the call's kind, sizes, layouts and
// dtype), the labels and `gpu`; a later call reads it without timing. Counts autotune_trials /
// autotune_cached as the launch choices do. Throws PythonError or tl::Error (the caller then keeps
// the first).
struct VariantChoice {
  size_t variant = 0;
  bool cached = false;
  std::string report;  // "addmm: 41.2 us; mm+bias: 38.0 us; addmm again: 41.0 us; -> mm+bias"
};
VariantChoice choose_variant(const std::string& key, const std::string& gpu,
                             const std::vector<std::string>& labels,
                             const std::function<double(size_t)>& time_us);

// A timer for choose_variant: `call()` queues the alternative's work (torch ops) on torch's
// current stream; timed as launch_timer does, behind a longer hold (the host queues torch ops
// slower than kernel launches).
std::function<double()> call_timer(std::function<void()> call);

// The device's name, compute capability and SM count: what every autotune choice is keyed by.
std::string gpu_identity(int device);

// A timer for choose_grid: `launch(grid)` launches the kernel once on torch's current stream;
// the time is the median of 5 runs of 10 back-to-back launches (after a warm-up run of 10),
// measured with CUDA events behind a spinning kernel that holds the stream while they are queued
// (device time, not launch rate).
std::function<double(unsigned)> launch_timer(std::function<void(unsigned)> launch);

}  // namespace tl::runtime
