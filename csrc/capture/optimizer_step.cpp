#include "capture/optimizer_step.h"

#include "core/errors.h"
#include "core/python_helpers.h"

namespace tl::capture {

namespace {

bool named_step(PyObject* func) {
  if (!func || !PyFunction_Check(func)) return false;
  PyObject* name = reinterpret_cast<PyFunctionObject*>(func)->func_name;
  return name && PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "step") == 0;
}

}  // namespace

std::pair<PyObject*, PyObject*> optimizer_step_parts(const ValuePtr& fn) {
  if (!fn || !fn->obj) return {nullptr, nullptr};
  if (fn->kind == VKind::Method && !fn->flag && fn->method_name.empty() && fn->self &&
      fn->self->obj && fn->self->kind == VKind::Object)
    return {fn->self->obj.get(), fn->obj.get()};
  if (fn->kind != VKind::Const) return {nullptr, nullptr};
  PyObject* f = fn->obj.get();
  if (PyMethod_Check(f)) return {PyMethod_GET_SELF(f), PyMethod_GET_FUNCTION(f)};
  return {nullptr, f};
}

std::optional<StepRoute> optimizer_step_route(const ValuePtr& fn) {
  auto [self, func] = optimizer_step_parts(fn);
  if (!named_step(func)) return std::nullopt;
  // NOTE: kept for the process lifetime, like the torchlite module that holds it.
  static PyObject* route_of = python_helper("optimizer.step_route").release();
  PyRef r =
      PyRef::steal(PyObject_CallFunctionObjArgs(route_of, self ? self : Py_None, func, nullptr));
  if (!r) throw PythonError();
  if (!PyUnicode_Check(r.get())) return std::nullopt;
  if (PyUnicode_CompareWithASCIIString(r.get(), "compiled") == 0) return StepRoute::Compiled;
  if (PyUnicode_CompareWithASCIIString(r.get(), "eager") == 0) return StepRoute::Eager;
  return std::nullopt;
}

PyRef optimizer_step_callable(PyObject* self, PyObject* func, StepRoute route) {
  static PyObject* callable_for = python_helper("optimizer.step_callable").release();
  PyRef r =
      PyRef::steal(PyObject_CallFunction(callable_for, "OOs", self ? self : Py_None, func,
                                         route == StepRoute::Compiled ? "compiled" : "eager"));
  if (!r) throw PythonError();
  return r;
}

}  // namespace tl::capture
