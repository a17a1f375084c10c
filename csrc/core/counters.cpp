#include "core/counters.h"

namespace tl {

Counters& counters() {
  static Counters c;
  return c;
}

std::vector<std::pair<std::string, int64_t>> Counters::snapshot() const {
  return {{"frames", frames.load()},
          {"graphs", graphs.load()},
          {"graph_breaks", graph_breaks.load()},
          {"recompiles", recompiles.load()},
          {"cache_hits", cache_hits.load()},
          {"kernels", kernels.load()},
          {"eager_fallbacks", eager_fallbacks.load()},
          {"capture_ns", capture_ns.load()},
          {"batch_norms_folded", batch_norms_folded.load()},
          {"channels_last_convs", channels_last_convs.load()},
          {"conv_biases_split", conv_biases_split.load()},
          {"conv_weights_cached", conv_weights_cached.load()},
          {"conv_weight_copies", conv_weight_copies.load()},
          {"conv_weights_converted", conv_weights_converted.load()},
          {"matmuls_padded", matmuls_padded.load()},
          {"duplicates_merged", duplicates_merged.load()},
          {"attentions_decomposed", attentions_decomposed.load()},
          {"producers_recomputed", producers_recomputed.load()},
          {"cuda_graph_recordings", cuda_graph_recordings.load()},
          {"cuda_graph_replays", cuda_graph_replays.load()},
          {"autotune_trials", autotune_trials.load()},
          {"autotune_cached", autotune_cached.load()},
          {"matmul_epilogues_changed", matmul_epilogues_changed.load()},
          {"size_instances", size_instances.load()},
          {"nvrtc_compiles", nvrtc_compiles.load()},
          {"launches_grouped", launches_grouped.load()},
          {"kernel_launches", kernel_launches.load()}};
}

void Counters::reset() {
  for (auto* c : {&frames,
                  &graphs,
                  &graph_breaks,
                  &recompiles,
                  &cache_hits,
                  &kernels,
                  &eager_fallbacks,
                  &capture_ns,
                  &batch_norms_folded,
                  &channels_last_convs,
                  &conv_biases_split,
                  &conv_weights_cached,
                  &conv_weight_copies,
                  &conv_weights_converted,
                  &matmuls_padded,
                  &duplicates_merged,
                  &attentions_decomposed,
                  &producers_recomputed,
                  &cuda_graph_recordings,
                  &cuda_graph_replays,
                  &autotune_trials,
                  &autotune_cached,
                  &matmul_epilogues_changed,
                  &size_instances,
                  &nvrtc_compiles,
                  &launches_grouped,
                  &kernel_launches})
    c->store(0);
}

}  // namespace tl
