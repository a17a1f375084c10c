// Emission keys (codegen/cpu/emission_key.h): kernels that differ only in numbers the emitter
// reads from the dims array share a key, and the JIT then reuses the linked code without
// emitting, with the dims emitting would give.
#include <catch2/catch.hpp>

#include "kernel_builder.h"

#ifdef TORCHLITE_HAVE_LLVM
#include "codegen/cpu/emission_key.h"
#include "runtime/cpu/jit.h"
#include "runtime/disk_cache.h"

using namespace tl::test;

namespace {

// rows of a [rows, cols] tensor read with row stride `ld`, scaled by their max.
KernelBuilder scaled_rows(int64_t rows, int64_t cols, int64_t ld, bool runtime = true) {
  KernelBuilder b("scaled", {rows, cols}, 1);
  b.k.runtime_sizes = runtime;
  int x = b.load(b.input(ST::F32, {ld, 1}), ST::F32);
  int mx = b.expr(ExprOp::ReduceMax, ST::F32, {x});
  b.output(b.expr(ExprOp::Div, ST::F32, {x, mx}), ST::F32, {cols, 1});
  return b;
}

std::string key_of(const tl::ir::Kernel& k) {
  return tl::codegen::cpu::emission_key(k, tl::codegen::cpu::cpu_loop_space(k));
}

}  // namespace

TEST_CASE("kernels that differ only in runtime numbers share an emission key", "[codegen]") {
  KernelBuilder a = scaled_rows(37, 129, 130), b = scaled_rows(5, 1000, 1003);
  CHECK(key_of(a.k) == key_of(b.k));
  // Sizes and strides of 0 and 1 are constants in the code.
  CHECK(key_of(a.k) != key_of(scaled_rows(1, 129, 130).k));
  CHECK(key_of(a.k) != key_of(scaled_rows(37, 129, 0).k));  // a broadcast row: stride 0
  // Without runtime sizes every number is in the code.
  CHECK(key_of(scaled_rows(37, 129, 130, false).k) != key_of(scaled_rows(5, 1000, 1003, false).k));
}

TEST_CASE("a kernel found by its emission key is not emitted and gets its own dims", "[codegen]") {
  namespace rc = tl::runtime::cpu;
  tl::runtime::set_cache_dir("");
  KernelBuilder a = scaled_rows(41, 67, 70), b = scaled_rows(9, 300, 301);
  rc::CompiledKernels ca = rc::compile_kernels({&a.k});
  int64_t emits = rc::kernel_emits();
  rc::CompiledKernels cb = rc::compile_kernels({&b.k});
  CHECK(rc::kernel_emits() == emits);
  CHECK(cb.fns[0] == ca.fns[0]);
  // Emitted again (nothing linked is known): the same dims.
  rc::forget_linked_kernels();
  rc::CompiledKernels fresh = rc::compile_kernels({&b.k});
  CHECK(rc::kernel_emits() == emits + 1);
  CHECK(cb.dims[0] == fresh.dims[0]);
  CHECK(cb.dims[0] != ca.dims[0]);
}
#endif
