// Methods of tensors, lists, dicts and tuples.
#include <algorithm>

#include "capture/constant_fold.h"
#include "capture/graph_break.h"
#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

ValuePtr Tracer::call_method_on(const ValuePtr& self, const std::string& name,
                                std::vector<ValuePtr>& args, KwArgs& kwargs) {
  if (self->is_tensor()) {
    if (name == "get_device") {
      PyRef idx = PyRef::steal(PyObject_GetAttrString(self->device.get(), "index"));
      if (!idx) throw PythonError();
      return idx.get() == Py_None ? const_int(-1) : Value::constant(idx);
    }
    if (name == "type" && args.empty() && kwargs.empty())
      graph_break("unsupported_callable", "Tensor.type() without arguments");
    if (name == "__len__" || name == "__bool__") {
      if (name == "__bool__" && args.empty())
        if (auto r = folded_call(ctx_, self, "__bool__")) return *r;
      graph_break("data_dependent_op", "Tensor." + name);
    }
    std::vector<ValuePtr> all{self};
    all.insert(all.end(), args.begin(), args.end());
    return ctx_.call_op(nullptr, name, all, kwargs);
  }
  if (self->kind == VKind::Tuple && self->named_type && name == "_replace" && args.empty()) {
    PyRef fields = PyRef::steal(PyObject_GetAttrString(self->named_type.get(), "_fields"));
    if (!fields || !PyTuple_Check(fields.get())) throw PythonError();
    ValuePtr out = Value::tuple(self->items);
    out->named_type = self->named_type;
    std::vector<std::string> unknown;
    for (auto& [k, v] : kwargs) {
      Py_ssize_t i = 0;
      while (i < PyTuple_GET_SIZE(fields.get()) && utf8(PyTuple_GET_ITEM(fields.get(), i)) != k)
        ++i;
      if (i == PyTuple_GET_SIZE(fields.get()) || i >= static_cast<Py_ssize_t>(out->items.size()))
        unknown.push_back("'" + k + "'");
      else
        out->items[i] = v;
    }
    if (!unknown.empty()) {
      std::string names;
      for (const auto& u : unknown) names += (names.empty() ? "" : ", ") + u;
      raise_user(PyExc_ValueError, "Got unexpected field names: [" + names + "]");
    }
    return out;
  }
  if (self->kind == VKind::List) {
    if (name == "append" && args.size() == 1) {
      self->items.push_back(args[0]);
      mark_mutated(self);
      return none();
    }
    if (name == "extend" && args.size() == 1 && args[0]->kind == VKind::Iterator) {
      // NOTE: one item at a time, as CPython does: the iterator may read the list.
      ValuePtr it = args[0];
      while (ValuePtr v = iter_next(it)) {
        self->items.push_back(std::move(v));
        mark_mutated(self);
      }
      return none();
    }
    if (name == "extend" && args.size() == 1) {
      auto items = iterate(args[0]);
      self->items.insert(self->items.end(), items.begin(), items.end());
      mark_mutated(self);
      return none();
    }
    if (name == "insert" && args.size() == 2 && args[0]->is_const()) {
      Py_ssize_t i = PyLong_AsSsize_t(args[0]->obj.get());
      Py_ssize_t n = self->items.size();
      if (i < 0) i = std::max<Py_ssize_t>(0, i + n);
      i = std::min(i, n);
      self->items.insert(self->items.begin() + i, args[1]);
      mark_mutated(self);
      return none();
    }
    if (name == "pop" && args.size() <= 1) {
      if (self->items.empty()) raise_user(PyExc_IndexError, "pop from empty list");
      Py_ssize_t i = args.empty() ? -1 : PyLong_AsSsize_t(args[0]->obj.get());
      i = normalize_index(PyRef::steal(PyLong_FromSsize_t(i)).get(), self->items.size(),
                          "pop index out of range");
      ValuePtr v = self->items[i];
      self->items.erase(self->items.begin() + i);
      mark_mutated(self);
      return v;
    }
    if (name == "clear") {
      self->items.clear();
      mark_mutated(self);
      return none();
    }
    if (name == "copy") return Value::list(self->items);
    if (name == "sort" && args.empty()) {
      // sorted() over a copy (the same key and order rules), then the list takes its order.
      PyRef sorted = PyRef::steal(PyObject_GetAttrString(torch_api().builtins.get(), "sorted"));
      if (!sorted) throw PythonError();
      ValuePtr r = call(Value::constant(sorted), {Value::list(self->items)}, kwargs);
      self->items = iterate(r);
      mark_mutated(self);
      return none();
    }
    if (name == "reverse") {
      std::reverse(self->items.begin(), self->items.end());
      mark_mutated(self);
      return none();
    }
  }
  if (self->kind == VKind::Dict) {
    auto key_of = [&](size_t i) {
      if (args.size() > i) args[i] = key_value(ctx_, args[i]);
      if (args.size() <= i || !args[i]->is_const())
        graph_break("unsupported_dict_key", "dict key must be a constant");
      return args[i]->obj.get();
    };
    if (name == "get") {
      int i = dict_find(self, key_of(0));
      if (i >= 0) return self->items[i];
      return args.size() > 1 ? args[1] : none();
    }
    if ((name == "keys" || name == "values" || name == "items") && args.empty())
      return dict_view(self, name);
    if (name == "__contains__") return const_bool(dict_find(self, key_of(0)) >= 0);
    if (name == "__getitem__") return subscript(self, args.at(0));
    if (name == "pop") {
      int i = dict_find(self, key_of(0));
      if (i < 0) {
        if (args.size() > 1) return args[1];
        raise_user_arg(PyExc_KeyError, key_of(0), "KeyError in dict.pop");
      }
      ValuePtr v = self->items[i];
      self->keys.erase(self->keys.begin() + i);
      self->items.erase(self->items.begin() + i);
      mark_mutated(self);
      return v;
    }
    if (name == "popitem" && args.empty() && kwargs.empty()) {  // the last pair, LIFO
      if (self->keys.empty()) raise_user(PyExc_KeyError, "popitem(): dictionary is empty");
      ValuePtr pair = Value::tuple({Value::constant(self->keys.back()), self->items.back()});
      self->keys.pop_back();
      self->items.pop_back();
      mark_mutated(self);
      return pair;
    }
    if (name == "__delitem__" && args.size() == 1) {  // del d[k]
      int i = dict_find(self, key_of(0));
      if (i < 0) raise_user_arg(PyExc_KeyError, key_of(0), "KeyError in del d[key]");
      self->keys.erase(self->keys.begin() + i);
      self->items.erase(self->items.begin() + i);
      mark_mutated(self);
      return none();
    }
    if (name == "setdefault") {
      int i = dict_find(self, key_of(0));
      if (i >= 0) return self->items[i];
      ValuePtr v = args.size() > 1 ? args[1] : none();
      self->keys.push_back(args[0]->obj);
      self->items.push_back(v);
      mark_mutated(self);
      return v;
    }
    if (name == "update") {
      std::vector<std::pair<PyRef, ValuePtr>> pairs;
      if (!args.empty()) {
        if (args[0]->kind == VKind::Dict) {
          for (size_t i = 0; i < args[0]->keys.size(); ++i)
            pairs.emplace_back(args[0]->keys[i], args[0]->items[i]);
        } else if (args[0]->is_const() && PyDict_CheckExact(args[0]->obj.get())) {
          PyObject *k, *v;  // borrowed
          Py_ssize_t pos = 0;
          while (PyDict_Next(args[0]->obj.get(), &pos, &k, &v))
            pairs.emplace_back(PyRef::borrow(k), Value::constant(PyRef::borrow(v)));
        } else if (args[0]->is_sequence() || args[0]->kind == VKind::Iterator) {
          for (auto& pair : iterate(args[0])) {  // update([(k, v), ...])
            std::vector<ValuePtr> kv;
            if (!as_items(pair, kv) || kv.size() != 2 || !kv[0]->is_const())
              graph_break("unsupported_dict_key",
                          "dict.update from items that are not (key, value) "
                          "pairs with constant keys");
            pairs.emplace_back(kv[0]->obj, kv[1]);
          }
        } else {
          graph_break("unsupported_operand", "dict.update with a " + args[0]->type_name(),
                      "pass a dict or a list of (key, value) pairs");
        }
      }
      for (auto& [k, v] : kwargs)
        pairs.emplace_back(PyRef::steal(PyUnicode_FromString(k.c_str())), v);
      for (auto& [k, v] : pairs) {
        int i = dict_find(self, k.get());
        if (i >= 0)
          self->items[i] = v;
        else {
          self->keys.push_back(k);
          self->items.push_back(v);
        }
      }
      mark_mutated(self);
      return none();
    }
    if (name == "copy") {
      ValuePtr d = Value::of_kind(VKind::Dict);
      d->keys = self->keys;
      d->items = self->items;
      return d;
    }
  }
  if (self->kind == VKind::Tuple && self->named_type &&
      self->named_type.get() == torch_api().size_type.get() && name == "numel" && args.empty() &&
      kwargs.empty()) {
    // torch.Size.numel(): the product of the sizes, symbolic ones kept as expressions.
    ValuePtr n = const_int(1);
    for (const auto& d : self->items) n = binary_op(operator_fn("mul"), n, d);
    return n;
  }
  if (self->is_sequence() && (name == "count" || name == "index")) {
    PyRef t = const_tuple(self);
    if (t && all_const(args, kwargs)) {
      PyRef m = PyRef::steal(PyObject_GetAttrString(t.get(), name.c_str()));
      return call_pure(ctx_, m.get(), args, kwargs);
    }
  }
  if (self->kind == VKind::Set) return call_set_method(self, name, args);
  if (self->kind == VKind::Deque) return call_deque_method(self, name, args, kwargs);
  if (auto r = created_object_method(self, name, args, kwargs)) return *r;
  if (self->kind == VKind::Module || self->kind == VKind::Object) {
    // A C-level method of a traced object (e.g. dict methods of a subclass).
    graph_break("unsupported_callable", "method " + name + " of " + self->type_name());
  }
  graph_break("unsupported_callable", self->type_name() + "." + name + "()");
}

}  // namespace tl::capture
