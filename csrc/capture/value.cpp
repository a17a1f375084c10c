#include "capture/value.h"

namespace tl::capture {

ValuePtr Value::of_kind(VKind kind) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  return v;
}

ValuePtr Value::constant(PyRef obj, ir::SourcePtr src) {
  auto v = of_kind(VKind::Const);
  v->obj = std::move(obj);
  v->source = std::move(src);
  return v;
}

ValuePtr Value::tensor(ir::Node* node, PyRef meta, PyRef device) {
  auto v = of_kind(VKind::Tensor);
  v->node = node;
  v->meta = std::move(meta);
  v->device = std::move(device);
  return v;
}

ValuePtr Value::tuple(std::vector<ValuePtr> items) {
  auto v = of_kind(VKind::Tuple);
  v->items = std::move(items);
  return v;
}

ValuePtr Value::list(std::vector<ValuePtr> items) {
  auto v = of_kind(VKind::List);
  v->items = std::move(items);
  return v;
}

ValuePtr Value::cell(ValuePtr contents) {
  auto v = of_kind(VKind::Cell);
  v->cell_contents = std::move(contents);
  return v;
}

std::string Value::type_name() const {
  switch (kind) {
    case VKind::Tensor:
      return "Tensor";
    case VKind::Tuple:
      return "tuple";
    case VKind::List:
      return "list";
    case VKind::Dict:
      return "dict";
    case VKind::Method:
      return "method";
    case VKind::Function:
      return "function";
    case VKind::Cell:
      return "cell";
    case VKind::Iterator:
      return method_name.empty() ? "iterator" : method_name;
    case VKind::DictView:
      return "dict_" + method_name;
    case VKind::GradMode:
      return "grad-mode context";
    case VKind::GradModeExit:
      return "grad-mode exit";
    case VKind::Set:
      return "set";
    case VKind::Deque:
      return "collections.deque";
    default:
      break;
  }
  if (!obj) return "?";
  return Py_TYPE(obj.get())->tp_name;
}

ir::SymFloatPtr float_expr(const ValuePtr& v) {
  if (!v || !v->is_const()) return nullptr;
  if (v->fsym) return v->fsym;
  PyObject* o = v->obj.get();
  if (PyFloat_CheckExact(o)) return ir::sym_float_const(PyFloat_AS_DOUBLE(o));
  if (!PyLong_CheckExact(o)) return nullptr;
  int overflow = 0;
  long long n = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow || (n == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return nullptr;
  }
  // NOTE: CPython converts an int to float exactly only below 2**53.
  if (n > (1LL << 53) || n < -(1LL << 53)) return nullptr;
  return v->sym ? ir::sym_float_of_int(v->sym, n) : ir::sym_float_const(static_cast<double>(n));
}

}  // namespace tl::capture
