#pragma once
// The process-wide ORC LLJIT that turns loop-IR kernels into native functions.
// No LLVM types here, so runtime/compiled_graph.cpp stays free of LLVM headers.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/loop_ir.h"

namespace tl::runtime::cpu {

// bufs: data pointers of kernel.inputs then kernel.outputs; runs the outer
// linear indices [begin, end).
using KernelFn = void (*)(int64_t begin, int64_t end, char* const* bufs);

// The functions of one compile_kernels call and what keeps their code mapped:
// each kernel's object lives in a JITDylib of its own, removed (its memory
// unmapped) when the last owner of the kernel is gone. Identical kernels of
// different graphs share one.
struct CompiledKernels {
  std::vector<KernelFn> fns;
  // Per kernel: its dims array (codegen/cpu/kernel_emitter.h), empty unless
  // the kernel takes runtime sizes; pass it as the entry after the outputs.
  std::vector<std::vector<int64_t>> dims;
  std::shared_ptr<const void> owner;  // call fns only while holding it
};

// Generates, optimises (O2, host CPU) and links every kernel; kernels are
// compiled on parallel threads, and each object is looked up in / written to
// the on-disk cache (runtime/disk_cache.h) first; a cached object that does
// not link is discarded and compiled again. Bumps counters().kernels per
// kernel and counters().cache_hits per kernel loaded from disk. Throws
// tl::Error naming the kernel, LLVM's message and where its IR was written.
CompiledKernels compile_kernels(const std::vector<const ir::Kernel*>& kernels);

// Kernels whose code is mapped now (tests: code is freed with its last owner).
int64_t live_kernels();
// Kernels LLVM optimised and compiled in this process (neither linked already
// nor loaded from the disk cache): tests of runtime sizes count them.
int64_t llvm_compiles();

// Kernels whose LLVM module was emitted (and printed and hashed) in this process: a kernel
// whose lowered form matches one still linked (codegen/cpu/emission_key.h) is not.
int64_t kernel_emits();

// Tests only: forgets which kernels are linked, so the next compile of the
// same kernel goes to the disk cache (live kernels keep their own JITDylib).
void forget_linked_kernels();

}  // namespace tl::runtime::cpu
