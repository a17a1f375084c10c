#pragma once
// Python functions of the torchlite package that the C++ core calls (the
// attention-mask fill, padded linear weights, eager layouts of backend ops).
// The package registers them at import (torchlite/_install.py), as it does the
// backend bridge, so no layer below the bindings imports torchlite modules by
// name and a missing one is a clear error rather than an ImportError deep in
// a pass.
#include <Python.h>

#include <string>

#include "core/py_ref.h"

namespace tl {

// Sets (or replaces) helper `name`; `fn` is borrowed, the table keeps a reference.
void register_python_helper(const std::string& name, PyObject* fn);
// The registered helper; an InternalError naming it when the package did not register it.
PyRef python_helper(const char* name);

}  // namespace tl
