#pragma once
#include <vector>

#include "core/py_ref.h"
#include "ir/frame_view.h"
#include "ir/source.h"

namespace tl::guards {

// Reads the value a source names from a frame. Returns a new reference, or a
// null PyRef when the value does not exist (unbound local, missing global,
// attribute error) with no Python error left set. Throws PythonError only for
// unexpected failures.
PyRef fetch(const ir::Source& source, const ir::FrameView& frame);

// One step of a source with its name interned and its key prepared once: what
// the guard tree (and compiled entries) evaluate on every call, where fetch()
// would re-create the name strings each time. Needs the GIL; not thread-safe
// beyond that (the attribute fast path caches the last type seen).
class FetchStep {
 public:
  explicit FetchStep(const ir::Source& source);  // only this step; source.base is ignored

  // Local/Closure/Global/Builtin read `frame`; Held returns its object; Attr/Item/Deref/
  // ScalarTensor read `base`
  // (borrowed, non-null). Returns a new reference, or null for a missing value
  // with no error set; throws PythonError for unexpected failures.
  PyRef apply(PyObject* base, const ir::FrameView& frame) const;

  ir::SourceKind kind() const { return kind_; }
  // Same kind, name, index and key (an equal int/str): the same step.
  bool same_as(const FetchStep& other) const;

 private:
  PyRef get_attr(PyObject* obj) const;
  PyRef get_item(PyObject* obj) const;
  PyRef deref(PyObject* obj) const;
  PyRef scalar_tensor(PyObject* number) const;

  ir::SourceKind kind_;
  int index_ = -1;
  PyRef name_;         // interned: Global, Builtin, Attr
  PyRef key_;          // Item: the key; Held: the object; ScalarTensor: (dtype, device)
  PyRef call_kwargs_;  // ScalarTensor: {"dtype": ..., "device": ...}
  bool key_is_index_ = false;
  bool view_mapping_ = false;  // Attr "mapping": a dict view's dict (get_attr)
  Py_ssize_t index_key_ = 0;
  // Attr: how the last type seen resolves attributes, valid while its
  // tp_version_tag is unchanged (0 = not cached). No reference is held: the
  // tag is unique per type, so a new type at the same address cannot match.
  mutable PyTypeObject* cached_type_ = nullptr;
  mutable unsigned int cached_tag_ = 0;
  mutable unsigned char cached_path_ = 0;
};

// A whole source as steps from the frame to the value.
class SourceFetcher {
 public:
  explicit SourceFetcher(const ir::Source& source);
  PyRef operator()(const ir::FrameView& frame) const;  // as fetch()

 private:
  std::vector<FetchStep> steps_;  // root first
};

}  // namespace tl::guards
