#pragma once
// Runs a partitioned graph: fused kernels through the KernelBackend of their
// device (runtime/kernel_backend.h: the CPU JIT on OpenMP threads, or CUDA
// kernels on torch's current stream), extern nodes through torch by
// vectorcall (as GraphRunner does). Kernel outputs are allocated with
// torch.empty_strided (torch's caching allocator on CUDA) from their node's
// TensorMeta; values are released after their last use. What is allocated how,
// which steps are skipped and when values are released is the schedule's memory
// plan (ir::StepMemory, made by passes/memory_plan.h): executed here, not decided.
#include <memory>
#include <optional>
#include <vector>

#include "core/py_ref.h"
#include "ir/graph.h"
#include "ir/schedule.h"
#include "runtime/cuda_graphs.h"
#include "runtime/graph_outputs.h"
#include "runtime/kernel_backend.h"
#include "runtime/node_call.h"

namespace tl::runtime {

// The device `graph`'s kernels run on, when kernels can be built for it in
// this process (CPU: a build with LLVM; CUDA: the driver loads): its CUDA
// device when it has one, else the CPU. Values on other devices stay extern
// nodes (on_device below). nullopt for graphs on several CUDA devices: they
// run op by op.
std::optional<KernelDevice> kernel_device(const ir::Graph& graph);

// Whether a value with metadata `meta` lives on `device`.
bool on_device(const ir::TensorMeta& meta, const KernelDevice& device);

class CompiledGraph {
 public:
  // Compiles every kernel of the partition (in parallel). The partition must
  // carry its memory plan (passes::plan_memory). Throws tl::Error on
  // an LLVM or NVRTC failure, kernel tensors on several devices, CPU kernels
  // in a build without LLVM, or CUDA kernels without the driver or NVRTC.
  CompiledGraph(std::shared_ptr<const ir::Graph> graph, ir::Schedule partition);
  ~CompiledGraph();
  CompiledGraph(const CompiledGraph&) = delete;
  CompiledGraph& operator=(const CompiledGraph&) = delete;

  // `inputs` are borrowed, one per placeholder in graph order. Returns the
  // graph outputs (new references). Throws PythonError with the Python error
  // set, and `failed_node` names the node that raised (for a kernel: its first
  // output node).
  // Under enable_cuda_graphs: warm-up, record or replay (runtime/cuda_graphs.h).
  std::vector<PyRef> run(PyObject* const* inputs, size_t n_inputs);
  // `inputs` handed over (one per placeholder): each is released after its last reader (the
  // memory plan's release_after), so a value the caller no longer holds is freed mid-run. Under
  // CUDA graphs, run() on them.
  std::vector<PyRef> run_owned(std::vector<PyRef> inputs);
  const ir::Node* failed_node() const { return failed_node_; }
  // True when the last failed run failed before any step with a visible effect ran (an in-place
  // write, a random draw: ir::visible_effect), in the order the steps actually run.
  bool failed_before_effects() const { return failed_step_ >= 0 && failed_step_ < first_effect_; }
  // The same for lasting effects (ir::lasting_effect): random draws into new tensors and
  // grad-mode switches may have run before the failure.
  bool failed_before_lasting_effects() const {
    return failed_step_ >= 0 && failed_step_ < first_lasting_effect_;
  }
  // Records this CUDA graph's runs into CUDA graphs of `pool` from the second call on.
  // Call only when cuda_graph_blocker(graph, device().cuda) is "".
  // `warmups`, `pool_outputs_from`, `copy_inputs_from`: see CudaGraphs (a training step's halves).
  void enable_cuda_graphs(std::shared_ptr<CudaGraphPool> pool, int limit, std::string trace_dir,
                          int warmups = 1, int64_t pool_outputs_from = -1,
                          int64_t copy_inputs_from = -1);
  const CudaGraphs* cuda_graphs() const { return cuda_graphs_.get(); }
  CudaGraphs* cuda_graphs() { return cuda_graphs_.get(); }
  // Chooses the launch configuration (grid; block size of pointwise kernels) of each CUDA
  // kernel on the first run (runtime/cuda_autotune.h);
  // the trials go to <trace_dir>autotune.txt when trace_dir is not "".
  // `blocks`: pointwise kernels are also built at other block sizes.
  void enable_autotune(std::string trace_dir, bool blocks);
  const ir::Graph& graph() const { return *graph_; }
  const ir::Schedule& partition() const { return partition_; }
  const KernelDevice& device() const { return device_; }

 private:
  struct Step;
  struct RunState;
  std::vector<PyRef> run_steps(PyObject* const* inputs, size_t n_inputs);
  // `values`: the inputs, then empty slots for every other value (n_values_ in all).
  std::vector<PyRef> run_values(std::vector<PyRef>& values);
  bool match_kernel_layout(const Step& s, PyRef& value);
  void apply_memory_plan(const SlotMap& slots);
  bool run_kernel(const Step& s, std::vector<PyRef>& values, RunState& rs);
  bool fast_alloc(RunState& rs) const;
  std::shared_ptr<const ir::Graph> graph_;
  ir::Schedule partition_;
  std::vector<Step> steps_;
  GraphOutputs outputs_;
  size_t n_values_ = 0;
  size_t n_inputs_ = 0;
  bool changes_grad_mode_ = false;
  KernelDevice device_;
  const ir::Node* failed_node_ = nullptr;
  int failed_step_ = -1;
  int first_effect_ = -1;          // the first step with a visible effect; steps_.size() if none
  int first_lasting_effect_ = -1;  // the same for a lasting effect
  std::unique_ptr<KernelBackend> backend_;  // compiled the kernels, launches them
  PyRef empty_strided_, data_ptr_name_, stride_name_, alloc_kwnames_;
  PyRef fast_empty_strided_;  // private_empty_strided() in compiled_graph.cpp; may be null
  PyRef get_device_;          // torch._C._cuda_getDevice (fast_alloc on CUDA)
  std::unique_ptr<CudaGraphs> cuda_graphs_;
};

}  // namespace tl::runtime
