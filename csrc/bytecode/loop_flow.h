#pragma once
// Analysis of a loop for its body function (loop_body.h): which instructions
// form the body, where control leaves it, which locals it may assign. Internal
// to bytecode/.
#include <Python.h>
#include <opcode.h>

#include <vector>

#include "bytecode/assembler.h"
#include "bytecode/decode.h"
#include "bytecode/loop_body.h"

namespace tl::bytecode {

inline bool is_return(int opcode) {
#ifdef RETURN_CONST
  if (opcode == RETURN_CONST) return true;
#endif
  return opcode == RETURN_VALUE;
}

struct LoopShape {
  std::vector<int> depth;     // stack depth before each original instruction (-1: unreachable)
  std::vector<bool> member;   // the instruction is part of the body function
  std::vector<int> exits;     // where control leaves the body for the bridge, in a fixed order
  std::vector<int> assigned;  // locals the body may assign (original slots, ascending)
  int outer_handler = -1;     // the handler around the bridge's call, or -1
};

// The body of the loop `loop` describes (head, entry, is_for, outer, params
// set), whose last backward jump to the head is instruction `last`. Throws
// CannotResume when the body cannot run as a function.
LoopShape analyze_loop(const Bytecode& bc, const LoopBody& loop, int last, int nlocals);

}  // namespace tl::bytecode
