// iter() and next() over symbolic values, and dict views (keys/values/items).
#include "capture/graph_break.h"
#include "capture/lazy_iter.h"
#include "capture/py_helpers.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

ValuePtr Tracer::get_iter(const ValuePtr& v) {
  switch (v->kind) {
    case VKind::Iterator:
      return v;
    case VKind::List:
      return lazy_iterator(list_iter(v), "list_iterator");
    case VKind::Dict:
      return lazy_iterator(dict_iter(v, "keys"), "dict_keyiterator");
    case VKind::DictView:
      return lazy_iterator(dict_iter(v->self, v->method_name), "dict_view_iterator");
    case VKind::Object:
      if (auto r = call_dunder(v, "__iter__", {})) {
        if ((*r)->kind == VKind::Iterator) return *r;
        if ((*r)->kind == VKind::Object && call_dunder(*r, "__next__", {}).has_value())
          graph_break("unsupported_value", "a Python iterator object stepped at trace time");
        ValuePtr it = Value::of_kind(VKind::Iterator);
        it->items = iterate(*r);
        return it;
      }
      break;
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
