// The locations table gives CPython the line of every code unit: long runs are
// split into 8-unit entries, deltas may be negative or large, and units with
// no line read back as none.
#include <catch2/catch.hpp>
#include <string>

#include "bytecode/assembler.h"
#include "py_module.h"

using tl::PyRef;
using tl::testing::function_spec;
using tl::testing::ins;
using tl::testing::make_function;
namespace bc = tl::bytecode;

namespace {

bc::Instr at_line(bc::Instr in, int line) {
  in.line = line;
  return in;
}

std::string encode(const std::vector<bc::Instr>& insts, int firstlineno) {
  bc::Layout lay = bc::layout(insts, std::vector<int>(insts.size(), -1));
  return bc::encode_line_table(insts, lay, firstlineno);
}

}  // namespace

TEST_CASE("short runs encode as one no-column entry each", "[bytecode]") {
  std::string t = encode({at_line(ins(RESUME), 10), at_line(ins(LOAD_CONST, 0), 11),
                          at_line(ins(RETURN_VALUE), bc::kNoLine)},
                         10);
  // 1|13|len-1 then the signed delta (v<<1); 1|15|len-1 has no payload.
  const unsigned char want[] = {0x80 | 13 << 3, 0, 0x80 | 13 << 3, 2, 0x80 | 15 << 3};
  CHECK(t == std::string(reinterpret_cast<const char*>(want), sizeof want));
}

TEST_CASE("a run longer than 8 code units is split with zero deltas", "[bytecode]") {
  std::vector<bc::Instr> insts(11, at_line(ins(NOP), 4));
  std::string t = encode(insts, 3);
  const unsigned char want[] = {0x80 | 13 << 3 | 7, 2, 0x80 | 13 << 3 | 2, 0};
  CHECK(t == std::string(reinterpret_cast<const char*>(want), sizeof want));
}

TEST_CASE("negative deltas set the low bit and large ones take more groups", "[bytecode]") {
  std::string t =
      encode({at_line(ins(NOP), 5), at_line(ins(NOP), 3), at_line(ins(NOP), 3 + 200)}, 5);
  // -2 -> (2<<1)|1 = 5; +200 -> 400 = 6*64 + 16: low group first, 0x40 = more.
  const unsigned char want[] = {0x80 | 13 << 3, 0, 0x80 | 13 << 3, 5, 0x80 | 13 << 3, 0x40 | 16, 6};
  CHECK(t == std::string(reinterpret_cast<const char*>(want), sizeof want));
}

TEST_CASE("CPython reads back the line of every code unit of an assembled function", "[bytecode]") {
  std::vector<bc::Instr> insts = {at_line(ins(RESUME), 1), at_line(ins(LOAD_FAST, 0), 200)};
  for (int i = 0; i < 12; ++i) insts.push_back(at_line(ins(NOP), 200));
  insts.push_back(at_line(ins(NOP), bc::kNoLine));
  insts.push_back(at_line(ins(LOAD_FAST, 0), 3));
  insts.push_back(at_line(ins(BINARY_OP, NB_ADD), 3));  // the CACHE unit shares the line
  insts.push_back(at_line(ins(RETURN_VALUE), 70000));   // a delta of three groups
  bc::Assembly a;
  a.insts = insts;
  PyRef code = bc::assemble(a, function_spec(1, {"x"}, PyRef::steal(PyTuple_New(0))));
  auto* co = reinterpret_cast<PyCodeObject*>(code.get());
  bc::Layout lay = bc::layout(insts, std::vector<int>(insts.size(), -1));
  for (size_t i = 0; i < insts.size(); ++i) {
    for (int u = 0; u < lay.units[i]; ++u) {
      INFO("instruction " << i << " unit " << u);
      CHECK(PyCode_Addr2Line(co, lay.offsets[i] + 2 * u) == insts[i].line);
    }
  }
  PyRef fn = make_function(code.get());
  PyRef r = PyRef::steal(PyObject_CallFunction(fn.get(), "i", 21));
  REQUIRE(r);
  CHECK(PyLong_AsLong(r.get()) == 42);
}
