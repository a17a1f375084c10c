#pragma once
// Large CPU kernel outputs from a pool of warm memory.
//
// Why: torch's CPU allocator hands every allocation of 32 MB and more to
// glibc, which maps fresh pages for it and unmaps them on free; the first
// write to each 4 KB page then faults (measured on the 2-core dev VM: a fresh
// 64 MB tensor costs 14 ms to fill, a reused one 1.4 ms). Kernel outputs at
// least kMinPooledBytes big are instead carved from blocks this pool keeps
// mapped (2 MB aligned, transparent huge pages advised), handed to torch as a
// DLPack tensor whose deleter gives the block back. Idle blocks are capped by
// TORCHLITE_CPU_POOL_MB (default 1024; 0 turns the pool off).
//
// Idle memory must not starve eager code (issue 26 item 9), so the pool gives
// it back three ways: an idle block's pages are marked MADV_FREE (the kernel
// takes them back under memory pressure, without swapping; reused before
// that, they cost nothing), a block is freed instead of kept when the memory
// left to the process (available RAM, cgroup limit, address-space limit) is
// less than what the pool would then hold, and a background thread frees
// blocks idle for kIdleTrimSeconds (10 s). An allocation that fails (the pool's own,
// or a kernel output from torch) is retried once after freeing every idle block.
//
// Thread safety: blocks come back from whichever thread frees the tensor,
// with or without the GIL; one mutex guards the pool's lists.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/py_ref.h"
#include "ir/loop_ir.h"

namespace tl::runtime {

constexpr size_t kMinPooledBytes = size_t(16) << 20;

// Bytes a dense-or-strided CPU tensor of these sizes/strides (elements)
// spans; 0 for a zero-element tensor.
size_t strided_extent_bytes(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                            ir::ScalarType t);

// A CPU torch tensor backed by a pooled block (torch._C._from_dlpack), or a
// null PyRef with no error set when the pool is off. Its storage is not
// resizable (resize_ to a larger size raises). Needs the GIL. Throws
// PythonError if torch rejected the tensor.
PyRef pooled_empty_strided(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                           ir::ScalarType t);

// Idle blocks unused this long are freed by the pool's trimmer thread.
constexpr double kIdleTrimSeconds = 10.0;
// Tests only: the trimmer's age limit from now on (seconds; kIdleTrimSeconds by default).
void set_idle_trim_seconds(double seconds);

struct PoolStats {
  size_t idle_bytes = 0;  // kept for reuse
  size_t live_bytes = 0;  // inside tensors now
  int64_t reused = 0;     // allocations served by an idle block
  int64_t fresh = 0;      // allocations that mapped a new block
  int64_t trimmed = 0;    // idle blocks freed by age, memory pressure or a failed allocation
  int64_t refused = 0;    // blocks freed on return instead of kept (cap or memory pressure)
};
PoolStats pool_stats();

// Frees every idle block (torchlite.reset(), a failed allocation); live ones
// return to the pool later. Returns the bytes freed.
size_t release_idle_blocks();

// Frees idle blocks unused for at least `seconds` (the trimmer thread; tests).
size_t trim_idle_blocks(double seconds);

// Bytes this process may still allocate before hitting a limit: the least of
// the system's available memory, the cgroup's memory.max and RLIMIT_AS
// headroom; SIZE_MAX when none can be read.
size_t memory_headroom();

}  // namespace tl::runtime
