#pragma once
// Runs a graph op by op by calling each node's torch callable with vectorcall,
// in the order of a schedule without kernels (passes::op_by_op_schedule),
// releasing values where its memory plan says (after their last use, so peak
// memory matches eager).
#include <memory>
#include <vector>

#include "core/py_ref.h"
#include "ir/graph.h"
#include "ir/schedule.h"
#include "runtime/graph_outputs.h"

namespace tl::runtime {

class GraphRunner {
 public:
  GraphRunner(std::shared_ptr<const ir::Graph> graph, const ir::Schedule& schedule);
  ~GraphRunner();
  GraphRunner(const GraphRunner&) = delete;
  GraphRunner& operator=(const GraphRunner&) = delete;

  // `inputs` are borrowed, one per placeholder in graph order. Returns the
  // graph outputs (new references). Throws PythonError with the op's error
  // set, and `failed_node` names the node that raised.
  std::vector<PyRef> run(PyObject* const* inputs, size_t n_inputs);
  // `inputs` handed over: each is released after its last reader (CompiledGraph::run_owned).
  std::vector<PyRef> run_owned(std::vector<PyRef> inputs);
  const ir::Node* failed_node() const { return failed_node_; }
  // True when the last failed run failed before any node with a visible effect ran.
  bool failed_before_effects() const { return failed_step_ >= 0 && failed_step_ < first_effect_; }
  // The same for lasting effects (ir::lasting_effect).
  bool failed_before_lasting_effects() const {
    return failed_step_ >= 0 && failed_step_ < first_lasting_effect_;
  }
  const ir::Graph& graph() const { return *graph_; }

 private:
  struct Step;
  std::vector<PyRef> run_values(std::vector<PyRef>& values);
  std::shared_ptr<const ir::Graph> graph_;
  std::vector<Step> steps_;
  GraphOutputs outputs_;
  size_t n_values_ = 0;
  size_t n_inputs_ = 0;
  bool changes_grad_mode_ = false;
  const ir::Node* failed_node_ = nullptr;
  int failed_step_ = -1;
  int first_effect_ = -1;          // the first step with a visible effect; steps_.size() if none
  int first_lasting_effect_ = -1;  // the same for a lasting effect
};

}  // namespace tl::runtime
