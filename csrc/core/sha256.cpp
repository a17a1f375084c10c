#include "core/sha256.h"

#include <algorithm>
#include <cstring>

namespace tl {

namespace {
constexpr std::array<uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void compress(std::array<uint32_t, 8>& h, const unsigned char* block) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = uint32_t(block[4 * i]) << 24 | uint32_t(block[4 * i + 1]) << 16 |
           uint32_t(block[4 * i + 2]) << 8 | uint32_t(block[4 * i + 3]);
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t t1 = k + s1 + ((e & f) ^ (~e & g)) + kRound[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  uint32_t add[8] = {a, b, c, d, e, f, g, k};
  for (int i = 0; i < 8; ++i) h[i] += add[i];
}
}  // namespace

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
         0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

Sha256& Sha256::update(std::string_view data) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size();
  length_ += n;
  if (fill_) {
    size_t take = std::min(n, 64 - fill_);
    std::memcpy(block_ + fill_, p, take);
    fill_ += take, p += take, n -= take;
    if (fill_ < 64) return *this;
    compress(h_, block_);
    fill_ = 0;
  }
  for (; n >= 64; p += 64, n -= 64) compress(h_, p);
  std::memcpy(block_, p, n);
  fill_ = n;
  return *this;
}

Digest Sha256::final() {
  // Padding: 0x80, zeros, then the bit length big-endian, in one or two blocks.
  uint64_t bits = length_ * 8;
  unsigned char pad[72] = {0x80};
  size_t zeros = (fill_ < 56 ? 56 : 120) - fill_;
  for (int i = 0; i < 8; ++i) pad[zeros + i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
  update(std::string_view(reinterpret_cast<const char*>(pad), zeros + 8));
  Digest out;
  for (int i = 0; i < 8; ++i)
    for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<unsigned char>(h_[i] >> (24 - 8 * b));
  return out;
}

Digest sha256(std::string_view data) { return Sha256().update(data).final(); }

std::string to_hex(const Digest& d) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : d) out += hex[c >> 4], out += hex[c & 0xf];
  return out;
}

std::string sha256_hex(std::string_view data) { return to_hex(sha256(data)); }

Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  unsigned char k[64] = {};
  if (key.size() > 64) {
    Digest kd = sha256(key);
    std::memcpy(k, kd.data(), kd.size());
  } else {
    std::memcpy(k, key.data(), key.size());
  }
  char ipad[64], opad[64];
  for (int i = 0; i < 64; ++i)
    ipad[i] = static_cast<char>(k[i] ^ 0x36), opad[i] = static_cast<char>(k[i] ^ 0x5c);
  Sha256 inner;
  inner.update({ipad, 64});
  for (std::string_view p : parts) inner.update(p);
  Digest id = inner.final();
  return Sha256()
      .update({opad, 64})
      .update({reinterpret_cast<const char*>(id.data()), id.size()})
      .final();
}

bool digests_equal(const unsigned char* a, const unsigned char* b, size_t n) {
  unsigned char diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace tl
