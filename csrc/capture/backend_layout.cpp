#include "capture/backend_layout.h"

#include <unordered_set>

#include "core/errors.h"
#include "core/python_helpers.h"

namespace tl::capture {
namespace {

// NOTE: checked in C++ first so other ops never call into Python.
bool has_backend_layout(const std::string& op_name) {
  static const std::unordered_set<std::string> ops = {
      "conv2d",      "conv3d",       "conv_transpose2d", "conv_transpose3d",
      "convolution", "_convolution", "group_norm",       "batch_norm"};
  return ops.count(op_name) != 0;
}

}  // namespace

PyRef eager_result_layout(const std::string& op_name, PyRef result, PyObject* device, PyObject* pos,
                          PyObject* kwargs) {
  if (!result || !has_backend_layout(op_name)) return result;
  PyRef fn = python_helper("backend_layout.eager_layout");
  PyRef name = PyRef::steal(PyUnicode_FromString(op_name.c_str()));
  if (!name) throw PythonError();
  PyRef r = PyRef::steal(PyObject_CallFunctionObjArgs(fn.get(), name.get(), device, result.get(),
                                                      pos, kwargs ? kwargs : Py_None, nullptr));
  if (!r) throw PythonError();
  return r;
}

}  // namespace tl::capture
