#pragma once
// One guard on one value (the value its node in the guard tree fetched).
#include <Python.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/py_ref.h"
#include "guards/attr_table.h"
#include "guards/dict_snapshot.h"
#include "guards/tensor_match.h"

namespace tl::guards {

enum class GuardKind {
  TypeMatch,
  IdMatch,
  EqualsMatch,
  TensorMatch,
  DictVersion,
  LengthMatch,
  EmptyDictAttr,
  AttrTable,         // see attr_table.h
  NoInstanceAttr,    // `name` is not in the value's instance __dict__
  SetMatch,          // a set with the same elements in the same iteration order
  FunctionDefaults,  // a function whose __defaults__ / __kwdefaults__ are the same objects
  CallResult,        // calling the value (a state query of torch's) returns an equal constant
  DictKeys,          // a dict (or dict subclass) with the same keys in the same order
  NumberType,        // type(v) is float, or type(v) is int and v fits in an int64: a number a
                     // graph takes as a 0-d tensor input (capture/scalar_inputs.h); with
                     // `narrow`, a finite float whose int() fits in an int64, or an int
                     // within +-2**31 (int arithmetic on it in int64 cannot overflow)
};

struct LeafGuard {
  GuardKind kind;
  // TypeMatch: the type. IdMatch: a weakref to the object, or the object when
  // its type has no weakrefs. EqualsMatch: the constant. EmptyDictAttr: the
  // interned attribute name. NoInstanceAttr: the interned name. SetMatch: a
  // tuple of the elements. FunctionDefaults: __defaults__ (may be null).
  // CallResult: the result. DictKeys: a tuple of the keys.
  PyRef ref;
  PyRef ref2;             // FunctionDefaults: __kwdefaults__ (may be null)
  bool by_value = false;  // SetMatch: elements compared by value (all constants), else identity
  std::shared_ptr<guards::AttrTable> table;  // AttrTable (shared: LeafGuard copies)
  PyObject* id = nullptr;  // IdMatch: the object's address (compare only, never dereferenced)
  bool weak = false;       // IdMatch: `ref` is a weakref
  // DictVersion: the version the items last matched at (DictSnapshot: written by the const
  // check(); the GIL serialises every call on a GuardSet).
  mutable uint64_t version = 0;
  std::shared_ptr<const DictSnapshot> snapshot;       // DictVersion (shared: LeafGuard copies)
  Py_ssize_t length = 0;                              // LengthMatch
  bool narrow = false;                                // NumberType
  std::shared_ptr<const guards::TensorMatch> tensor;  // TensorMatch (shared: LeafGuard copies)
  // EmptyDictAttr: the names after `ref` (interned), checked by the same guard: a module's
  // four hook dicts are one guard, not four.
  std::vector<PyRef> more_names;

  static LeafGuard type_match(PyObject* type);                  // borrows
  static LeafGuard number_type(PyObject* number, bool narrow);  // borrows a float or int
  static LeafGuard id_match(PyObject* obj);                     // borrows
  static LeafGuard equals_match(PyObject* value);   // borrows; throws Error for unsupported types
  static LeafGuard tensor_match(PyObject* tensor);  // borrows
  static LeafGuard dict_version(PyObject* dict);    // borrows; keeps no reference
  static LeafGuard length_match(Py_ssize_t n);
  // EQUALS_MATCH for a constant (see equals_match), else ID_MATCH. Borrows.
  static LeafGuard value_match(PyObject* value);
  static LeafGuard attr_table(AttrTable::Owner owner, PyObject* v);  // borrows
  static LeafGuard no_instance_attr(PyObject* name);                 // borrows an interned str
  static LeafGuard set_match(PyObject* set);                         // borrows; keeps the elements
  static LeafGuard function_defaults(PyObject* fn);                  // borrows; keeps the defaults
  static LeafGuard call_result(PyObject* result);  // borrows a constant (see equals_match)
  static LeafGuard dict_keys(PyObject* dict);      // borrows; keeps the keys (str/int constants)
  // The value's instance __dict__ holds `name` (borrowed, interned), an empty
  // dict: a module's hook dicts, read without fetching each as a node. Null
  // when `owner` (borrowed) does not hold one there now, or a data descriptor
  // of its type would shadow it: then the guard would not say what
  // `owner.<name>` reads.
  static std::optional<LeafGuard> empty_dict_attr(PyObject* owner, PyObject* name);

  // Borrows v (non-null). Throws PythonError only for unexpected failures.
  bool check(PyObject* v) const;
  // After check(v) failed: readable reason naming `src`.
  std::string failure(PyObject* v, const std::string& src) const;
  std::string str(const std::string& src) const;  // one line for guards.txt
  bool same_as(const LeafGuard& o) const;         // dedup
};

// type(a) is type(b) and a == b, recursively for tuples; floats also by sign
// (0.0 vs -0.0) and NaN equals NaN. Throws PythonError if == raised.
bool equals_exact(PyObject* a, PyObject* b);
// A numpy scalar number (numpy.float64, numpy.int64, numpy.bool_): compared by value, as
// EQUALS_MATCH compares Python numbers (a new one per call must not fail an identity guard).
bool is_numpy_number(PyObject* v);
// The value is compared by value (EQUALS_MATCH), not identity: None, bool, int, float, complex,
// str, bytes, torch dtype/device/layout/memory_format, and tuples, slices, frozensets of those.
bool compared_by_value(PyObject* v);

}  // namespace tl::guards
