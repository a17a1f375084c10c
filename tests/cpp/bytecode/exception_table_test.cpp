// Nested blocks flatten into sorted, disjoint entries, neighbours with one
// handler merge, and large offsets use multi-group varints.
#include <catch2/catch.hpp>
#include <sstream>
#include <string>

#include "bytecode/assembler.h"
#include "py_module.h"

using tl::testing::ins;
namespace bc = tl::bytecode;

namespace {

// The entries of a table as "start+length->target depth [lasti]", in code
// units; read independently of the encoder (most significant group first).
std::string parse(const std::string& table) {
  std::ostringstream os;
  size_t i = 0;
  auto varint = [&] {
    auto b = static_cast<unsigned char>(table[i++]);
    int v = b & 63;
    while (b & 64) {
      b = static_cast<unsigned char>(table[i++]);
      v = (v << 6) | (b & 63);
    }
    return v;
  };
  while (i < table.size()) {
    CHECK((static_cast<unsigned char>(table[i]) & 0x80) != 0);  // entry start mark
    int start = varint(), length = varint(), target = varint(), dl = varint();
    os << start << "+" << length << "->" << target << " " << (dl >> 1) << (dl & 1 ? " lasti" : "")
       << ";";
  }
  return os.str();
}

// A table over n NOPs (one code unit each, so indices are offsets).
std::string table_over_nops(int n, const std::vector<bc::IndexBlock>& blocks) {
  std::vector<bc::Instr> insts(n, ins(NOP));
  bc::Layout lay = bc::layout(insts, std::vector<int>(n, -1));
  return parse(bc::encode_exception_table(blocks, lay));
}

}  // namespace

TEST_CASE("a nested block splits its enclosing block's entry in three", "[bytecode]") {
  CHECK(table_over_nops(12, {{0, 9, 11, 0, false}, {3, 5, 10, 1, true}}) ==
        "0+3->11 0;3+3->10 1 lasti;6+4->11 0;");
}

TEST_CASE("block order does not decide nesting: the inner block wins", "[bytecode]") {
  CHECK(table_over_nops(12, {{3, 5, 10, 1, true}, {0, 9, 11, 0, false}}) ==
        "0+3->11 0;3+3->10 1 lasti;6+4->11 0;");
}

TEST_CASE("neighbouring blocks with one handler become one entry", "[bytecode]") {
  CHECK(table_over_nops(8, {{0, 2, 7, 0, false}, {3, 4, 7, 0, false}}) == "0+5->7 0;");
  // A different depth is a different handler state: two entries.
  CHECK(table_over_nops(8, {{0, 2, 7, 0, false}, {3, 4, 7, 1, false}}) == "0+3->7 0;3+2->7 1;");
}

TEST_CASE("uncovered instructions leave gaps between entries", "[bytecode]") {
  CHECK(table_over_nops(8, {{4, 5, 7, 0, false}, {0, 1, 7, 0, false}}) == "0+2->7 0;4+2->7 0;");
}

TEST_CASE("offsets past 63 and 4095 code units take two and three varint groups", "[bytecode]") {
  std::vector<bc::Instr> insts(5000, ins(NOP));
  bc::Layout lay = bc::layout(insts, std::vector<int>(5000, -1));
  std::string table = bc::encode_exception_table({{4100, 4199, 70, 2, true}}, lay);
  // 4100 = 1*4096 + 0*64 + 4; 100 = 1*64 + 36; 70 = 1*64 + 6; 2<<1|1 = 5.
  const unsigned char want[] = {0x80 | 0x40 | 1, 0x40 | 0, 4, 0x40 | 1, 36, 0x40 | 1, 6, 5};
  CHECK(table == std::string(reinterpret_cast<const char*>(want), sizeof want));
  CHECK(parse(table) == "4100+100->70 2 lasti;");
}

TEST_CASE("ranges cover EXTENDED_ARG prefixes and CACHE units", "[bytecode]") {
  // LOAD_CONST 300 takes a prefix; BINARY_OP one CACHE unit.
  std::vector<bc::Instr> insts = {ins(NOP), ins(LOAD_CONST, 300), ins(BINARY_OP, NB_ADD), ins(NOP)};
  bc::Layout lay = bc::layout(insts, std::vector<int>(4, -1));
  CHECK(parse(bc::encode_exception_table({{1, 2, 3, 0, false}}, lay)) == "1+4->5 0;");
}

TEST_CASE("partially overlapping blocks are rejected", "[bytecode]") {
  std::vector<bc::Instr> insts(8, ins(NOP));
  bc::Layout lay = bc::layout(insts, std::vector<int>(8, -1));
  REQUIRE_THROWS_WITH(bc::encode_exception_table({{0, 3, 7, 0, false}, {2, 5, 7, 0, false}}, lay),
                      Catch::Contains("overlap without nesting"));
  REQUIRE_THROWS_WITH(bc::encode_exception_table({{0, 9, 7, 0, false}}, lay),
                      Catch::Contains("out of range"));
}
