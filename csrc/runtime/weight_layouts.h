#pragma once
// Channels-last copies of convolution weights, made once per parameter
// version instead of on every call.
//
// Why: a convolution whose input is channels-last makes torch convert a
// contiguous k x k weight to channels-last inside the call (cuDNN's and
// oneDNN's `weight.contiguous(channels_last)`), on every call: 54 copy
// kernels a forward of inception_v3 in bf16 on an H100. The weights of an
// inference graph are parameters that rarely change, so the copy is kept and
// reused while the parameter is the same object, at the same data pointer,
// with the same version counter (an in-place update, an optimizer step,
// `load_state_dict` bump it; `.data = t` moves the data pointer). The entry
// holds the source's storage, so a later storage cannot reuse its address.
//
// Not seen (documented, as torch.compile's freezing does not see them either):
// writes that bypass the version counter, through `w.data` (a tensor with a
// counter of its own), numpy or DLPack views. The cache_conv_weights setting
// turns the cache off for programs that write weights that way.
#include <Python.h>

#include <cstddef>

namespace tl::runtime {

// `w.contiguous(memory_format=torch.channels_last)` (new reference), from the
// cache when `w` (borrowed) is unchanged since the last call. Uncached (a copy
// every call) while autograd records through `w` (grad mode on and `w`
// requires grad: the gradient must reach `w` itself), while a CUDA stream is
// capturing (a replayed CUDA graph must read `w` itself), and for tensors
// without a version counter (inference tensors) or a real device. Null with
// the Python error set on failure.
PyObject* channels_last_weight(PyObject* w);

// Entries held now (tests); forget_weight_layouts() drops them all
// (torchlite.reset()).
size_t weight_layouts_cached();
void forget_weight_layouts();

}  // namespace tl::runtime
