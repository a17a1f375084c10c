#include "capture/bool_list_index.h"

#include <optional>
#include <vector>

#include "core/errors.h"

namespace tl::capture {

namespace {

// The bools of a list index (a list built in the trace or a constant list), or nothing.
std::optional<std::vector<bool>> bool_items(const ValuePtr& v) {
  std::vector<PyObject*> objs;  // borrowed
  if (v->kind == VKind::List) {
    for (const ValuePtr& item : v->items) {
      if (!item->is_const()) return std::nullopt;
      objs.push_back(item->obj.get());
    }
  } else if (v->is_const() && PyList_CheckExact(v->obj.get())) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v->obj.get()); ++i)
      objs.push_back(PyList_GET_ITEM(v->obj.get(), i));
  } else {
    return std::nullopt;
  }
  if (objs.empty()) return std::nullopt;  // `x[[]]` is an empty int index already
  std::vector<bool> out;
  for (PyObject* o : objs) {
    if (!PyBool_Check(o)) return std::nullopt;
    out.push_back(o == Py_True);
  }
  return out;
}

// The positions of `mask`'s True items as a constant list, when its length is the size of
// `tensor`'s dimension `dim` (that size specialised), else null.
ValuePtr positions(CaptureContext& ctx, const ValuePtr& tensor, int64_t dim,
                   const std::vector<bool>& mask) {
  PyRef shape = PyRef::steal(PyObject_GetAttrString(tensor->meta.get(), "shape"));
  if (!shape) throw PythonError();
  if (dim >= PyTuple_GET_SIZE(shape.get())) return nullptr;
  ValuePtr size = ctx.size_value(tensor, dim);
  ctx.specialise(size);  // NOTE: the mask fits this size only
  if (PyLong_AsLongLong(size->obj.get()) != static_cast<long long>(mask.size())) return nullptr;
  PyRef list = PyRef::steal(PyList_New(0));
  if (!list) throw PythonError();
  for (size_t i = 0; i < mask.size(); ++i) {
    if (!mask[i]) continue;
    PyRef n = PyRef::steal(PyLong_FromSize_t(i));
    if (!n || PyList_Append(list.get(), n.get()) < 0) throw PythonError();
  }
  return Value::constant(list);
}

}  // namespace

ValuePtr bool_lists_as_positions(CaptureContext& ctx, const ValuePtr& tensor, const ValuePtr& idx) {
  if (!tensor->meta) return idx;
  if (auto mask = bool_items(idx)) {
    ValuePtr p = positions(ctx, tensor, 0, *mask);
    return p ? p : idx;
  }
  if (idx->kind != VKind::Tuple) return idx;
  std::vector<ValuePtr> items = idx->items;
  bool changed = false;
  for (size_t i = 0; i < items.size(); ++i) {
    // NOTE: before item i only ints and slices: each indexes one dimension, so item i the i-th.
    if (auto mask = bool_items(items[i])) {
      ValuePtr p = positions(ctx, tensor, static_cast<int64_t>(i), *mask);
      if (!p) return idx;
      items[i] = p;
      changed = true;
      continue;
    }
    PyObject* o = items[i]->is_const() ? items[i]->obj.get() : nullptr;
    if (!o || !(PySlice_Check(o) || (PyLong_CheckExact(o)))) break;
  }
  return changed ? Value::tuple(std::move(items)) : idx;
}

}  // namespace tl::capture
