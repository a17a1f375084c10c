#pragma once
// Process-wide event counters behind torchlite.counters(). Atomic: frames can
// be compiled on any thread.
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tl {

struct Counters {
  std::atomic<int64_t> frames{0};               // frames captured (cache misses traced)
  std::atomic<int64_t> graphs{0};               // graphs compiled
  std::atomic<int64_t> graph_breaks{0};         // captures that ended in a graph break
  std::atomic<int64_t> recompiles{0};           // misses on a code object that already had entries
  std::atomic<int64_t> cache_hits{0};           // calls served by a cached entry
  std::atomic<int64_t> kernels{0};              // generated kernels (0 until a code generator runs)
  std::atomic<int64_t> eager_fallbacks{0};      // calls run eagerly past the cache size limit
  std::atomic<int64_t> capture_ns{0};           // total time spent capturing
  std::atomic<int64_t> batch_norms_folded{0};   // inference batch norms folded into convs
  std::atomic<int64_t> channels_last_convs{0};  // convs the layout pass runs channels-last
  std::atomic<int64_t> conv_biases_split{0};    // CUDA conv biases moved into the next kernel
  // Convolutions whose weight goes through the channels-last weight cache (passes/conv_weights.h),
  // and the weight copies that cache made (runtime/weight_layouts.h): one per parameter version.
  std::atomic<int64_t> conv_weights_cached{0};
  std::atomic<int64_t> conv_weight_copies{0};
  // Convolutions reading a weight the graph converts at its start (the default path).
  std::atomic<int64_t> conv_weights_converted{0};
  std::atomic<int64_t> matmuls_padded{0};     // products on padded operands (passes/pad_matmuls.h)
  std::atomic<int64_t> duplicates_merged{0};  // calls computed once (passes/merge_duplicates.h)
  std::atomic<int64_t> attentions_decomposed{0};  // passes/attention_products.h
  std::atomic<int64_t> producers_recomputed{0};   // passes/recompute_producers.h
  std::atomic<int64_t> cuda_graph_recordings{0};  // CUDA graphs recorded (runtime/cuda_graphs.h)
  std::atomic<int64_t> cuda_graph_replays{0};     // calls served by replaying one
  std::atomic<int64_t> autotune_trials{0};  // launch configurations timed (runtime/cuda_autotune.h)
  std::atomic<int64_t> autotune_cached{0};  // choices read from the disk cache instead
  std::atomic<int64_t> matmul_epilogues_changed{0};  // products given another form by autotune
  // Graphs a size-generic entry compiled for new sizes without a capture (frame/size_generic.h).
  std::atomic<int64_t> size_instances{0};
  // CUDA programs NVRTC compiled (not read from the disk cache or shared with a loaded module):
  // with runtime sizes, a new size of a dynamic graph compiles none (runtime/cuda/compile.h).
  std::atomic<int64_t> nvrtc_compiles{0};
  // Kernel launches horizontal fusion saved at compile (passes/group_kernels.h): per group of n
  // kernels launched as one, n - 1.
  std::atomic<int64_t> launches_grouped{0};
  // Launches of generated kernels (a group launch counts once; CUDA may split a large group).
  std::atomic<int64_t> kernel_launches{0};

  std::vector<std::pair<std::string, int64_t>> snapshot() const;
  void reset();
};

Counters& counters();

}  // namespace tl
