#pragma once
// Where CPython takes over a frame that broke at a top-level instruction.
#include <string>

#include "bytecode/decode.h"

namespace tl::capture {

struct BreakPoint {
  int index = -1;       // decoded instruction to stop the trace before; -1: no resume
  bool region = false;  // `index` heads a loop or try block that CPython runs whole
};

// A break inside a loop or a try block moves to the head of the outermost
// one (the trace cannot resume in the middle of either: a loop would break
// once per iteration, and a handler needs the block it protects); CPython
// then runs the rest of the frame (a loop's body as a loop-body function,
// bytecode/loop_body.h). A break at a call moves back over its
// PRECALL/KW_NAMES, which the bridge must run again. Sets `why` when there
// is no resume point.
BreakPoint break_point(const bytecode::Bytecode& bc, int index, std::string& why);

}  // namespace tl::capture
