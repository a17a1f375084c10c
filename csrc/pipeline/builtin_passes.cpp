// torchlite's own passes, in the order they run. The order matters:
// functionalize first (later passes see out-of-place ops), the CUDA library
// layouts before channels-last (which re-derives every layout), partition
// last (it reads the final graph and writes the kernels); conv_bias after
// channels-last, so its adds are traced on the convolutions' final layouts;
// matmul_operands after every pass that changes layouts (it reads the final
// ones); matmul_epilogues last before partition (its trials time the final layouts, and its
// bias adds and activations are then fused like any other).
#include "core/counters.h"
#include "passes/attention_products.h"
#include "passes/channels_last.h"
#include "passes/conv_bias.h"
#include "passes/conv_weights.h"
#include "passes/cuda_layouts.h"
#include "passes/fold_batch_norm.h"
#include "passes/functionalize.h"
#include "passes/matmul_operands.h"
#include "passes/merge_duplicates.h"
#include "passes/move_reshapes.h"
#include "passes/pad_matmuls.h"
#include "passes/partition.h"
#include "passes/recompute_producers.h"
#include "passes/small_products.h"
#include "passes/split_reductions.h"
#include "pipeline/matmul_epilogues.h"
#include "pipeline/pass_registry.h"
#include "runtime/compiled_graph.h"

namespace tl::pipeline {

std::vector<Pass> builtin_passes() {
  using G = ir::Graph;
  using St = PassState;
  return {
      {"torchlite.functionalize",
       {"functionalize"},
       kAnyDevice,
       [](const Settings& s) { return s.functionalize; },
       [](G& g, St&) { passes::functionalize(g); }},
      {"torchlite.merge_duplicates",
       {"merge_duplicates"},
       kAnyDevice,
       [](const Settings& s) { return s.merge_duplicates; },
       [](G& g, St&) { counters().duplicates_merged += passes::merge_duplicates(g); }},
      {"torchlite.decompose_attention",
       {"decompose_attention"},
       kAnyDevice,
       [](const Settings& s) { return s.decompose_attention != false; },
       [](G& g, St& st) {
         // NOTE: the default scale 1/sqrt(E) is this graph's head size; a size-generic graph
         // keeps torch's call.
         if (!st.ctx.runtime_sizes)
           counters().attentions_decomposed += passes::decompose_biased_attention(
               g, /*every_call=*/st.ctx.settings.decompose_attention == true);
       }},
      {"torchlite.attention_masks",
       {},
       kCuda,
       nullptr,
       [](G& g, St&) {
         passes::dense_attention_masks(g);
         passes::share_attention_masks(g);
       }},
      {"torchlite.pad_linears",
       {"pad_matmuls"},
       kCuda,
       [](const Settings& s) { return s.pad_matmuls != false; },
       [](G& g, St&) { passes::pad_unaligned_linears(g); }},
      {"torchlite.pad_matmuls",
       {"pad_matmuls"},
       kAnyDevice,
       nullptr,
       [](G& g, St& st) {
         // NOTE: the padding is sized for this graph's sizes; a size-generic graph has none.
         if (!st.ctx.runtime_sizes)
           counters().matmuls_padded +=
               passes::pad_unaligned_matmuls(g, st.ctx.settings.pad_matmuls);
       }},
      {"torchlite.fold_batch_norm",
       {"fold_batch_norm"},
       kAnyDevice,
       [](const Settings& s) { return s.fold_batch_norm; },
       [](G& g, St&) { counters().batch_norms_folded += passes::fold_batch_norm(g); }},
      {"torchlite.channels_last",
       {"channels_last"},
       kAnyDevice,
       nullptr,
       [](G& g, St& st) {
         counters().channels_last_convs += passes::channels_last(g, st.ctx.settings.channels_last);
       }},
      {"torchlite.conv_weights",
       {"cache_conv_weights"},
       kAnyDevice,
       [](const Settings& s) { return s.cache_conv_weights; },
       [](G& g, St&) { counters().conv_weights_cached += passes::cache_conv_weights(g); }},
      // NOTE: after the cache (a weight it serves is no longer a graph input here).
      {"torchlite.conv_weight_layouts",
       {"convert_conv_weights"},
       kAnyDevice,
       [](const Settings& s) { return s.convert_conv_weights; },
       [](G& g, St&) { counters().conv_weights_converted += passes::convert_conv_weights(g); }},
      {"torchlite.split_reductions",
       {},
       kAnyDevice,
       nullptr,
       [](G& g, St&) { passes::split_reductions(g); }},
      {"torchlite.conv_bias",
       {},
       kCuda,
       nullptr,
       [](G& g, St&) { counters().conv_biases_split += passes::split_convolution_bias(g); }},
      {"torchlite.move_reshapes",
       {},
       kAnyDevice,
       nullptr,
       [](G& g, St& st) {
         // NOTE: the moved reshapes take this graph's sizes. A graph compiled with runtime sizes
         // runs at its own layout only (an exact entry; a size-generic entry compiles each
         // layout's graph from the captured one: frame/size_generic.h), so it gets the same
         // fusion as a static compile (the steady state of a new length matches it).
         passes::move_reshapes(g, st.ctx.saved_outputs_from);
       }},
      {"torchlite.small_products",
       {"small_products"},
       kAnyDevice,
       [](const Settings& s) { return s.small_products; },
       [](G& g, St& st) {
         // NOTE: the row count is this graph's; a size-generic graph keeps torch's product.
         if (!st.ctx.runtime_sizes) passes::expand_small_products(g);
       }},
      {"torchlite.matmul_operands",
       {"matmul_layouts"},
       kAnyDevice,
       [](const Settings& s) { return s.matmul_layouts; },
       [](G& g, St&) { passes::lay_out_matmul_operands(g); }},
      {"torchlite.matmul_epilogues",
       {"autotune"},
       kAnyDevice,  // CUDA only, unless a test timer stands in (pipeline/matmul_epilogues.h)
       [](const Settings& s) { return s.autotune; },
       [](G& g, St& st) { choose_matmul_epilogues(g, st); }},
      {"torchlite.recompute_producers",
       {},
       kAnyDevice,
       nullptr,
       [](G& g, St& st) {
         // NOTE: backward halves only. There a batch norm's `x - mean` and ReLU gradient are
         // read by its statistic sums and its input gradient (resnet50 bottleneck backward 28 ->
         // 22 kernels); in forward graphs it saved no launch (timm resnet50 208 -> 208) and
         // copied an erf GELU into each of its readers (softmax's passes, a per-head max): on
         // the CPU, recomputed transcendental work per pass, and each trial fusion is compile time.
         if (!st.ctx.backward_half) return;
         runtime::KernelDevice device = st.device;
         const int64_t saved = st.ctx.saved_outputs_from;
         counters().producers_recomputed += passes::recompute_producers(
             g, [device](const ir::TensorMeta& m) { return runtime::on_device(m, device); },
             [saved](G& graph) { passes::move_reshapes(graph, saved); });
       }},
      {"torchlite.partition",
       {},
       kAnyDevice,
       nullptr,
       [](G& g, St& st) {
         runtime::KernelDevice device = st.device;
         st.partition = passes::partition_graph(
             g, st.ctx.inputs_unaliased,
             [device](const ir::TensorMeta& m) { return runtime::on_device(m, device); });
       }},
  };
}

}  // namespace tl::pipeline
