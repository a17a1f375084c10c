#pragma once
// Convolution weights converted to channels-last once per parameter version.
//
// A convolution whose input is channels-last runs channels-last, and torch
// then converts a contiguous k x k weight to channels-last inside the call,
// on every call (cuDNN's and oneDNN's `weight.contiguous(channels_last)`:
// 54 copy kernels a forward of inception_v3 in bf16 on an H100). Where the
// weight is a parameter (a graph input read from a module or global, not an
// argument), the convolution reads `torchlite._C.channels_last_weight(w)`
// instead: the same copy, made on the first call and kept while the parameter
// is unchanged (runtime/weight_layouts.h says what "unchanged" sees). The
// convolution then receives the layout it would have converted to: the same
// values, the same algorithm, the same output layout.
//
// NOTE: measured (bench/conv_weights.py, H100, timm inception_v3 b32 299px bf16, in turns):
// 4.34 ms a forward with torch converting the weights in every call, 3.58 ms cached (1.21x);
// eager 10.39 ms. bench/models.py in the same call: 1.20x torch.compile, 181 launches a call
// against torch.compile's 241.
// NOTE: measured (the same bench, H100, b32 bf16, median of 3 in turns): the default grouped
// conversion, inception_v3 4.66 ms / 181 CUDA kernels a call against 5.30 ms / 235 with torch
// converting in each convolution (1.14x); resnet50 3.21 / 114 against 3.64 / 131 (1.13x); the
// cache 3.15 ms on resnet50. bench/models.py in the same call: inception_v3 1.24x torch.compile,
// resnet50 1.23x.
//
// The cache is opt-in (the cache_conv_weights setting): a write through `w.data`
// bypasses the version counter it checks. By default (convert_conv_weights) every
// such weight, an argument too, is converted in the graph itself: a
// `w.contiguous(memory_format=torch.channels_last)` node per weight placed before
// the graph's first computation, so the copies are neighbouring independent
// pointwise kernels that passes/group_kernels.h launches as one (the pipeline
// groups layout copies even with group_kernels off). Always the weight's current
// values, one launch a call instead of one copy per convolution inside torch.
//
// Alternative rejected: a constant folded at compile time (torch.compile's
// freezing): a parameter updated in place between calls would be stale, and
// guards see parameters by identity, not value.
#include "core/py_ref.h"
#include "ir/graph.h"

namespace tl::passes {

// Rewrites every such convolution (none while autograd records through the
// graph: the gradient must land in the parameter's own layout); returns how
// many convolutions now read a cached weight.
int cache_conv_weights(ir::Graph& graph);

// The default path: every channels-last convolution of a contiguous k x k weight
// that is a graph input reads `w.contiguous(memory_format=torch.channels_last)`,
// made at the start of the graph (see above; none while autograd records through
// the graph). Returns how many convolutions now read such a copy.
int convert_conv_weights(ir::Graph& graph);

// The callable the rewritten convolutions read their weight through
// (torchlite._C.channels_last_weight, runtime/weight_layouts.h): set by the
// bindings at import, since passes/ does not reach the runtime.
void set_channels_last_weight(PyRef fn);

}  // namespace tl::passes
