#pragma once
// A loop whose body runs as a function of its own (docs/graph_breaks.md,
// "Breaks inside loops"): at a break inside a loop the bridge still runs the
// loop in CPython, but each iteration calls a *loop-body function*, which the
// hook captures like a resume function. A break inside it is then an
// ordinary break of that function; its torch ops run compiled.
//
// The body function is the loop's instructions with a prologue (parameters:
// the locals bound at the loop head, the stack below the loop, a placeholder
// for the loop's iterator, the item) and stubs where control leaves the body:
//   - a jump to the loop head:          (kContinue, None, *locals)
//   - `return v`:                        (kReturn, v, *locals)
//   - a jump out of the loop (exit k):   (kFirstExit + k, None, *locals)
// `locals` are the head's bound locals, then those the body may assign (a
// sentinel where it did not): the bridge stores them back, so a local keeps
// its value unless this iteration assigned it, as in eager. Internal to
// bytecode/.
#include <Python.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bytecode/assembler.h"
#include "bytecode/resume.h"
#include "core/py_ref.h"

namespace tl::bytecode {

class Rewriter;

constexpr int kContinue = 0;
constexpr int kReturn = 1;
constexpr int kFirstExit = 2;

// Constants generated code uses, appended to co_consts from `base` on.
struct LoopConsts {
  int base = 0;
  int n_status = 0;                      // kFirstExit + number of exits
  int int_type() const { return base; }  // NOTE: the bridge's NULL-dropping int() stays first
  int none() const { return base + 1; }
  int unbound() const { return base + 2; }
  int status(int s) const { return base + 3 + s; }
  // Borrowed references (ints are immortal small ints; the sentinel lives forever).
  std::vector<PyObject*> objects() const;
};

struct LoopBody {
  int head = -1;   // the loop head: FOR_ITER, or the target of a while loop's back jump
  int entry = -1;  // first body instruction: after a for loop's item (stored or not), else head
  bool is_for = false;
  bool item_stored = false;   // the bridge stores a for loop's item in its target locals (params)
  std::string outer;          // Slot chars of the stack below the loop's iterator
  std::vector<int> params;    // original slots of the locals bound at the head, ascending
  std::vector<int> assigned;  // original slots the body may assign, not in params, ascending
  std::vector<int> targets;   // params the bridge binds itself (a stored item), ascending
  struct Exit {
    int target;  // original instruction control goes on at, in the bridge
    int depth;   // stack depth there (a prefix of `outer`)
  };
  std::vector<Exit> exits;  // status kFirstExit + k
  bool returns = false;     // the body has a `return`
  bool guarded = false;     // an exception handler (a with-block) covers the loop
  PyRef code;               // the body function's code
  int line = -1;            // the loop's line
  std::vector<std::pair<int, bool>> grad_exits;  // as resume_grad_exits()
};

// What a body function hands back for a local it did not assign (borrowed;
// lives for the process).
PyObject* unbound_local();

// The body function of the loop headed at `site.index`, or nullopt when no
// backward jump targets it (a try block). Throws CannotResume when the loop
// cannot be outlined (the bridge then runs the whole loop in CPython).
std::optional<LoopBody> outline_loop(const BreakSite& site);

// Puts the call of the body function (in local `body_slot` of the bridge)
// before the body's first instruction in `insts`, the bridge's instructions
// from `rw` (already renumbered, with locals fresh("status"/"ret"/"item")).
// `site_stack` is the stack at the loop head. With `exit_labels` (one per
// exit, then one for a for loop's end), each exit jumps there with the stack
// below the loop, and the loop's FOR_ITER ends there.
void insert_loop_call(std::vector<Instr>& insts, const LoopBody& loop, const Rewriter& rw,
                      int body_slot, const LoopConsts& consts, const std::string& site_stack,
                      const std::vector<int>& exit_labels);

}  // namespace tl::bytecode
