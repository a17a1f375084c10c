#pragma once
// SHA-256 and HMAC-SHA-256: the one hash of torchlite's kernel keys and disk
// cache (CPU objects and CUDA images). Own implementation: the GPU build may
// have no LLVM, and torchlite links no crypto library.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tl {

using Digest = std::array<unsigned char, 32>;

// Incremental SHA-256 (FIPS 180-4): update() any number of times, then final() once.
class Sha256 {
 public:
  Sha256();
  Sha256& update(std::string_view data);
  Digest final();

 private:
  std::array<uint32_t, 8> h_;
  unsigned char block_[64];
  size_t fill_ = 0;
  uint64_t length_ = 0;
};

Digest sha256(std::string_view data);
// Lower-case hex digest (64 characters) of `data`.
std::string sha256_hex(std::string_view data);
std::string to_hex(const Digest& d);

// HMAC-SHA-256 (RFC 2104) of the concatenation of `parts` under `key`.
Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);
// Compares in time independent of where the digests differ.
bool digests_equal(const unsigned char* a, const unsigned char* b, size_t n);

}  // namespace tl
