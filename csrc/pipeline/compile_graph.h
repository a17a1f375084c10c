#pragma once
// The one compile driver: the frame hook (frame/compile_frame.cpp) and
// torch.compile(backend="torchlite") (python/bind_fx.cpp) both compile a
// captured graph here. Runs the registered passes in order, checks the graph
// after each under the verify setting and dumps it under trace, then builds
// the kernels. Design notes: docs/internals/pipeline.md.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/loop_ir.h"
#include "pipeline/pass_context.h"
#include "runtime/executable.h"

namespace tl::pipeline {

// What compile_graph returns: how the graph runs, and what the compile decided.
struct CompileResult {
  std::shared_ptr<ir::Graph> graph;  // the graph after the passes
  // Never null: fused kernels, op by op, or training_fn.
  std::unique_ptr<runtime::Executable> executable;
  std::vector<std::string> passes;  // the passes that ran, in order
  std::vector<double> pass_ms;      // and how long each took
  double kernels_ms = 0;            // building the kernels (code generation, JIT, link)
  size_t n_kernels = 0;             // fused kernels built (0: op by op, see no_kernels)
  std::string no_kernels;           // why there are no fused kernels ("" when there are)
  // settings.cuda_graphs: "recorded after a warm-up call", or "not used: <why>"; "" when off.
  // A compiled training step: "forward: ...; backward: ..." (each half's).
  std::string cuda_graphs;
  // Graphs autograd records (compiled_backward on): a Python callable taking
  // the graph's inputs and returning its outputs through a compiled forward
  // and backward (python/bind_training.cpp), which `executable` calls; null: op by op.
  PyRef training_fn;
  // For a graph autograd records: "compiled forward and backward", or "op by op: <why>"
  // (explain shows it per graph); "" for other graphs.
  std::string training;
};

// Builds CompileResult::training_fn for a graph autograd records; returns null
// (with the reason in `why`) when the graph cannot be trained compiled. Under
// settings.cuda_graphs it sets `cuda_graphs` to what its halves do (CompileResult::cuda_graphs
// of each). The Python bindings set it at import.
using TrainingCompiler = std::function<PyRef(std::shared_ptr<ir::Graph>, const PassContext&,
                                             std::string& why, std::string& cuda_graphs)>;
void set_training_compiler(TrainingCompiler compiler);

// Rewrites `graph` in place (passes mutate it). Throws InternalError naming
// the pass under verify when a pass leaves a broken graph, tl::Error on a
// code generator failure, PythonError when a pass's Python call fails.
// True when autograd must track `n`'s value (it recorded a grad_fn on the trace-time value, or
// `n` is a fresh leaf that requires grad): kernels cannot produce it. Views and no-op casts of
// parameters under no_grad report requires_grad yet are only read.
bool autograd_tracks(const ir::Node& n);

CompileResult compile_graph(std::shared_ptr<ir::Graph> graph, const PassContext& ctx);

// Sets ir::Kernel::static_axes of `k` (runtime sizes, not grouped) from `static_sizes`
// (PassContext::static_sizes, sorted): an axis whose size is one of them; and
// ir::Kernel::static_constants: an integer constant equal to one of them.
void mark_static_axes(ir::Kernel& k, const std::vector<int64_t>& static_sizes);

// Runs `graph` op by op through torch, values released after their last use
// (the memory plan of passes::op_by_op_schedule): a graph that gets no kernels.
std::unique_ptr<runtime::Executable> op_by_op(std::shared_ptr<const ir::Graph> graph);

// A fresh numbered folder <n>_<name> for one graph's trace in this process's
// dump folder inside debug_dir (core/dump_dir.h), with a trailing '/'; "" when
// it cannot be made (tracing never fails a compile).
std::string new_trace_folder(const std::string& debug_dir, const std::string& name);

}  // namespace tl::pipeline
