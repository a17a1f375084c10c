#pragma once
// The fusion cost model: whether joining a reduction to the group that reads
// its result (a per-element epilogue: batch norm's normalise + SiLU, softmax's
// division done by hand) makes one kernel cheaper than the two it replaces.
// Fusion is not free there: the fused kernel runs one row per outer point, so
// the epilogue inherits the reduction's parallelism, and every pass over a row
// that does not stay on chip reads it again from memory. The unfused epilogue
// is a pointwise kernel with one lane per element. Both options are priced in
// bytes moved, scaled by how much of the machine their lanes fill, plus a launch
// each (docs/reductions.md gives the numbers' origin).
#include <cstdint>

namespace tl::passes {

struct KernelEstimate {
  double bytes = 0;  // memory traffic
  double lanes = 0;  // independent work items the kernel can run in parallel
  // Cost in byte-equivalents: a launch, then the traffic at the bandwidth the
  // lanes can draw (a kernel with fewer lanes than the machine runs slower).
  double cost() const;
};

// A reduction and the per-element epilogue that reads its result.
struct EpilogueCase {
  int64_t rows = 1;       // outer points (reduction results)
  int64_t row_len = 1;    // points per row
  double in_bytes = 4;    // bytes per point the reduction reads
  double out_bytes = 4;   // bytes per point the epilogue stores
  int reduce_passes = 1;  // passes over a row before the epilogue's
};

struct EpilogueChoice {
  KernelEstimate fused, reduction, epilogue;  // the fused kernel, or the two unfused ones
  bool fuse = false;
  bool row_on_chip = false;  // rows short enough to be re-read from registers or cache
};

// Lanes one row gets at most (a CUDA block; a CPU core's vector loop).
constexpr int64_t kLanesPerRow = 1024;
// Lanes that fill the machine (an H100's 132 SMs hold 270k threads; memory
// bandwidth saturates from about a quarter of that).
constexpr double kFullLanes = 65536;
// A kernel launch priced as bytes moved (a few microseconds at ~2 TB/s are ~8 MB;
// a CPU call costs far less, so the value sits between).
constexpr double kLaunchBytes = 1 << 20;
// Row bytes that later passes still find on chip (registers, shared memory, L1):
// the CUDA row cache holds 32 values a thread of a 1024-thread block.
constexpr double kRowOnChipBytes = 128 * 1024;

EpilogueChoice price_epilogue(const EpilogueCase& c);

}  // namespace tl::passes
