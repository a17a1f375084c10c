#pragma once
// CUDA graphs over a compiled graph (mode="reduce-overhead", options={"cuda_graphs": True}):
// the first call runs plainly (warm-up), the second records every kernel launch and extern
// call into a torch.cuda.CUDAGraph, later calls replay it. Design notes:
// docs/internals/cuda_graphs.md.
//
// - Inputs whose address did not change between the warm-up and the recording call
//   (parameters, buffers, a reused input) are read in place; their addresses are checked on
//   every call and a change records again, with that input copied from then on (also when a
//   later recording finds it back at an old address). The others are copied into static
//   buffers.
// - Every graph of one model (one torchlite.compile() call: every size, every frame) records
//   into one memory pool (CudaGraphPool): intermediates are shared, each graph's outputs stay
//   reserved, so memory is bounded by the recordings, not by the calls.
// - Outputs are cloned out of the pool after each replay: what the caller gets stays valid
//   when the next replay overwrites the pool (never silently stale values). A training
//   forward's saved-for-backward outputs are the exception (`pool_outputs_from`): handed out
//   from the pool uncloned, and kept valid by CudaGraphPool::keep_valid until backward runs.
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
  // Counts one recording, and returns the number so far: the recording's sequence number.
  int recorded();
  // Pool tensors handed out uncloned by a replay of recording `seq` (a training forward's
  // saved tensors) live in memory that replays of recordings made no later than `seq` may
  // write: recordings made before it may have used that memory for their intermediates while
  // it was free, and `seq` itself writes it again. Before such a replay, `holder` (kept by a
  // weak reference) has its method `on_overwrite()` called once, to copy them out (or note
  // that they are stale when backward already ran). `holder` borrowed.
  void keep_valid(int seq, PyObject* holder);
  // Called before every replay of recording `seq` (see keep_valid); throws PythonError.
  void before_replay(int seq);

 private:
  std::mutex mu_;
  PyRef handle_, stream_, anchor_, anchor_value_;
  int stream_device_ = -1;
  int recorded_ = 0;
  std::vector<std::pair<int, PyRef>> kept_;  // (seq, weak reference to the holder)
};

// Why `graph`, compiled for a CUDA device (`cuda`) or the CPU, cannot be recorded, or "".
// Static reasons only (CPU tensors, random ops, synchronising ops, non-tensor inputs);
// recording can still fail at run time, which is reported then. Outputs from
// `pool_outputs_from` on (>= 0) are not copied out, so their size does not count.
std::string cuda_graph_blocker(const ir::Graph& graph, bool cuda, int64_t pool_outputs_from = -1);

class CudaGraphs {
 public:
  // Runs the graph plainly: borrowed inputs, one per placeholder; new references out;
  // throws PythonError.
  using RunFn = std::function<std::vector<PyRef>(PyObject* const*, size_t)>;
  // `warmups`: plain calls before the first recording; `pool_outputs_from`: outputs from this
  // index on are handed out from the pool uncloned (-1: none), see CudaGraphPool::keep_valid;
  // `copy_inputs_from`: inputs from this index on are always copied (-1: none; a backward's
  // tangents are fresh tensors every step, whatever address the allocator gives them).
  CudaGraphs(const ir::Graph& graph, int device, std::shared_ptr<CudaGraphPool> pool, int limit,
             std::string trace_dir, int warmups = 1, int64_t pool_outputs_from = -1,
             int64_t copy_inputs_from = -1);
  ~CudaGraphs();
  CudaGraphs(const CudaGraphs&) = delete;
  CudaGraphs& operator=(const CudaGraphs&) = delete;

  // One call: warm-up, record or replay (or plain, once graphs are off for this graph).
  std::vector<PyRef> run(PyObject* const* inputs, size_t n, const RunFn& plain);
  // "" while graphs are used; else why not (capture failed, the limit was reached).
  const std::string& off_reason() const { return off_; }
  int recordings() const { return recordings_; }
  // The sequence number (CudaGraphPool::recorded) of the recording the last call replayed,
  // or -1 when it ran plainly: its outputs from pool_outputs_from on are then pool tensors.
  int last_replayed() const { return last_replayed_; }
  const std::shared_ptr<CudaGraphPool>& pool() const { return pool_; }

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
  std::vector<char> moved_;           // per input: read in place once, then it moved
  int warmups_, warmed_ = 0;
  int64_t pool_outputs_from_, copy_inputs_from_;
  int last_replayed_ = -1;
  int recordings_ = 0;
  std::string off_;
  std::unique_ptr<Recording> rec_;
  PyRef data_ptr_name_, clone_name_, replay_name_, foreach_copy_;
};

}  // namespace tl::runtime
