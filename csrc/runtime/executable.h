#pragma once
// How a compiled graph runs, whoever compiled it: its fused kernels
// (CompiledGraph: CPU or CUDA, holding its CUDA-graph and autotune state), op
// by op (GraphRunner), or a Python callable taking the graph's inputs and
// returning its outputs (a torch.compile backend's compiled function, or the
// compiled forward and backward of a graph autograd records).
// pipeline::compile_graph makes one; the frame hook (frame/captured_frame.cpp),
// torch.compile(backend="torchlite") (python/bind_fx.cpp) and the training
// halves (python/bind_training.cpp) run it.
#include <memory>
#include <vector>

#include "core/py_ref.h"
#include "ir/graph.h"
#include "runtime/compiled_graph.h"
#include "runtime/graph_runner.h"

namespace tl::runtime {

class Executable {
 public:
  enum class Kind { Kernels, OpByOp, Callable };

  static std::unique_ptr<Executable> kernels(std::unique_ptr<CompiledGraph> compiled);
  // `schedule`: every op node in order with its memory plan (passes::op_by_op_schedule).
  static std::unique_ptr<Executable> op_by_op(std::shared_ptr<const ir::Graph> graph,
                                              const ir::Schedule& schedule);
  // `fn` returns a tuple or list of the outputs.
  static std::unique_ptr<Executable> callable(PyRef fn);

  // `inputs` are borrowed, one per placeholder in graph order. Returns the
  // graph outputs (new references). Throws PythonError with the Python error
  // set (failed_node then names the node that raised, when known) or
  // tl::Error from the kernels.
  std::vector<PyRef> run(PyObject* const* inputs, size_t n_inputs);
  // The same with the inputs handed over: kernels and op-by-op runs release each after its
  // last reader, so what the caller no longer holds is freed mid-run (a training backward's
  // saved values); a callable gets them all to the end.
  std::vector<PyRef> run_owned(std::vector<PyRef> inputs);
  // The node that raised in the last failed run (for a kernel: its first
  // output node); null for a callable.
  const ir::Node* failed_node() const;
  // True when the last failed run raised before anything visible ran (no in-place write, no
  // random draw yet, in the order the steps ran); false for a callable.
  bool failed_before_effects() const;
  // True when the last failed run raised before any lasting effect ran (ir::lasting_effect:
  // random draws into new tensors and grad-mode switches may have run). For a callable: a
  // training function (torchlite/_training.py) whose compiled forward raised (it is functional:
  // input mutations are applied after it); reading it clears the callable's mark.
  bool failed_before_lasting_effects() const;

  Kind kind() const { return kind_; }
  // The fused kernels; null unless kind() is Kernels.
  CompiledGraph* compiled() const { return compiled_.get(); }
  // The same, shared: a size-generic entry (frame/size_generic.h) keeps it as the instance of
  // the layout it was compiled for.
  const std::shared_ptr<CompiledGraph>& shared_compiled() const { return compiled_; }
  size_t kernel_count() const { return compiled_ ? compiled_->partition().kernels.size() : 0; }

 private:
  explicit Executable(Kind kind) : kind_(kind) {}
  Kind kind_;
  std::shared_ptr<CompiledGraph> compiled_;
  std::unique_ptr<GraphRunner> runner_;
  PyRef fn_;
};

// `outputs` as a tuple (new reference); throws PythonError when it cannot be made.
PyRef outputs_as_tuple(std::vector<PyRef> outputs);

}  // namespace tl::runtime
