#pragma once
// Runs a partitioned graph: fused kernels through the CPU JIT on OpenMP
// threads, extern nodes through torch by vectorcall (as GraphRunner does).
// Kernel outputs are allocated with torch.empty_strided from their node's
// TensorMeta; values are released after their last use.
#include <memory>
#include <vector>

#include "core/py_ref.h"
#include "ir/graph.h"
#include "passes/partition.h"
#include "runtime/value_plan.h"

namespace tl::runtime {

class CompiledGraph {
 public:
  // Compiles every kernel of the partition (in parallel). Throws tl::Error on
  // an LLVM failure, a kernel tensor not on the CPU, or kernels in a build
  // without LLVM.
  CompiledGraph(std::shared_ptr<const ir::Graph> graph, passes::Partition partition);
  ~CompiledGraph();
  CompiledGraph(const CompiledGraph&) = delete;
  CompiledGraph& operator=(const CompiledGraph&) = delete;

  // `inputs` are borrowed, one per placeholder in graph order. Returns the
  // graph outputs (new references). Throws PythonError with the Python error
  // set, and `failed_node` names the node that raised (for a kernel: its first
  // output node).
  std::vector<PyRef> run(PyObject* const* inputs, size_t n_inputs);
  const ir::Node* failed_node() const { return failed_node_; }
  const ir::Graph& graph() const { return *graph_; }
  const passes::Partition& partition() const { return partition_; }

 private:
  struct Step;
  bool run_kernel(const Step& s, std::vector<PyRef>& values, int& num_threads);
  std::shared_ptr<const ir::Graph> graph_;
  passes::Partition partition_;
  std::vector<Step> steps_;
  ValuePlan values_;
  size_t n_values_ = 0;
  size_t n_inputs_ = 0;
  bool changes_grad_mode_ = false;
  const ir::Node* failed_node_ = nullptr;
  PyRef empty_strided_, get_num_threads_, data_ptr_name_, alloc_kwnames_;
};

}  // namespace tl::runtime
