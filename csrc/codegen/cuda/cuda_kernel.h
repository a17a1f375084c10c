#pragma once
// Loop-IR Kernel -> one self-contained CUDA C translation unit plus its launch
// shape. Only text is produced here: compiling (NVRTC) and launching (driver
// API) live in runtime/cuda, so this folder builds and is tested on machines
// without a GPU or CUDA toolkit.
#include <cstdint>
#include <string>
#include <vector>

#include "ir/loop_ir.h"

namespace tl::codegen::cuda {

// What the emitter needs to know about the device it targets.
struct Target {
  int sm_major = 9, sm_minor = 0;  // compute capability
  int multiprocessors = 132;       // bounds grid sizes of grid-stride loops
  // Threads a block of pointwise kernels (a compile-time constant of their text); max-autotune
  // builds each pointwise kernel at a few block sizes and launches the fastest.
  int pointwise_block = 256;
  // Threads a block of reductions whose rows are threads, warps or blocks (0: the code
  // generator's choice from the row layout and length). For a block row this is the threads
  // a row, for thread and warp rows the rows a block, for tile rows the tile's lanes (its rows
  // times the slices splitting each row: another block is another split). Max-autotune builds
  // reductions at the sizes CudaKernel::other_blocks lists and launches the fastest; anything
  // other than a multiple of 32 up to 1024 (for tiles: other than those listed) is ignored.
  int reduce_block = 0;
};

struct CudaKernel {
  std::string name;    // the scalar entry point: extern "C" __global__
  std::string source;  // whole translation unit; no #include (NVRTC gets no system headers)
  // Entry parameters, for both entries: one pointer per kernel input, then one
  // per output, in Kernel::inputs / Kernel::outputs order. Shapes and strides
  // are compile-time constants (graphs are specialised on them by guards),
  // unless the kernel has runtime sizes (below).
  //
  // The vectorised entry (16-byte loads/stores) exists when `vector_name` is
  // not empty; the runtime may launch it only when every pointer listed in
  // `aligned_params` is 16-byte aligned, and must launch `name` otherwise.
  std::string vector_name;
  // When not empty, the vector entry asks for a register cap (__launch_bounds__'s
  // minimum blocks) and this is the same entry without it: the runtime launches
  // it instead where the capped one spills registers to local memory.
  std::string vector_fallback_name;
  std::vector<int> aligned_params;  // parameter indices
  // Launch shape (1-D grid and block), same for both entries.
  int64_t grid = 1;
  int block = 256;
  int shared_bytes = 0;  // dynamic shared memory
  // Other block sizes this kernel's text can be built at (Target::pointwise_block for
  // pointwise kernels, Target::reduce_block for reductions), each computing the same result:
  // max-autotune's other builds (tile rows: half or twice the slices a row).
  std::vector<int> other_blocks;
  // Both entries begin with tl_after_prior_grid(): the runtime may launch them
  // with programmatic stream serialization (overlapping the previous kernel's
  // tail). Hand-written kernels leave it false and are launched plainly.
  bool dependent_launch = false;
  // Runtime sizes (ir::Kernel::runtime_sizes): the loop space's sizes, strides and offsets
  // other than 0 and 1 are not in the text; every entry takes them as one more parameter after
  // the outputs, a `tl_dims<T, N>` passed by value holding these N numbers in order, each
  // `dim_bytes` wide (4: the kernel's 32-bit index type, 8: 64-bit). The text still holds every
  // decision taken from the sizes (index width, vector entry, row strategy, unrolling), so two
  // kernels with the same text are the same function of (buffers, dims): one compiled program
  // serves every size that gives that text. Empty: no such parameter. The launch shape (grid)
  // is this size's.
  std::vector<int64_t> dims;
  int dim_bytes = 8;
  // Grouped kernels (ir::Kernel::grouped): one more entry, `group.name`, whose one parameter
  // is a table of up to `members` kernels of this code (passed by value, `bytes` long):
  //   char* p[members][buffers];        at 0: each member's inputs', then outputs' pointers
  //   tl_dims d[members];               at dims_at: each member's dims (absent without dims)
  //   unsigned first[members + 1];      at first_at: each member's first block; the rest the
  //                                     grid's size
  // Member m runs blocks [first[m], first[m + 1]): ceil(outer / points_per_block) of them, at
  // most max_blocks. The runtime launches members whose LoadedKernels share this code.
  struct Group {
    std::string name;  // empty: no group entry
    int members = 0, buffers = 0;
    int dims_at = 0, first_at = 0, bytes = 0;
    int64_t points_per_block = 0, max_blocks = 0;
  } group;
};

// Throws tl::Error (Internal) naming the kernel and the expr it cannot emit.
CudaKernel emit_cuda_kernel(const ir::Kernel& k, const std::string& fn_name, const Target& target);

}  // namespace tl::codegen::cuda
