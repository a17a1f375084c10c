#pragma once
// Functions capture cannot trace (torch functions whose eager bodies use torch.vmap,
// higher-order ops or C state; C builtins that call user code, such as functools.reduce), each
// replaced by a plain-Python stand-in with the same signature and result
// (torchlite/_polyfills.py) that capture inlines instead.
#include <Python.h>

namespace tl::capture {

// The stand-in for `fn` (borrowed; both live as long as the process), or null when `fn` has none.
PyObject* polyfill_for(PyObject* fn);

}  // namespace tl::capture
