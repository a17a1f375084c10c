#include "capture/eager_checks.h"

#include <unordered_set>

#include "capture/graph_break.h"
#include "core/errors.h"

namespace tl::capture {
namespace {

// A Python bool, or a tensor of dtype torch.bool (its meta tensor is asked).
bool is_bool_operand(const ValuePtr& v) {
  if (v->is_const()) return PyBool_Check(v->obj.get());
  if (!v->is_tensor() || !v->meta) return false;
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(v->meta.get(), "dtype"));
  if (!dtype) throw PythonError();
  PyRef name = PyRef::steal(PyObject_Str(dtype.get()));
  if (!name) throw PythonError();
  return PyUnicode_CompareWithASCIIString(name.get(), "torch.bool") == 0;
}

}  // namespace

void check_eager_only_errors(const std::string& op_name, const std::vector<ValuePtr>& args) {
  // NOTE: torch's sub_check runs in the CPU/CUDA kernels only (measured on torch 2.13): on meta
  // tensors `x - True` and `x - bool_tensor` return a result, in eager they raise.
  static const std::unordered_set<std::string> subtractions = {
      "sub", "sub_", "rsub", "isub", "subtract", "subtract_", "__sub__", "__rsub__", "__isub__"};
  if (!subtractions.count(op_name) || args.size() < 2) return;
  bool any_tensor = false, any_bool = false;
  for (size_t i = 0; i < 2; ++i) {
    any_tensor = any_tensor || args[i]->is_tensor();
    any_bool = any_bool || is_bool_operand(args[i]);
  }
  if (any_tensor && any_bool)
    graph_break("op_error",
                op_name +
                    " with a bool operand raises in eager but not on meta tensors (it runs "
                    "eagerly so the real error surfaces)");
}

}  // namespace tl::capture
