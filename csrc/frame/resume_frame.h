#pragma once
// A frame captured up to a graph break: runs the partial graph and the side
// effects recorded before the break, rebuilds the value stack and the bound
// locals, then hands over to CPython in a bridge (bytecode/resume.h) that
// runs the breaking instruction and calls the resume function, which the
// hook captures as a frame of its own.
#include <memory>
#include <string>
#include <vector>

#include "bytecode/resume.h"
#include "capture/capture.h"
#include "frame/captured_frame.h"

namespace tl::frame {

class ResumeFrame : public CapturedFrame {
 public:
  // `codes` is owned by the bridge cache and lives for the process.
  ResumeFrame(std::shared_ptr<const ir::Graph> graph, std::vector<ir::SideEffect> side_effects,
              ir::MadeClosures closures, std::unique_ptr<runtime::Executable> executable,
              std::string func_name, std::string filename, capture::ResumePlan plan,
              const bytecode::BridgeCode& codes, std::shared_ptr<const CompileConfig> config);
  PyObject* run(const ir::FrameView& frame, Served* served) override;

 private:
  PyRef value(const capture::ResumeValue& v, const std::vector<PyRef>& outputs,
              const ir::FrameView& frame, const Made& made);
  // A loop iterator's arguments, rebuilt; the iterator is made after the side effects and
  // put at args[slot].
  struct PendingIterator {
    size_t slot;
    const ir::Residual* residual;
    std::vector<PyRef> args;
  };
  void push_stack(std::vector<PyRef>& args, const std::vector<PyRef>& outputs,
                  const ir::FrameView& frame, const Made& made,
                  std::vector<PendingIterator>& iterators);

  // With plan_.nested: the callable that stands for this frame's call (the next level's bridge
  // bound to its arguments, each level's to the next one's); null otherwise.
  PyRef nested_call(const std::vector<PyRef>& outputs, const ir::FrameView& frame,
                    const Made& made);

  capture::ResumePlan plan_;
  const bytecode::BridgeCode& codes_;
  // The bridges of the levels of plan_.nested (call-through ones, then the innermost's).
  std::vector<const bytecode::BridgeCode*> level_codes_;
  std::vector<PyCodeObject*> bridge_chain_;  // codes_'s bridge, then level_codes_'s (borrowed)
  // The hook's config while CPython runs on: what the bridge calls is
  // captured under the same compile() call as this frame.
  std::shared_ptr<const CompileConfig> config_;
};

}  // namespace tl::frame
