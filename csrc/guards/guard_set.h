#pragma once
// The guards of one cache entry: built by capture while tracing, evaluated in
// C++ on every call before the compiled entry may run.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/py_ref.h"
#include "guards/attr_table.h"
#include "guards/size_relations.h"
#include "guards/tensor_match.h"
#include "ir/frame_view.h"
#include "ir/source.h"
#include "ir/sym_expr.h"

namespace tl::guards {

class GuardSet {
 public:
  GuardSet();
  ~GuardSet();
  GuardSet(GuardSet&&) noexcept;
  GuardSet& operator=(GuardSet&&) noexcept;

  // Builders. Each borrows its PyObject* argument (keeping a reference where
  // it must). Adding the same guard on the same source twice is a no-op.
  void add_type_match(ir::SourcePtr s, PyObject* type);  // type(v) is type
  // LeafGuard::number_type
  void add_number_type(ir::SourcePtr s, PyObject* number, bool narrow = false);
  void add_id_match(ir::SourcePtr s, PyObject* obj);        // v is obj
  void add_equals_match(ir::SourcePtr s, PyObject* value);  // type(v) is type(value) and v == value
  // type, dtype, device, sizes, strides and requires_grad of a real tensor.
  void add_tensor_match(ir::SourcePtr s, PyObject* tensor);
  // A size-generic entry (frame/size_generic.h): the TENSOR_MATCH on `s` lets `dims` change
  // (TensorMatch::with_dynamic_dims). False when `s` has no TENSOR_MATCH.
  bool make_sizes_dynamic(const ir::SourcePtr& s, std::vector<TensorMatch::DynamicDim> dims);
  // Every TENSOR_MATCH on a contiguous tensor lets its sizes >= `min_size` change (to any size
  // from `min_size` up): for an entry whose code does not depend on them (one that runs the
  // frame eagerly: min_size 0). Returns how many changed.
  size_t make_all_sizes_dynamic(int64_t min_size = 2);
  // The same for the TENSOR_MATCHes whose source is none of `kept` (by str()). `any_strides`:
  // the entry's ops read none of them, so their strides are not checked either (a transposed
  // view a resume function takes and does not use relaxes too).
  size_t make_sizes_dynamic_except(const std::set<std::string>& kept, int64_t min_size = 2,
                                   bool any_strides = false);
  // SIZE_RELATION: the relations the trace relied on between its inputs' sizes, checked after
  // the other guards (size_relations.h). Replaces any set before.
  void set_size_relations(SizeRelations relations);
  bool has_size_relations() const;
  // The dict (e.g. a module's __dict__) has not been written since now.
  void add_dict_version(ir::SourcePtr s, PyObject* dict);
  // The dict (or dict subclass) at `s` has the keys it has now, in the same order. Borrows.
  void add_dict_keys(ir::SourcePtr s, PyObject* dict);
  // The DICT_VERSION guard on the dict at `dict_src` (a module's __dict__) checks item `key` by
  // type only: a number the trace reads per call (a counter made a scalar input).
  void relax_dict_item(const ir::SourcePtr& dict_src, PyObject* key);
  // A Python int or float the trace read as a constant from an attribute or a global (`s`):
  // when a later call misses with another number there, changed_numbers names it, and the
  // next capture takes it per call (a counter `self.step += 1`), not as a constant.
  void note_number_read(ir::SourcePtr s, PyObject* value);
  // The noted numbers (by source) that now hold another number of the same type.
  std::vector<std::string> changed_numbers(const ir::FrameView& frame) const;
  // len(v) == n for a list/tuple/dict the trace iterated over.
  void add_length_match(ir::SourcePtr s, Py_ssize_t n);
  // `owner.<name>` (owner is the object at `s` now) is an empty dict: a
  // module's hook dicts. Checked as a lookup in owner's instance __dict__ when
  // the attribute lives there; otherwise as len(s.<name>) == 0.
  void add_empty_dict_attr(ir::SourcePtr s, PyObject* owner, const char* name);
  // (a is b) == same: an identity test the trace answered (two tensor inputs
  // reached through different sources may be one object).
  void add_identity(ir::SourcePtr a, ir::SourcePtr b, bool same);
  // SIZE_EQUALS: the value at `n` is an int (exactly) equal to `expr`, whose symbol k is size
  // sizes[k].second of the tensor at sizes[k].first: a resume function's int argument its trace
  // treats as that expression of sizes (a size handed on at a graph break), checked after the
  // tree.
  void add_int_equals_sizes(ir::SourcePtr n, ir::SymExprPtr expr,
                            std::vector<std::pair<ir::SourcePtr, int>> sizes);
  // The tensors at `sources` (`tensors`: the real ones now, borrowed) share storages as they
  // do now (storage_aliasing.h).
  void add_storage_aliasing(const std::vector<ir::SourcePtr>& sources,
                            const std::vector<PyObject*>& tensors);
  // `owner.<name>` (owner is the object at `s` now, borrowed) resolved to
  // `found` (borrowed; null: absent) through the owner's module dict or class
  // MRO; `after` as in AttrTable::add. All such reads of one owner share one
  // ATTR_TABLE guard. `name` borrowed (a str).
  void add_attr(ir::SourcePtr s, AttrTable::Owner owner, PyObject* owner_obj, PyObject* name,
                PyObject* found, PyObject* after = nullptr);
  // `name` (borrowed str) is not in the instance __dict__ of the value at `s`.
  void add_no_instance_attr(ir::SourcePtr s, PyObject* name);
  // The set at `s` holds the elements it holds now, in the same order. Borrows.
  void add_set_match(ir::SourcePtr s, PyObject* set);
  // The function at `s` (borrowed) keeps its __defaults__ and __kwdefaults__ objects.
  void add_function_defaults(ir::SourcePtr s, PyObject* fn);
  // fn() (a held torch state query, borrowed) still returns `result` (a constant, borrowed).
  void add_call_result(PyObject* fn, PyObject* result);
  // `name` is not a global of the frame (a builtin the trace used is not shadowed).
  void add_global_absent(const std::string& name);
  // Grad mode, default dtype and other global torch state as they are now.
  void add_global_state();

  // True when every guard passes. Throws PythonError only if evaluating a
  // guard raised unexpectedly.
  // `global_state`: false skips grad mode, default dtype and the like (after a
  // run, they are the state the frame left, not the state its next call starts in).
  // `inputs` (null: not wanted): on a pass, the values of the sources bind_inputs() named, as
  // the guards fetched them (a null PyRef for one no guard reads); emptied on a failure.
  bool check(const ir::FrameView& frame, bool global_state = true,
             std::vector<PyRef>* inputs = nullptr) const;
  // The graph inputs' sources, in order: check() hands out the value each one's guard node
  // fetched, so a call reads each input (a module's parameters, mostly) once, not once for
  // the guards and again for the graph. Returns how many have a node.
  size_t bind_inputs(const std::vector<ir::SourcePtr>& sources);
  // After a failed check(): the first failing guard, readable, e.g.
  // "tensor L['x'] size mismatch at index 0: expected 8, got 16".
  std::string failure_reason() const;
  // After a failed check(): the failing value was read from an nn.Module matched by identity
  // (a model's own state, which outlives the call), not from an argument or a global the
  // caller may reset or build anew each time.
  bool failed_in_kept_object() const;
  // One guard a line, for guards.txt and explain().
  std::string str() const;
  size_t size() const;
  // Every ID_MATCH on a plain local such as L['self'], or on a bound method's
  // L['fn'].__self__. The frame hook's cache-size limit counts only entries
  // whose ID-matched objects are the current frame's, so one forward() shared
  // by twelve layer instances is not mistaken for a recompile loop.
  struct IdMatchedLocal {
    int slot = -1;              // fast-local slot
    bool via_self = false;      // the object is that local's __self__
    const void* obj = nullptr;  // address at trace time (compared, never dereferenced)
    PyRef ref;                  // a weakref to it, or null where its type has none
  };
  const std::vector<IdMatchedLocal>& id_matched_locals() const;
  // Some ID-matched local (above) has been freed: the entry can never match again. A frame
  // whose entries die this way is called with new objects each time (a module built in the
  // caller's forward, `self` in __init__).
  bool id_matched_local_freed() const;

 private:
  bool check_tree(const ir::FrameView& frame, bool global_state, std::vector<PyRef>* inputs) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tl::guards
