#include "capture/backend_layout.h"

#include <unordered_set>

#include "core/errors.h"
#include "core/python_helpers.h"

namespace tl::capture {
namespace {

// NOTE: checked in C++ first so other ops never call into Python.
bool has_backend_layout(const std::string& op_name) {
  static const std::unordered_set<std::string> ops = [] {
    std::unordered_set<std::string> s = {"conv2d",
                                         "conv3d",
                                         "conv_transpose2d",
                                         "conv_transpose3d",
                                         "convolution",
                                         "_convolution",
                                         "group_norm",
                                         "batch_norm",
                                         "pad",
                                         "constant_pad_nd",
                                         "_pad_circular",
                                         "_pad_enum",
                                         "roll",
                                         "pixel_shuffle",
                                         "pixel_unshuffle",
                                         "channel_shuffle",
                                         "native_channel_shuffle",
                                         "_adaptive_avg_pool2d",
                                         "_adaptive_avg_pool3d",
                                         "fractional_max_pool2d",
                                         "fractional_max_pool3d"};
    for (const char* n : {"1d", "2d", "3d"}) {
      for (const char* k : {"reflection_pad", "replication_pad", "avg_pool", "max_pool",
                            "adaptive_avg_pool", "adaptive_max_pool"})
        s.insert(std::string(k) + n);
      s.insert(std::string("max_pool") + n + "_with_indices");
      s.insert(std::string("_upsample_nearest_exact") + n);
    }
    for (const char* n :
         {"upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_linear1d",
          "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d",
          "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa"})
      s.insert(n);
    return s;
  }();
  return ops.count(op_name) != 0;
}

}  // namespace

PyRef eager_result_layout(const std::string& op_name, PyObject* target, PyObject* self,
                          PyRef result, PyObject* device, PyObject* pos, PyObject* kwargs) {
  if (!result || !has_backend_layout(op_name)) return result;
  PyRef args = PyRef::borrow(pos);
  if (self) {
    // NOTE: a method's rule sees the tensor as its first argument (x.roll(1, 1)).
    args = PyRef::steal(PyTuple_New(PyTuple_GET_SIZE(pos) + 1));
    if (!args) throw PythonError();
    PyTuple_SET_ITEM(args.get(), 0, PyRef::borrow(self).release());
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pos); ++i)
      PyTuple_SET_ITEM(args.get(), i + 1, PyRef::borrow(PyTuple_GET_ITEM(pos, i)).release());
  }
  PyRef fn = python_helper("backend_layout.eager_layout");
  PyRef name = PyRef::steal(PyUnicode_FromString(op_name.c_str()));
  if (!name) throw PythonError();
  PyRef r = PyRef::steal(PyObject_CallFunctionObjArgs(fn.get(), name.get(), device, result.get(),
                                                      args.get(), kwargs ? kwargs : Py_None,
                                                      target ? target : Py_None, nullptr));
  if (!r) throw PythonError();
  return r;
}

}  // namespace tl::capture
