// co_stacksize comes from every path, handlers included; code whose paths
// disagree on the depth, underflow or run off the end is rejected.
#include <catch2/catch.hpp>

#include "bytecode/assembler.h"
#include "py_module.h"

using tl::testing::ins;
using tl::testing::PyModule;
namespace bc = tl::bytecode;

namespace {

#if PY_VERSION_HEX >= 0x030C0000
constexpr int kPopJumpIfFalse = POP_JUMP_IF_FALSE;
#else
constexpr int kPopJumpIfFalse = POP_JUMP_FORWARD_IF_FALSE;
#endif

// Depth of an assembly given with instruction-index targets and blocks.
int depth(const std::vector<bc::Instr>& insts, const std::vector<bc::IndexBlock>& blocks = {}) {
  std::vector<int> targets;
  for (const bc::Instr& in : insts) targets.push_back(in.target);
  bc::Layout lay = bc::layout(insts, targets);
  return bc::stack_depth(insts, targets, blocks, lay);
}

}  // namespace

TEST_CASE("the deepest path sets the stack depth, not the last one", "[bytecode]") {
  // (x, x, x) if x else x: the jump skips the deep branch.
  CHECK(depth({ins(RESUME), ins(LOAD_FAST, 0), ins(kPopJumpIfFalse, 0, -1, 8), ins(LOAD_FAST, 0),
               ins(LOAD_FAST, 0), ins(LOAD_FAST, 0), ins(BUILD_TUPLE, 3), ins(RETURN_VALUE),
               ins(LOAD_FAST, 0), ins(RETURN_VALUE)}) == 3);
}

TEST_CASE("a handler's depth includes lasti and the exception", "[bytecode]") {
  std::vector<bc::Instr> insts = {ins(RESUME),       ins(LOAD_FAST, 0), ins(LOAD_FAST, 0),
                                  ins(RETURN_VALUE), ins(POP_TOP),      ins(POP_TOP),
                                  ins(RERAISE, 0)};
  // Entered with depth 2 kept, lasti and the exception: 4 > 2 on the normal path.
  CHECK(depth(insts, {{1, 3, 4, 2, true}}) == 4);
  CHECK(depth(insts, {{1, 3, 4, 2, false}}) == 3);
  CHECK(depth(insts) == 2);  // the handler is unreachable without its block
}

TEST_CASE("the sent value of a generator's prologue is counted", "[bytecode]") {
  // RETURN_GENERATOR, POP_TOP: CPython's stack effect says 0 then -1.
  CHECK(depth({ins(RETURN_GENERATOR), ins(POP_TOP), ins(RESUME), ins(LOAD_CONST, 0),
               ins(RETURN_VALUE)}) == 1);
}

TEST_CASE("code reaching one instruction with two depths is rejected", "[bytecode]") {
  std::vector<bc::Instr> insts = {
      ins(RESUME),        ins(LOAD_FAST, 0),  ins(kPopJumpIfFalse, 0, -1, 4),
      ins(LOAD_CONST, 0), ins(LOAD_CONST, 0), ins(RETURN_VALUE)};
  REQUIRE_THROWS_WITH(depth(insts), Catch::Contains("reached with stack depths"));
}

TEST_CASE("a stack underflow is rejected", "[bytecode]") {
  REQUIRE_THROWS_WITH(depth({ins(RESUME), ins(POP_TOP), ins(RETURN_VALUE)}),
                      Catch::Contains("stack underflow"));
}

TEST_CASE("code that runs past its last instruction is rejected", "[bytecode]") {
  REQUIRE_THROWS_WITH(depth({ins(RESUME), ins(NOP)}),
                      Catch::Contains("runs past the last instruction"));
}
