#pragma once
// The host CPU as an LLVM target (name and features from
// llvm::sys::getHostCPUName/getHostCPUFeatures), the O2 pipeline, and object
// emission. One TargetMachine per thread: they are not thread-safe.
#include <llvm/ADT/SmallVector.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include <memory>
#include <string>

namespace tl::codegen::cpu {

// Initialises the native target once. Throws tl::Error (Runtime) when LLVM has
// no backend for this host.
std::unique_ptr<llvm::TargetMachine> host_target_machine();
// "x86_64-pc-linux-gnu/skylake-avx512/+avx2,+fma,...": part of every cache key.
const std::string& host_target_id();
// Sets the module's triple and data layout and runs the default<O2> pipeline.
void optimize_module(llvm::Module& m, llvm::TargetMachine& tm);
// Native object code for the module. Throws tl::Error (Runtime) on failure.
llvm::SmallVector<char, 0> emit_object(llvm::Module& m, llvm::TargetMachine& tm);

}  // namespace tl::codegen::cpu
