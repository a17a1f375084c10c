#pragma once
// What one compile_graph call is compiled with: the settings (defaults, the
// environment, torchlite.config, the mode's preset and options=, resolved in
// that order by torchlite/settings.py) and where its trace goes. Passes read
// settings only from here, never from the environment.
#include <memory>
#include <string>
#include <vector>

#include "core/flags.h"

namespace tl::runtime {
class CudaGraphPool;
}

namespace tl::pipeline {

struct PassContext {
  Settings settings = process_settings();
  std::string mode = "default";  // torchlite.compile(mode=...): shown in the trace
  // Folder for this graph's trace (pipeline.txt, NN_<pass>.txt, lowered.txt);
  // "" writes none. Callers make it with new_trace_folder when settings.trace.
  std::string trace_dir;
  // The CUDA graph memory pool of the model being compiled (settings.cuda_graphs); null: a
  // fresh one for this graph.
  std::shared_ptr<runtime::CudaGraphPool> graph_pool;
  // Kernels take their sizes as arguments (ir::Kernel::runtime_sizes): set by
  // the frame layer's dynamic-shape policy (docs/internals/dynamic-shapes.md).
  bool runtime_sizes = false;
  // With runtime_sizes: sizes that are model constants (sorted, unique), not ones that change
  // between the calls the compile serves: the parameters' sizes and the graph's own int
  // constants (`view(b, t, 12, 64)`). Kernel axes of such a size become
  // ir::Kernel::static_axes (compile_graph); set by the frame layer (compile_frame.cpp).
  std::vector<int64_t> static_sizes;
  // The caller promises no two graph inputs share memory (the compiled optimizer
  // step checks its tensors): kernels may then store into an input's buffer
  // (passes/store_in_place.h).
  bool inputs_unaliased = false;
  // The halves of a compiled training step under cuda_graphs (python/bind_training.cpp): the
  // forward's outputs from this index on are saved for backward and handed out from the pool
  // uncloned (-1: every output is copied out); the backward warms up twice, so that the
  // forward's pool tensors it reads are at their recorded addresses when it records
  // (docs/internals/cuda_graphs.md).
  int64_t pool_outputs_from = -1;
  // A training forward's outputs from this index on are saved for its backward, which alone
  // reads them (python/bind_training.cpp); -1: every output goes to the caller.
  int64_t saved_outputs_from = -1;
  int cuda_graph_warmups = 1;
  // Inputs from this index on are always copied into static buffers (the backward's tangents:
  // fresh every step, even where the allocator happens to give them the same address); -1: none.
  int64_t copy_inputs_from = -1;
  // The backward half of a compiled training step (python/bind_training.cpp): its cheap
  // pointwise producers are recomputed in each reading kernel (passes/recompute_producers.h).
  bool backward_half = false;
};

}  // namespace tl::pipeline
