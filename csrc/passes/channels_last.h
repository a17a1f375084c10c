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

#include "ir/graph.h"

namespace tl::passes {

// Whether convolutions on `device_type` ("cpu", "cuda") in `dtype` (a
// torch.dtype, borrowed) run faster channels-last: CUDA in f16/bf16 (cuDNN's
// NHWC tensor-core kernels; on by default); the CPU in f32 only when the
// largest convolution output is at least kCpuChannelsLastBytes
// (`largest_conv_bytes`): oneDNN's NHWC kernels skip the blocked-layout
// reorders of every activation, which pays on large activations and loses
// on small ones. `setting` (the channels_last setting) forces always/never.
bool prefers_channels_last(const std::string& device_type, PyObject* dtype,
                           std::optional<bool> setting = std::nullopt,
                           int64_t largest_conv_bytes = 0);

// The CPU's threshold above (measured: see the NOTE in channels_last.cpp).
constexpr int64_t kCpuChannelsLastBytes = int64_t{16} << 20;

// The pass; returns how many convolutions now run channels-last because of it
// (0 when it does not apply: no 4-d convolution, or a single one whose
// consumers do not read channels innermost, autograd, a layout-sensitive op in
// the way, or the policy says no).
int channels_last(ir::Graph& graph, std::optional<bool> setting = std::nullopt);

}  // namespace tl::passes
