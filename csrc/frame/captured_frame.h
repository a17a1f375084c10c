#pragma once
// A fully captured frame: inputs read by source, graph run by the builtin
// runner or a backend's compiled callable, return value rebuilt, side effects
// replayed. No bytecode runs.
#include <memory>
#include <string>
#include <vector>

#include "frame/compiled_frame.h"
#include "frame/size_generic.h"
#include "guards/fetch.h"
#include "ir/graph.h"
#include "ir/residual.h"
#include "runtime/executable.h"

namespace tl::frame {

class CapturedFrame : public CompiledFrame {
 public:
  // Runs the graph with `executable`: fused kernels, op by op, or a backend's callable.
  CapturedFrame(std::shared_ptr<const ir::Graph> graph, ir::Residual result,
                std::vector<ir::SideEffect> side_effects, ir::MadeClosures closures,
                std::unique_ptr<runtime::Executable> executable, std::string func_name,
                std::string filename);
  PyObject* run(const ir::FrameView& frame, Served* served) override;
  // A size-generic entry (frame/size_generic.h): graphs for other input sizes come from here.
  void set_size_instances(std::shared_ptr<SizeInstances> s) { sizes_ = std::move(s); }
  bool serves(const ir::FrameView& frame, Served* keep) override;
  // The graph's inputs, by source, in placeholder order (GuardSet::bind_inputs).
  const std::vector<ir::SourcePtr>& input_sources() const { return input_sources_; }

  // Thrown by run_graph, with no Python error set, when the graph raised before anything it
  // ran was visible: the frame then runs eagerly instead (CompiledFrame::run returns nullptr
  // with no exception), so the effects eager makes before the failing op happen too.
  struct RunEagerly {};

 protected:
  // The cells and functions of the closures (ir::MadeClosures) for one run, made before any
  // residual names them; every rebuild of the run takes them.
  struct Made {
    std::vector<PyRef> cells, functions;
  };
  Made make_closures(const std::vector<PyRef>& outputs, const ir::FrameView& frame);

  // Reads the inputs (or takes serves()'s) and runs the graph; returns its outputs. Throws
  // PythonError or tl::Error.
  std::vector<PyRef> run_graph(const ir::FrameView& frame, Served* served);
  // The inputs: those the guards handed over in `given` (the ones they fetched this call;
  // null entries, or no `given`, are read here). Null on a missing value when `missing_ok`.
  std::vector<PyRef> fetch_inputs(const ir::FrameView& frame, std::vector<PyRef>* given,
                                  bool missing_ok);
  PyRef rebuild(const ir::Residual& r, const std::vector<PyRef>& outputs,
                const ir::FrameView& frame, const Made& made);
  // Replays the side effects. Call it after every value read from the frame
  // by source has been rebuilt: a source names the object the trace read at
  // the frame's start, which an effect may take out of reach (`args.clear()`
  // before a break that hands `args[0]` on).
  void replay_side_effects(const std::vector<PyRef>& outputs, const ir::FrameView& frame,
                           const Made& made);
  // An Iterator residual in two steps: its arguments rebuilt (with the other values, before
  // the side effects are replayed), then the iterator made and advanced (after them, over the
  // containers as the trace left them). make_iterator reads `args` from `next` on. `locals`:
  // the resume's local arguments (what a ResumeLocal names), else null.
  void iterator_args(const ir::Residual& r, const std::vector<PyRef>& outputs,
                     const ir::FrameView& frame, const Made& made, std::vector<PyRef>& args,
                     const std::vector<PyRef>* locals = nullptr);
  PyRef make_iterator(const ir::Residual& r, const std::vector<PyRef>& args, size_t& next);

 private:
  std::shared_ptr<const ir::Graph> graph_;
  std::vector<ir::SourcePtr> input_sources_;
  std::vector<guards::SourceFetcher> input_fetchers_;  // names interned once
  ir::Residual result_;
  std::vector<ir::SideEffect> side_effects_;
  ir::MadeClosures closures_;
  std::unique_ptr<runtime::Executable> executable_;
  std::shared_ptr<SizeInstances> sizes_;
  std::string func_name_;
  std::string filename_;
  // The CUDA devices of the graph's random draws (a tuple, maybe empty) when an op that checks
  // values follows a draw or a grad-mode switch (capture/effect_order.h): run_graph saves the
  // generators' states and the grad mode before the graph and restores them for an eager
  // rerun; null otherwise.
  PyRef rerun_devices_;
  // Whether the graph holds an undoable effect (a draw, a grad-mode switch): without one, a run
  // that failed before its first lasting effect left nothing behind.
  bool any_undoable_ = false;
};

}  // namespace tl::frame
