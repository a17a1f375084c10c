#pragma once
// Meta results of common ops inferred in C++ (sizes, strides, dtype,
// requires_grad) without running torch's meta kernels. In torch 2.x most of
// those kernels are Python (torch._refs), slow per call, and the first one
// imports torch._dynamo (~5 s in a fresh process). Anything not modelled
// exactly (other ops, dtypes, layouts, argument forms) is left to the real
// meta call; `TORCHLITE_CHECK_META=1` runs both and compares.
#include <string>

#include "core/py_ref.h"

namespace tl::capture {

// The meta result of `target(*pos, **kwargs)` (or `self.<method>(*pos,
// **kwargs)` when `method` is set), or null with no Python error set when the
// call is not one this file answers. `kwargs` may be null. Borrows all.
PyRef fast_meta_call(PyObject* target, const std::string& method, PyObject* self, PyObject* pos,
                     PyObject* kwargs);

// Throws InternalError when `fast` (a fast_meta_call answer) and `real` (the
// meta op's result, or null with the Python error set when it raised) differ
// in sizes, strides, dtype, requires_grad, device or being a fresh tensor.
void check_fast_meta(const std::string& op, PyObject* fast, PyObject* real);

}  // namespace tl::capture
