#pragma once
// DICT_VERSION's slow path: the dict's items as the trace saw them.
//
// NOTE: a dict's version tag changes on every store, even one that writes back
// the value already there (`self.seq_len = n` in a forward, a cache entry set
// again). A guard on the version alone then fails on every call and the frame
// recompiles until the cache limit. When the version differs, the items are
// compared instead (the same keys, in any order, each value the same object,
// or an equal constant); if they match, the guard passes and remembers the new
// version, so the next call is one integer compare again.
#include <Python.h>

#include <vector>

#include "core/py_ref.h"

namespace tl::guards {

class DictSnapshot {
 public:
  explicit DictSnapshot(PyObject* dict);  // borrows a dict; throws PythonError
  // `dict` (borrowed) holds the same items now. Throws PythonError only if a
  // comparison raised.
  bool matches(PyObject* dict) const;
  // A copy whose item `key` (borrowed) matches any value of its type now.
  DictSnapshot with_type_only(PyObject* key) const;

 private:
  // One item. A constant value is kept (compared by value); another value is
  // kept through a weakref where its type allows one, else by address and type
  // only (a dict such as a module's _parameters), so the snapshot keeps no
  // model alive.
  struct Item {
    PyRef key;
    PyRef value;  // a constant, or a weakref (weak), or null (address only)
    bool weak = false;
    const void* address = nullptr;
    PyTypeObject* type = nullptr;  // NOTE: types of address-only values are builtins (immortal)
    bool type_only = false;        // with_type_only: any value of `type`
  };
  // `v` (borrowed) is the item's value: the same object, or an equal constant.
  static bool same_value(const Item& item, PyObject* v);
  DictSnapshot() = default;
  std::vector<Item> items_;
};

}  // namespace tl::guards
