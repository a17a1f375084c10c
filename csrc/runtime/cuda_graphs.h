#pragma once
// CUDA graphs over a compiled graph (mode="reduce-overhead", options={"cuda_graphs": True}):
// the first call runs plainly (warm-up), the second records every kernel launch and extern
// call into a torch.cuda.CUDAGraph, later calls replay it. Design notes:
// docs/internals/cuda_graphs.md.
//
// - Inputs whose address did not change between the warm-up and the recording call
//   (parameters, buffers, a reused input) are read in place; their addresses are checked on
//   every call and a change records again. The others are copied into static buffers.
// - Every graph of one model (one torchlite.compile() call: every size, every frame) records
//   into one memory pool (CudaGraphPool): intermediates are shared, each graph's outputs stay
//   reserved, so memory is bounded by the recordings, not by the calls.
// - Outputs are cloned out of the pool after each replay: what the caller gets stays valid
//   when the next replay overwrites the pool (never silently stale values).
// - Past `limit` recordings of one graph, or when recording fails, the graph runs without
//   CUDA graphs, said once under TORCHLITE_LOGS=cudagraphs.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/py_ref.h"
#include "ir/graph.h"

namespace tl::runtime {

// The memory pool and capture stream shared by all graphs of one model, made lazily (the
// first recording) so a CPU-only process never touches torch.cuda. Used with the GIL held.
class CudaGraphPool {
 public:
  // torch.cuda.graph_pool_handle() (new on the first call; throws PythonError).
  PyRef handle();
  // A side stream of `device` to record on (CUDA cannot record the legacy default stream).
  PyRef stream(int device);
  // Records a one-kernel graph into the pool and keeps it, on the current (capture) stream:
  // torch frees a pool once no graph uses it and refuses to record into it again, which
  // dropping the model's only recording (recording it again, or turning graphs off) would do.
  void anchor(int device);
  // Counts one recording, and returns the number so far (for the trace and logs).
  int recorded();

 private:
  std::mutex mu_;
  PyRef handle_, stream_, anchor_, anchor_value_;
  int stream_device_ = -1;
  int recorded_ = 0;
};

// Why `graph`, compiled for a CUDA device (`cuda`) or the CPU, cannot be recorded, or "".
// Static reasons only (CPU tensors, random ops, synchronising ops, non-tensor inputs);
// recording can still fail at run time, which is reported then.
std::string cuda_graph_blocker(const ir::Graph& graph, bool cuda);

class CudaGraphs {
 public:
  // Runs the graph plainly: borrowed inputs, one per placeholder; new references out;
  // throws PythonError.
  using RunFn = std::function<std::vector<PyRef>(PyObject* const*, size_t)>;
  CudaGraphs(const ir::Graph& graph, int device, std::shared_ptr<CudaGraphPool> pool, int limit,
             std::string trace_dir);
  ~CudaGraphs();
  CudaGraphs(const CudaGraphs&) = delete;
  CudaGraphs& operator=(const CudaGraphs&) = delete;

  // One call: warm-up, record or replay (or plain, once graphs are off for this graph).
  std::vector<PyRef> run(PyObject* const* inputs, size_t n, const RunFn& plain);
  // "" while graphs are used; else why not (capture failed, the limit was reached).
  const std::string& off_reason() const { return off_; }
  int recordings() const { return recordings_; }

 private:
  struct Recording;
  bool record(PyObject* const* inputs, size_t n, const RunFn& plain);
  bool matches(PyObject* const* inputs);
  std::vector<PyRef> replay(PyObject* const* inputs);
  void turn_off(const std::string& why);
  void trace(const std::string& line);

  std::string name_;  // for logs: the graph's first output node or "graph"
  int device_;
  std::shared_ptr<CudaGraphPool> pool_;
  int limit_;
  std::string trace_dir_, trace_text_;
  std::vector<int> mutated_inputs_;   // placeholders the graph writes in place
  std::vector<uintptr_t> warm_ptrs_;  // data pointers seen by the warm-up call (0: none yet)
  bool warmed_ = false;
  int recordings_ = 0;
  std::string off_;
  std::unique_ptr<Recording> rec_;
  PyRef data_ptr_name_, clone_name_, replay_name_, foreach_copy_;
};

}  // namespace tl::runtime
