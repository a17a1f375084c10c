#pragma once
// Result layouts that eager's kernels choose by the device's backend and that
// torch's meta kernels cannot know (a convolution run channels-last by
// oneDNN/cuDNN, the CPU's group norm, batch norm's suggested format, pads,
// pools, interpolation, roll and shuffles by device kernel). Capture
// corrects the meta result so traced code that reads strides, and the
// compiled graph's outputs, see eager's layout (torchlite/_backend_layout.py).
#include <string>

#include "core/py_ref.h"

namespace tl::capture {

// `result` (the op's meta result, owned) laid out as eager's kernel for
// `op_name` on `device` (the real torch.device) lays it out; `result` itself
// for other ops or when the layouts agree. `target` is the function called
// (null for a Tensor method, whose tensor is `self`); `self`/`pos`/`kwargs`
// are the meta arguments (borrowed; self and kwargs may be null).
PyRef eager_result_layout(const std::string& op_name, PyObject* target, PyObject* self,
                          PyRef result, PyObject* device, PyObject* pos, PyObject* kwargs);

}  // namespace tl::capture
