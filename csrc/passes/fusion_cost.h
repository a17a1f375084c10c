#pragma once
// The fusion cost model: whether a producer joining a reduction kernel pays
// (price_prologue: broadcasts recomputed or re-reading large inputs per row), and whether joining a
// reduction to the group that reads its result (a per-element epilogue: batch norm's normalise +
// SiLU, softmax's division done by hand) makes one kernel cheaper than the two it replaces. Fusion
// is not free there: the fused kernel runs one row per outer point, so the epilogue inherits the
// reduction's parallelism, and every pass over a row that does not stay on chip reads it again from
// memory. The unfused epilogue is a pointwise kernel with one lane per element. Both options are
// priced in bytes moved, scaled by how much of the machine their lanes fill, plus a launch each
// (docs/reductions.md gives the numbers' origin).
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
// Cache a value re-read by many points of a kernel stays in (an H100's L2 is 50 MB,
// a CPU's L2 1–2 MB a core and its L3 tens of MB): re-reads of smaller values cost no
// memory traffic.
constexpr double kCacheBytes = 4 << 20;
// Compute priced as bytes (roofline: a kernel costs the larger of its bytes and
// its compute). A simple op on a vector lane is ~1/16 of a 4-byte load's time on
// either device; a transcendental (exp, tanh, erf, ...) ~16 simple ops.
constexpr double kOpBytes = 0.125;
constexpr double kHeavyOpBytes = 2;
// A kernel launch priced as bytes moved (a few microseconds at ~2 TB/s are ~8 MB;
// a CPU call costs far less, so the value sits between).
constexpr double kLaunchBytes = 1 << 20;
// Row bytes that later passes still find on chip (registers, shared memory, L1):
// the CUDA row cache holds 32 values a thread of a 1024-thread block.
constexpr double kRowOnChipBytes = 128 * 1024;

EpilogueChoice price_epilogue(const EpilogueCase& c);

// A pointwise producer joining a reduction kernel (a prologue): it is then
// computed at every kernel point that reads it, with the kernel's schedule.
// Per-point quantities are for the kernel's points, per-element ones for the
// producer's own elements.
struct PrologueCase {
  double points = 1;         // kernel points (rows × points per row)
  double numel = 1;          // the producer's elements (< points: broadcast, recomputed)
  double op_bytes = 0;       // the producer's body, priced per evaluation (kOpBytes, ...)
  double other_bytes = 0;    // per point: what the kernel reads besides the producer's inputs
  double other_ops = 0;      // per point: the kernel's own compute (priced as op_bytes)
  double in_bytes = 0;       // per point: the producer's inputs as the fused kernel reads them
  double in_elem_bytes = 0;  // per element: its full-size inputs, as a kernel of its own reads them
  double out_bytes = 4;      // per element: its value
  double out_read_bytes = 4;  // per point: its stored value as the kernel would read it
  bool stored = false;        // its value is written out anyway (read outside the kernel)
};

struct PrologueChoice {
  double fused = 0, unfused = 0;  // byte-equivalents; unfused includes the producer's kernel
  bool fuse = true;
};

PrologueChoice price_prologue(const PrologueCase& c);

}  // namespace tl::passes
