#pragma once
// Entry point of graph capture: run a frame's code symbolically from its
// entry state and return the graph, its guards, and how to rebuild the
// frame's result — or the reason it cannot be captured (a graph break).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "guards/guard_set.h"
#include "ir/frame_view.h"
#include "ir/graph.h"
#include "ir/residual.h"

namespace tl::capture {

struct BreakInfo {
  std::string kind;    // stable snake_case kind (docs/graph_breaks.md)
  std::string reason;  // what happened, in the user's terms
  std::string filename;
  int lineno = -1;
};

struct CaptureResult {
  std::shared_ptr<ir::Graph> graph;
  guards::GuardSet guards;
  ir::Residual result;                    // the frame's return value
  std::vector<ir::SideEffect> side_effects;  // replayed after the graph, in order
  std::vector<PyRef> example_inputs;      // real tensors, one per placeholder
  std::optional<BreakInfo> graph_break;   // set: nothing captured, run eagerly
  double capture_ms = 0;
};

// `code` and `func` are borrowed. Throws tl::Error only for internal errors;
// everything the interpreter cannot handle is reported as a graph break.
CaptureResult capture_frame(PyCodeObject* code, PyObject* func, const ir::FrameView& frame);

}  // namespace tl::capture
