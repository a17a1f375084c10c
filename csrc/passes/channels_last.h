#pragma once
// Convolution layouts. Meta tensors cannot tell which layout a convolution
// returns (torch's meta kernel always says contiguous; the real backend picks
// channels-last for channels-last operands), so every 4-d convolution's
// metadata is first set to what its device's backend really returns (a fake
// tensor on the real device), and its consumers' metadata follows. Then, where
// the policy says it pays, the convolutions' inputs are converted to
// channels-last once (x.contiguous(memory_format=torch.channels_last)), meta
// propagation carries that layout through the pointwise/pool kernels between
// convolutions, and graph outputs whose strides now differ from eager's are
// cloned back to eager's exact strides.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace tl::passes {

// Estimated time of a graph's convolutions in each layout on the CPU (one
// core; milliseconds on the machine the constants were measured on, only
// their ratio matters). See cpu_conv_cost.
struct ConvCost {
  double contiguous = 0;
  double channels_last = 0;
};

// The CPU cost of one f32 convolution from its sizes: input N,C,H,W, weight
// O,C/groups,kh,kw, output N,O,Ho,Wo; `single_thread` when torch runs on one
// thread (then torch computes unstrided 1x1 convolutions with its own GEMM
// path instead of oneDNN's, which has a channels-last case of its own).
ConvCost cpu_conv_cost(const std::vector<int64_t>& input, const std::vector<int64_t>& weight,
                       const std::vector<int64_t>& output, bool single_thread);

// Whether convolutions on `device_type` ("cpu", "cuda") in `dtype` (a
// torch.dtype, borrowed) run faster channels-last: CUDA in f16/bf16 (cuDNN's
// NHWC tensor-core kernels; on by default); the CPU in f32 when the largest
// convolution output is at least kCpuChannelsLastBytes (`largest_conv_bytes`:
// oneDNN's NHWC kernels skip the blocked-layout reorders of every activation,
// which pays on large activations) or when the convolutions' estimated
// channels-last time (`cost`, summed cpu_conv_cost) is below their contiguous
// time by kCpuChannelsLastMargin (depthwise-separable networks: depthwise and
// narrow pointwise convolutions run faster channels-last at every size).
// `setting` (the channels_last setting) forces always/never.
bool prefers_channels_last(const std::string& device_type, PyObject* dtype,
                           std::optional<bool> setting = std::nullopt,
                           int64_t largest_conv_bytes = 0, ConvCost cost = {});

// The CPU's threshold above (measured: see the NOTE in channels_last.cpp).
constexpr int64_t kCpuChannelsLastBytes = int64_t{16} << 20;
// Channels-last must be estimated this much faster: the input's conversion and
// the outputs' restoring copies are not in the estimate.
constexpr double kCpuChannelsLastMargin = 1.1;

// A 2-d convolution (torch.conv2d, or torch.convolution not transposed) of a
// 4-d input and weight.
bool is_conv4d(const ir::Node& n);

// Whether autograd records some value the graph computes (a node other than a
// graph input requires grad).
bool tracks_grad(const ir::Graph& g);

// The pass; returns how many convolutions now run channels-last because of it
// (0 when it does not apply: no 4-d convolution, or a single one whose
// consumers do not read channels innermost, autograd, a layout-sensitive op in
// the way, or the policy says no).
int channels_last(ir::Graph& graph, std::optional<bool> setting = std::nullopt);

}  // namespace tl::passes
