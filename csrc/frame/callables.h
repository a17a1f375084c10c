#pragma once
// The Python-facing callables of the frame layer, as plain CPython types so
// that calling them is a real vectorcall (no pybind11 on the hot path):
//   Config            an opaque, immutable CompileConfig
//   CompiledFunction  fn called with a config active on this thread
//   DisabledFunction  fn called with no config active (torchlite.disable)
// Both function wrappers bind like functions (descriptor), carry __wrapped__
// and a __dict__ so functools.update_wrapper works.
#include <Python.h>

#include <string>

#include "frame/eval_hook.h"

namespace tl::frame {

// Creates the three types once; returns 0 or -1 with an exception set.
int init_callable_types();
PyTypeObject* config_type();             // borrowed
PyTypeObject* compiled_function_type();  // borrowed
PyTypeObject* disabled_function_type();  // borrowed

// Returns a new Config object. Borrows `backend` and `recorder` (None or NULL
// for none).
PyObject* new_config(PyObject* backend, const std::string& backend_name, bool fullgraph,
                     int cache_size_limit, PyObject* recorder, const Settings& settings,
                     const std::string& mode, int dynamic = -1);
// The config held by a Config object, or nullptr if `obj` is not one (borrows).
const ConfigPtr* config_of(PyObject* obj);
// The wrapped callable of a CompiledFunction/DisabledFunction, or nullptr
// (borrowed result, borrows `obj`).
PyObject* wrapped_function(PyObject* obj);

}  // namespace tl::frame
