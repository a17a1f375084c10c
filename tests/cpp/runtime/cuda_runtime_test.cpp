// The CUDA runtime pieces that need no GPU: the driver loader's failure
// message (the CUBIN cache is runtime/disk_cache_test.cpp). Launch paths are covered
// by tests/python/cuda on a GPU machine.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "runtime/cuda/compile.h"
#include "runtime/cuda/driver.h"

namespace cu = tl::runtime::cuda;

TEST_CASE("without a driver, compiling CUDA kernels throws the loader's message", "[cuda]") {
  std::string why;
  if (cu::driver_available(&why)) {
    SUCCEED("a CUDA driver is installed here");
    return;
  }
  CHECK(why.find("libcuda.so.1") != std::string::npos);
  tl::codegen::cuda::CudaKernel k;
  k.name = "noop";
  k.source = "extern \"C\" __global__ void noop() {}";
  try {
    cu::load_kernels({k}, 0);
    FAIL("load_kernels did not throw");
  } catch (const tl::Error& e) {
    CHECK(e.kind() == tl::ErrorKind::Unsupported);
    CHECK(std::string(e.what()).find("libcuda.so.1") != std::string::npos);
  }
}
