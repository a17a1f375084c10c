// SHA-256 (FIPS 180-2 vectors) and HMAC-SHA-256 (RFC 4231 vectors): the hash
// of kernel keys and the disk cache's entry authentication.
#include "core/sha256.h"

#include <catch2/catch.hpp>
#include <string>

namespace {
std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i < h.size(); i += 2)
    out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}
std::string hmac_hex(const std::string& key, const std::string& data) {
  return tl::to_hex(tl::hmac_sha256(key, {data}));
}
}  // namespace

TEST_CASE("sha256_hex matches the FIPS 180-2 test vectors", "[core]") {
  CHECK(tl::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(tl::sha256_hex("abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(tl::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(tl::sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("incremental updates in any split give the one-shot digest", "[core]") {
  std::string text;
  for (int i = 0; i < 300; ++i) text += static_cast<char>('a' + i % 26);
  for (size_t split : {0, 1, 55, 56, 63, 64, 65, 128, 299}) {
    tl::Sha256 h;
    h.update(std::string_view(text).substr(0, split)).update(std::string_view(text).substr(split));
    CHECK(tl::to_hex(h.final()) == tl::sha256_hex(text));
  }
}

TEST_CASE("hmac_sha256 matches the RFC 4231 test vectors", "[core]") {
  // Test case 1
  CHECK(hmac_hex(std::string(20, '\x0b'), "Hi There") ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a key shorter than the block
  CHECK(hmac_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3
  CHECK(hmac_hex(std::string(20, '\xaa'), std::string(50, '\xdd')) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 4
  CHECK(hmac_hex(unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"),
                 std::string(50, '\xcd')) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test case 6: a key longer than the block is hashed first
  CHECK(hmac_hex(std::string(131, '\xaa'),
                 "Test Using Larger Than Block-Size Key - Hash Key First") ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // Test case 7
  CHECK(hmac_hex(std::string(131, '\xaa'),
                 "This is a test using a larger than block-size key and a larger than block-size "
                 "data. The key needs to be hashed before being used by the HMAC algorithm.") ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST_CASE("hmac_sha256 of parts equals that of their concatenation", "[core]") {
  CHECK(tl::hmac_sha256("k", {"ab", "", "cd"}) == tl::hmac_sha256("k", {"abcd"}));
  CHECK(tl::hmac_sha256("k", {"abcd"}) != tl::hmac_sha256("K", {"abcd"}));
}

TEST_CASE("digests_equal compares every byte", "[core]") {
  tl::Digest a = tl::sha256("x"), b = a;
  CHECK(tl::digests_equal(a.data(), b.data(), 32));
  b[31] ^= 1;
  CHECK_FALSE(tl::digests_equal(a.data(), b.data(), 32));
}
