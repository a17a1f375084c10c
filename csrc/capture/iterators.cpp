// iter() and next() over symbolic values, and dict views (keys/values/items).
#include "capture/deque.h"
#include "capture/graph_break.h"
#include "capture/lazy_iter.h"
#include "capture/py_helpers.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

namespace {

// The Python function `name` of the object's type, or null (borrowed).
PyObject* python_slot(const ValuePtr& v, const char* name) {
  if (!v->obj) return nullptr;
  PyRef key = PyRef::steal(PyUnicode_FromString(name));
  if (!key) throw PythonError();
  PyObject* fn = _PyType_Lookup(Py_TYPE(v->obj.get()), key.get());
  return fn && PyFunction_Check(fn) ? fn : nullptr;
}

// A user-defined iterator: each step inlines its __next__ when CPython would call it, between
// the loop body's iterations, so a `break`, zip()'s early stop or state the body reads see
// what eager sees; the StopIteration it raises ends the iteration.
class UserIter : public LazyIter {
 public:
  explicit UserIter(ValuePtr obj) : obj_(std::move(obj)) {}
  ValuePtr next(Tracer& t) override {
    try {
      return *t.call_dunder(obj_, "__next__", {});
    } catch (const UserException& e) {
      if (!e.matches(PyExc_StopIteration)) throw;
      return nullptr;
    }
  }

 private:
  ValuePtr obj_;
};

// The old sequence protocol: __getitem__(0), (1), ... until IndexError or StopIteration.
class GetItemIter : public LazyIter {
 public:
  explicit GetItemIter(ValuePtr obj) : obj_(std::move(obj)) {}
  ValuePtr next(Tracer& t) override {
    if (!obj_) return nullptr;
    try {
      return *t.call_dunder(obj_, "__getitem__", {const_int(static_cast<long long>(pos_++))});
    } catch (const UserException& e) {
      if (!e.matches(PyExc_IndexError) && !e.matches(PyExc_StopIteration)) throw;
      obj_ = nullptr;
      return nullptr;
    }
  }

 private:
  ValuePtr obj_;
  size_t pos_ = 0;
};

}  // namespace

bool detail::is_user_iterator(const ValuePtr& v) {
  return v->kind == VKind::Object && python_slot(v, "__next__") != nullptr;
}

// iter() of an object of a user-defined class.
ValuePtr Tracer::object_iter(const ValuePtr& v) {
  if (python_slot(v, "__iter__")) {
    ValuePtr r = *call_dunder(v, "__iter__", {});
    if (r->kind == VKind::Iterator) return r;
    if (is_user_iterator(r)) return lazy_iterator(std::make_shared<UserIter>(r), r->type_name());
    // As CPython checks what __iter__ returned: a list, say, is not an iterator.
    if (!r->obj || !PyIter_Check(r->obj.get()))
      raise_user(PyExc_TypeError, "iter() returned non-iterator of type '" + r->type_name() + "'");
    graph_break("custom_dunder",
                "iterating the " + r->type_name() + " returned by " + v->type_name() + ".__iter__");
  }
  if (!Py_TYPE(v->obj.get())->tp_iter && !v->mapping && python_slot(v, "__getitem__"))
    return lazy_iterator(std::make_shared<GetItemIter>(v), "iterator");
  if (!v->mapping) graph_break("unsupported_iteration", "iteration over a " + v->type_name());
  return get_iter(v->mapping);
}

ValuePtr Tracer::get_iter(const ValuePtr& v) {
  switch (v->kind) {
    case VKind::Iterator:
      return v;
    case VKind::List:
      return lazy_iterator(list_iter(v), "list_iterator");
    case VKind::Deque:
      return lazy_iterator(deque_iter(v), "_collections._deque_iterator");
    case VKind::Dict:
      return lazy_iterator(dict_iter(v, "keys"), "dict_keyiterator");
    case VKind::DictView:
      return lazy_iterator(dict_iter(v->self, v->method_name), "dict_view_iterator");
    case VKind::Object:
      return object_iter(v);
    default:
      break;
  }
  ValuePtr it = Value::of_kind(VKind::Iterator);
  it->items = iterate(v);
  return it;
}

ValuePtr Tracer::iter_next(const ValuePtr& it) {
  TL_CHECK(it->kind == VKind::Iterator) << "next() of a non-iterator";
  if (it->pos < it->items.size()) return it->items[it->pos++];
  if (!it->lazy) return nullptr;
  // NOTE: held across the call: the source may drop its own last reference when it finishes.
  std::shared_ptr<LazyIter> src = it->lazy;
  ValuePtr v = src->next(*this);
  if (!v && it->lazy == src) it->lazy = nullptr;
  return v;
}

// keys()/values()/items() of a Dict value: a live view over it, not a snapshot.
ValuePtr detail::dict_view(const ValuePtr& dict, const std::string& what) {
  ValuePtr v = Value::of_kind(VKind::DictView);
  v->self = dict;
  v->method_name = what;
  return v;
}

PyObject* detail::dict_view_type(const ValuePtr& view) {  // borrowed
  if (view->method_name == "values") return reinterpret_cast<PyObject*>(&PyDictValues_Type);
  if (view->method_name == "items") return reinterpret_cast<PyObject*>(&PyDictItems_Type);
  return reinterpret_cast<PyObject*>(&PyDictKeys_Type);
}

// The view's current contents, as iterating it now would give them.
std::vector<ValuePtr> detail::dict_view_items(const ValuePtr& view) {
  const ValuePtr& d = view->self;
  std::vector<ValuePtr> out;
  for (size_t i = 0; i < d->keys.size(); ++i) {
    ValuePtr key = Value::constant(d->keys[i]);
    if (view->method_name == "values")
      out.push_back(d->items[i]);
    else if (view->method_name == "items")
      out.push_back(Value::tuple({key, d->items[i]}));
    else
      out.push_back(key);
  }
  return out;
}

}  // namespace tl::capture
