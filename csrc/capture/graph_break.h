#pragma once
// A graph break: thrown by the interpreter at the first thing it cannot
// capture, caught once in capture_frame. Kinds are stable snake_case names
// listed in docs/graph_breaks.md.
#include <exception>
#include <string>
#include <vector>

#include "core/py_ref.h"

namespace tl::capture {

class GraphBreak : public std::exception {
 public:
  GraphBreak(std::string kind, std::string reason, std::string hint = "")
      : kind_(std::move(kind)), reason_(std::move(reason)), hint_(std::move(hint)) {}
  const char* what() const noexcept override { return reason_.c_str(); }
  const std::string& kind() const { return kind_; }
  const std::string& reason() const { return reason_; }
  // What the user can change so the code is captured (empty: the kind's hint in the docs).
  const std::string& hint() const { return hint_; }
  // Index of the top-level frame's instruction that was executing (an inlined
  // call breaks its caller at the CALL); set once by the depth-0 tracer.
  int top_index = -1;
  // The frames the break left, innermost first (one per running tracer): the instruction each
  // was at (an inlined call's CALL in its caller), and whether the frame can be resumed as a
  // level of its own (capture.h, ResumePlan::nested): it was entered by that CALL directly,
  // with nothing the trace adds to its result, and holds no cells of its own.
  struct Level {
    PyRef code;
    PyRef globals;
    PyRef closure;  // the function's closure (free variables), or null
    int index = -1;
    bool nestable = false;
  };
  std::vector<Level> levels;

 private:
  std::string kind_;
  std::string reason_;
  std::string hint_;
};

[[noreturn]] inline void graph_break(const std::string& kind, const std::string& reason,
                                     const std::string& hint = "") {
  throw GraphBreak(kind, reason, hint);
}

}  // namespace tl::capture
