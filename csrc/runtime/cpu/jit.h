#pragma once
// The process-wide ORC LLJIT that turns loop-IR kernels into native functions.
// No LLVM types here, so runtime/compiled_graph.cpp stays free of LLVM headers.
#include <cstdint>
#include <string>
#include <vector>

#include "ir/loop_ir.h"

namespace tl::runtime::cpu {

// bufs: data pointers of kernel.inputs then kernel.outputs; runs the outer
// linear indices [begin, end).
using KernelFn = void (*)(int64_t begin, int64_t end, char* const* bufs);

// Generates, optimises (O2, host CPU) and links every kernel; kernels are
// compiled on parallel threads, and each object is looked up in / written to
// the on-disk cache first. Bumps counters().kernels per kernel and
// counters().cache_hits per kernel loaded from disk. Throws tl::Error naming
// the kernel, LLVM's message and where its IR was written.
std::vector<KernelFn> compile_kernels(const std::vector<const ir::Kernel*>& kernels);

// Folder for `.ll` dumps, "" for none; overrides the trace/debug_dir settings
// (kernel_dump_dir in core/flags.h).
void set_dump_dir(const std::string& dir);
// Folder for cached objects; overrides the cache_dir setting ("" turns the
// disk cache off).
void set_cache_dir(const std::string& dir);
std::string cache_dir();
// Tests only: forgets which kernels are linked, so the next compile of the
// same kernel goes to the disk cache (objects are linked into a fresh
// JITDylib per batch, so the old definitions do not clash).
void forget_linked_kernels();

}  // namespace tl::runtime::cpu
