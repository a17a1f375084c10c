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
  std::string hint;  // what the user can change (empty: the kind's hint in the docs)
};

// One value handed to CPython at a graph break.
struct ResumeValue {
  ir::Residual value;
  std::string attr;  // non-empty: getattr(value, attr) (a method looked up for a call)
  PyRef func;        // set: func bound to value (a Python method looked up for a call)
};

// How CPython takes over a frame after its partial graph (see
// bytecode/resume.h for the code that runs it).
struct ResumePlan {
  int index = -1;       // decoded instruction where CPython takes over
  bool region = false;  // `index` heads a loop/try block: CPython runs the rest of the frame
  std::string stack;    // bytecode::Slot chars, bottom first
  std::vector<ResumeValue> stack_values;  // one per slot that is not Null (Iter: its iterable)
  std::vector<int> local_slots;           // bound plain locals, ascending
  std::vector<ResumeValue> locals;        // one per local_slots entry
  bool grad_mode = true;                  // grad mode at the break, inside every with-block
  // The frame's cell variables: the first `frame_cells` cells of CaptureResult::closures, passed
  // on as the first cells of the bridge's closure.
  int frame_cells = 0;

  // A break inside inlined calls: one level per frame below this one, outermost first. The
  // graph ran every level's code up to the break; then each level's bridge calls the next
  // one's where its call was (bytecode::call_through_bridge), the innermost one's runs the
  // breaking instruction (at its `index`) and its resume function, and each level above goes
  // on after its call in a resume function of its own. This plan's own `index` is then its
  // CALL, and `stack` what lies below it.
  struct Level {
    PyRef code;     // PyCodeObject
    PyRef globals;  // the function's globals and closure (null: none)
    PyRef closure;
    int index = -1;  // CALL of the next level; the breaking instruction at the innermost
    std::string stack;
    std::vector<ResumeValue> stack_values;
    std::vector<int> local_slots;
    std::vector<ResumeValue> locals;
  };
  std::vector<Level> nested;
};

struct CaptureResult {
  std::shared_ptr<ir::Graph> graph;
  guards::GuardSet guards;
  ir::Residual result;                       // the frame's return value (no graph break)
  std::vector<ir::SideEffect> side_effects;  // replayed after the graph, in order
  ir::MadeClosures closures;                 // cells and functions the residuals above name
  std::vector<PyRef> example_inputs;         // real tensors, one per placeholder
  // Set: the trace stopped at a graph break. With `resume` also set, `graph`
  // and `side_effects` are what ran before it and `resume` says how CPython
  // goes on; without it nothing was captured and the frame runs eagerly
  // (`no_resume` says why).
  std::optional<BreakInfo> graph_break;
  std::optional<ResumePlan> resume;
  std::string no_resume;
  double capture_ms = 0;
  bool reads_sizes = false;  // CaptureContext::reads_sizes
  std::string reads_sizes_why;
  // CaptureContext::sym_table / sym_relations: the symbols the graph's size arguments are
  // written in, and the relations the trace relied on.
  std::vector<std::pair<ir::Node*, int>> sym_table;
  std::vector<ir::SymRelation> sym_relations;
};

// `code` and `func` are borrowed. Throws tl::Error only for internal errors;
// everything the interpreter cannot handle is reported as a graph break.
// `structural_modules`: the frame's nn.Module inputs are guarded by type and by
// each attribute the trace reads, not by identity (the frame is called with new
// modules each time, so identity guards would recompile on every call).
CaptureResult capture_frame(PyCodeObject* code, PyObject* func, const ir::FrameView& frame,
                            bool structural_modules = false);

}  // namespace tl::capture
