#pragma once
// What tensors a module tree holds: a module built by traced code may outlive the trace (or be
// built at all in a graph) only when it holds none, since eager makes its tensors anew on every
// call (capture/module_construct.cpp, capture/context.cpp's fresh modules).
#include <Python.h>

#include <string>

namespace tl::capture {

// The first tensor `module` or a module under it holds, described ("parameters", "buffers",
// "a tensor attribute NAME"), or "" when it holds none. A None parameter or buffer holds none:
// CrossEntropyLoss() registers its absent class weight as the buffer None. Throws PythonError
// when walking the modules raises.
std::string first_tensor_held(PyObject* module);

}  // namespace tl::capture
