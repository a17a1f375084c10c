#include "capture/module_tensors.h"

#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "core/errors.h"

namespace tl::capture {
using detail::is_type;
using detail::utf8;

std::string first_tensor_held(PyObject* module) {
  PyRef mods = PyRef::steal(PyObject_CallMethod(module, "modules", nullptr));
  PyRef it = mods ? PyRef::steal(PyObject_GetIter(mods.get())) : PyRef();
  if (!it) throw PythonError();
  while (PyRef sub = PyRef::steal(PyIter_Next(it.get()))) {
    PyObject** dp = _PyObject_GetDictPtr(sub.get());
    if (!dp || !*dp) continue;
    for (const char* name : {"_parameters", "_buffers"}) {
      PyObject* d = PyDict_GetItemString(*dp, name);
      if (!d || !PyDict_Check(d)) continue;
      PyObject *k, *val;
      Py_ssize_t pos = 0;
      while (PyDict_Next(d, &pos, &k, &val))
        if (val != Py_None) return name[1] == 'p' ? "parameters" : "buffers";
    }
    PyObject *k, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(*dp, &pos, &k, &val))
      if (is_type(val, torch_api().tensor_type)) return "a tensor attribute " + utf8(k);
  }
  if (PyErr_Occurred()) throw PythonError();
  return "";
}

}  // namespace tl::capture
