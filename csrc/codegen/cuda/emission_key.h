#pragma once
// What emit_cuda_kernel's result depends on besides the kernel's name, computed without
// emitting: the runtime (runtime/cuda/compile.cpp) finds a kernel it already emitted and loaded
// from the lowered kernel alone. A model repeats its blocks (GPT-2's 6 layers lower to 26
// kernels of 5 distinct codes), and every compile for a new sequence length lowers them again:
// emitting and hashing each text (~17 KB) cost ~0.4 ms a kernel on the CPU that drives the GPU.
#include <string>

#include "codegen/cuda/cuda_kernel.h"
#include "ir/loop_ir.h"

namespace tl::codegen::cuda {

// Two kernels with equal keys get the same CudaKernel from emit_cuda_kernel, up to the kernel's
// own name in its text and entry names: the key holds every field of `k` but its name (the
// exprs with their constants' bits, the views' types, strides and offsets, the shape, the
// reduction axes, the flags, static axes and static constants) and every field of `t`.
// NOTE: the numbers are all in the key, exactly: the CUDA text takes many decisions from
// sizes (index width, vector entries from alignment, row strategy from the row count and
// length, literals in gathers and coordinates), so a key that left some size out would have to
// list every such decision and follow every schedule change. Sharing comes from repeated
// blocks, and from sizes seen before.
std::string emission_key(const ir::Kernel& k, const Target& t);

// `spec` (emitted as `from`) as emit_cuda_kernel writes it for a kernel of the same key named
// `to`: its entry names renamed; the source is left empty (the caller reuses loaded code).
CudaKernel renamed_launch(const CudaKernel& spec, const std::string& from, const std::string& to);

}  // namespace tl::codegen::cuda
