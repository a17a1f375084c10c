#pragma once
// Code objects that let CPython take over a frame at a graph break
// (docs/graph_breaks.md, "How a frame continues after a break"):
//
//  - the *bridge* runs in place of the original frame once the partial graph
//    ran: it pushes the value stack the graph left, runs the breaking
//    instruction natively, then calls a resume function with the new stack
//    and the bound locals and returns its result. The hook never captures it.
//  - a *resume function* is the original code entered at an instruction after
//    the break, taking that stack and the locals as positional arguments; the
//    hook captures it like any other frame.
//
// Both are the original instruction list with a prologue (and, for the
// bridge, call stubs at the end), so exception tables, line numbers, the file
// name and the function name stay the user's. They are built once per break
// site and kept for the life of the process.
#include <Python.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/py_ref.h"

namespace tl::bytecode {

// One value-stack slot at the break, bottom first (chars of BreakSite::stack).
enum class Slot : char {
  Null = 'N',       // a NULL below a callable: recreated with PUSH_NULL
  Value = 'V',      // any object, passed as an argument
  Iter = 'I',       // an iterator: the caller passes a tuple of the items left
  ExitTrue = 'T',   // __exit__ of a grad-mode with-block that restores grad mode True
  ExitFalse = 'F',  // ... that restores False
};

struct BreakSite {
  PyCodeObject* code = nullptr;  // the original code (borrowed)
  int index = -1;                // decoded instruction where CPython takes over
  // `index` heads a loop or try block the trace could not get through: the
  // bridge runs the rest of the frame natively (a loop's body and the code
  // after the loop as functions of their own, loop_body.h).
  bool region = false;
  std::string stack;        // Slot chars, bottom first
  std::vector<int> locals;  // localsplus slots of the bound locals passed on, ascending
};

struct BridgeCode {
  // Arguments: the passed locals, then the non-Null stack slots (bottom
  // first). The bridge makes the functions of `resumes` itself (with its
  // globals and closure), so no generated name is bound at the break.
  PyRef bridge;
  std::vector<PyRef> resumes;
  std::vector<int> resume_lines;  // line each resume function starts at
  // Region mode at a loop head: the only entry of `resumes` is the loop's
  // body function (loop_body.h), which the bridge calls once per iteration.
  bool loop_body = false;
  std::string no_loop_body;  // region mode at a loop whose body stays in the bridge: why
};

// A break site the bridge cannot continue from (the frame then runs eagerly).
class CannotResume : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The (cached) bridge for a break site. Throws CannotResume, tl::Error or
// PythonError. The reference stays valid for the life of the process.
const BridgeCode& bridge_for(const BreakSite& site);

// The bridge of a frame that stopped inside its call at `call_index` (a CALL or
// CALL_FUNCTION_EX; a break inside the inlined callee) with `below` under the call's operands:
// it takes the passed `locals`, the non-Null slots of `below`, then a callable that stands for
// the call (the callee's own bridge, bound to its arguments). It calls that where the call was
// (so the callee's frames have this frame as their caller, at the call's line), then goes on
// after the call in a resume function with the result. Cached; throws CannotResume.
const BridgeCode& call_through_bridge(PyCodeObject* code, int call_index, const std::string& below,
                                      const std::vector<int>& locals);

// True for a bridge code object (borrowed).
bool is_bridge(PyCodeObject* code);
// The user's code a generated code object (bridge, resume function, loop
// body; a resume function of a resume function) was made from, following the
// chain to its end; `code` itself for any other code. Borrowed.
PyCodeObject* user_code_of(PyCodeObject* code);
// For a resume function's code (borrowed): its parameters that are grad-mode
// __exit__ callables, as (localsplus slot, grad mode they restore); nullptr
// for any other code.
const std::vector<std::pair<int, bool>>* resume_grad_exits(PyCodeObject* code);

}  // namespace tl::bytecode
