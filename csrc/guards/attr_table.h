#pragma once
// ATTR_TABLE: the attributes a trace resolved through an imported module's
// __dict__ or a class's MRO (`math.pi`, `F.gelu`, `cfg.FACTOR`, `A.k`,
// `self.FACTOR` and methods found on the class, `super().k`), and those it
// found absent (`getattr(obj, "x", default)`, `hasattr`).
//
// NOTE: one guard per owner, not one per attribute: while the owner's version
// is unchanged (the module dict's ma_version_tag; the class's tp_version_tag,
// which CPython clears whenever the class or any class in its MRO is written)
// the check is one integer compare, whatever the number of names. Only after
// the owner changed are the names looked up again; if each still resolves to
// what the trace saw, the new version is remembered, so a module-level counter
// written on every call costs lookups, not a recompile. Rejected: whole-dict
// versions alone (any unrelated write recompiles, up to the cache limit) and a
// guard per attribute (a fetch each, on every call).
#include <Python.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/py_ref.h"

namespace tl::guards {

struct LeafGuard;

class AttrTable {
 public:
  enum class Owner {
    Module,    // the value is a module: its __dict__
    Dict,      // the value is a dict (another module's globals)
    Class,     // the value is a class: lookups through its MRO
    Instance,  // the value is an instance: lookups through type(value)'s MRO
  };
  // Records the owner's version now. `v` borrowed.
  AttrTable(Owner owner, PyObject* v);
  ~AttrTable();

  // `name` (borrowed str) resolved to `found` (borrowed; null: absent). For a
  // class owner, `after` (borrowed, may be null) starts the MRO walk after
  // that class, as super() does. Adding a name twice keeps the first.
  void add(PyObject* name, PyObject* found, PyObject* after = nullptr);

  Owner owner() const { return owner_; }
  bool check(PyObject* v) const;  // borrows v; throws PythonError if a lookup raised
  std::string failure(PyObject* v, const std::string& src) const;
  std::string str(const std::string& src) const;

 private:
  struct Entry;
  // What `e` resolves to on `v` now (borrowed), or null.
  PyObject* lookup(PyObject* v, const Entry& e) const;
  const Entry* first_changed(PyObject* v) const;
  uint64_t version_of(PyObject* v) const;  // 0: none (the slow path runs)

  Owner owner_;
  std::vector<Entry> entries_;
  // The owner's version when every entry last matched. Written by the const
  // check(): the GIL serialises every call on a GuardSet.
  mutable uint64_t version_ = 0;
};

// The version CPython gives a dict (ma_version_tag: unique across dicts, bumped
// on every store). `dict` borrowed.
uint64_t dict_version_of(PyObject* dict);

}  // namespace tl::guards
