// The CUDA runtime pieces that need no GPU: cache keys, the CUBIN cache file
// format, and the driver loader's failure message. Launch paths are covered
// by tests/python/cuda on a GPU machine.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "runtime/cuda/compile.h"
#include "runtime/cuda/cubin_cache.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/sha256.h"

namespace cu = tl::runtime::cuda;

TEST_CASE("sha256_hex matches the FIPS 180-2 test vectors", "[cuda]") {
  CHECK(cu::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(cu::sha256_hex("abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(cu::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(cu::sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("cubin cache returns what was stored and ignores corrupt files", "[cuda]") {
  auto dir = (std::filesystem::temp_directory_path() / "tl_cubin_cache_test").string();
  std::filesystem::remove_all(dir);
  std::string image(
      "\x7f"
      "ELF some cubin bytes\0with a NUL",
      31);
  CHECK_FALSE(cu::cubin_load(dir, "k1"));
  cu::cubin_store(dir, "k1", image);
  auto back = cu::cubin_load(dir, "k1");
  REQUIRE(back);
  CHECK(*back == image);

  SECTION("a flipped byte is a miss") {
    std::fstream f(cu::cubin_path(dir, "k1"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3);
    f.put('X');
    f.close();
    CHECK_FALSE(cu::cubin_load(dir, "k1"));
  }
  SECTION("a truncated file is a miss") {
    std::filesystem::resize_file(cu::cubin_path(dir, "k1"), image.size() + 4);
    CHECK_FALSE(cu::cubin_load(dir, "k1"));
  }
  SECTION("an empty cache dir turns the cache off") {
    cu::cubin_store("", "k2", image);
    CHECK_FALSE(cu::cubin_load("", "k2"));
  }
  std::filesystem::remove_all(dir);
}

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
