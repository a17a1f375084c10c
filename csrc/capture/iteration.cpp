// The iterator protocol over symbolic values: iter() and next() as GET_ITER,
// FOR_ITER and the builtins run them.
//
// Containers the trace knows are materialised at GET_ITER (an Items iterator).
// A user-defined iterator is not: its __next__ (or its class's __getitem__) is
// user code, and each call must run when CPython would run it, between the
// loop body's iterations, so that a `break`, an early StopIteration of zip()
// or state the body reads see what eager sees. Such an iterator stays the
// Object itself on the stack (as in CPython), each step inlines __next__, and
// a StopIteration it raises ends the loop.
#include <algorithm>

#include "capture/graph_break.h"
#include "capture/py_helpers.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

namespace {

// The Python function `name` of the object's type, or null (borrowed).
PyObject* python_slot(const ValuePtr& v, const char* name) {
  PyRef key = PyRef::steal(PyUnicode_FromString(name));
  if (!key) throw PythonError();
  PyObject* fn = _PyType_Lookup(Py_TYPE(v->obj.get()), key.get());
  return fn && PyFunction_Check(fn) ? fn : nullptr;
}

ValuePtr lazy_iterator(IterKind kind) {
  ValuePtr it = Value::of_kind(VKind::Iterator);
  it->iter_kind = kind;
  return it;
}

}  // namespace

bool Tracer::is_user_iterator(const ValuePtr& v) {
  return v->kind == VKind::Object && python_slot(v, "__next__") != nullptr;
}

bool Tracer::is_lazy_iterator(const ValuePtr& v) {
  return is_user_iterator(v) || (v->kind == VKind::Iterator && v->iter_kind != IterKind::Items);
}

ValuePtr Tracer::get_iter(const ValuePtr& v) {
  if (v->kind == VKind::Iterator) return v;
  if (v->kind != VKind::Object) {
    ValuePtr it = Value::of_kind(VKind::Iterator);
    it->items = iterate(v);
    return it;
  }
  if (python_slot(v, "__iter__")) {
    ValuePtr r = *call_dunder(v, "__iter__", {});
    if (r->kind == VKind::Iterator || is_user_iterator(r)) return r;
    // As CPython checks what __iter__ returned: a list, say, is not an iterator.
    if (!r->obj || !PyIter_Check(r->obj.get()))
      raise_user(PyExc_TypeError, "iter() returned non-iterator of type '" + r->type_name() + "'");
    graph_break("unsupported_value",
                "iterating the " + r->type_name() + " returned by " + v->type_name() + ".__iter__");
  }
  // The old sequence protocol: no __iter__ at all, a Python __getitem__.
  if (!Py_TYPE(v->obj.get())->tp_iter && !v->mapping && python_slot(v, "__getitem__")) {
    ValuePtr it = lazy_iterator(IterKind::GetItem);
    it->self = v;
    return it;
  }
  if (!v->mapping) graph_break("unsupported_value", "iteration over a " + v->type_name());
  ValuePtr it = Value::of_kind(VKind::Iterator);
  it->items = iterate(v->mapping);
  return it;
}

std::optional<ValuePtr> Tracer::next_item(const ValuePtr& it) {
  if (it->kind == VKind::Object) {
    if (!python_slot(it, "__next__"))
      graph_break("unsupported_value", "next() of a " + it->type_name());
    try {
      return *call_dunder(it, "__next__", {});
    } catch (const UserException& e) {
      if (!e.matches(PyExc_StopIteration)) throw;
      return std::nullopt;
    }
  }
  if (it->kind != VKind::Iterator)
    raise_user(PyExc_TypeError, "'" + it->type_name() + "' object is not an iterator");
  switch (it->iter_kind) {
    case IterKind::Items:
      if (it->pos < it->items.size()) return it->items[it->pos++];
      return std::nullopt;
    case IterKind::GetItem:
      try {
        ValuePtr r = *call_dunder(it->self, "__getitem__", {const_int(it->pos)});
        ++it->pos;
        return r;
      } catch (const UserException& e) {
        if (!e.matches(PyExc_IndexError) && !e.matches(PyExc_StopIteration)) throw;
        return std::nullopt;
      }
    case IterKind::Enumerate: {
      std::optional<ValuePtr> item = next_item(it->self);
      if (!item) return std::nullopt;
      PyRef n = PyRef::steal(PyLong_FromSize_t(it->pos++));
      PyRef count = n ? PyRef::steal(PyNumber_Add(it->items[0]->obj.get(), n.get())) : PyRef();
      if (!count) throw PythonError();
      return Value::tuple({Value::constant(count), *item});
    }
    case IterKind::Zip: {
      // As zip does: stops at the first exhausted iterator, the items already taken from
      // the ones before it in this round are dropped.
      std::vector<ValuePtr> row;
      for (const ValuePtr& sub : it->items) {
        std::optional<ValuePtr> item = next_item(sub);
        if (!item) return std::nullopt;
        row.push_back(*item);
      }
      return Value::tuple(std::move(row));
    }
  }
  TL_CHECK(false) << "unknown iterator kind";
}

std::vector<ValuePtr> Tracer::drain(const ValuePtr& it) {
  std::vector<ValuePtr> out;
  while (std::optional<ValuePtr> item = next_item(it)) out.push_back(std::move(*item));
  return out;
}

ValuePtr Tracer::enumerate_iter(const ValuePtr& iterable, const ValuePtr& start) {
  if (!start->is_const()) graph_break("unsupported_value", "enumerate start");
  PyRef first = PyRef::steal(PyNumber_Index(start->obj.get()));
  if (!first) raise_current_error("enumerate() start");
  ValuePtr inner = get_iter(iterable);
  ValuePtr it = lazy_iterator(IterKind::Enumerate);
  it->self = inner;
  it->items = {Value::constant(first)};
  if (is_lazy_iterator(inner)) return it;
  ValuePtr items = Value::of_kind(VKind::Iterator);  // materialised, as every Items iterator
  while (std::optional<ValuePtr> pair = next_item(it)) items->items.push_back(std::move(*pair));
  return items;
}

ValuePtr Tracer::zip_iter(const std::vector<ValuePtr>& iterables) {
  if (iterables.empty()) return Value::of_kind(VKind::Iterator);
  ValuePtr it = lazy_iterator(IterKind::Zip);
  bool lazy = false;
  for (const ValuePtr& a : iterables) {
    it->items.push_back(get_iter(a));
    lazy = lazy || is_lazy_iterator(it->items.back());
  }
  if (lazy) return it;
  // NOTE: materialised as before: each argument is read to its end (see the issue on
  // lazy iteration for what that changes when an iterator outlives the zip).
  std::vector<std::vector<ValuePtr>> seqs;
  size_t n = SIZE_MAX;
  for (const ValuePtr& sub : it->items) {
    seqs.push_back(drain(sub));
    n = std::min(n, seqs.back().size());
  }
  ValuePtr items = Value::of_kind(VKind::Iterator);
  for (size_t i = 0; i < n; ++i) {
    std::vector<ValuePtr> row;
    for (auto& s : seqs) row.push_back(s[i]);
    items->items.push_back(Value::tuple(std::move(row)));
  }
  return items;
}

}  // namespace tl::capture
