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
  PyRef dict_read(PyObject* dict) const;  // Global/Builtin/Item on a dict: through the memo
  bool memo_valid(PyObject* dict) const;
  void remember(PyObject* dict, PyObject* value, PyObject* const* subs = nullptr,
                int n_subs = 0) const;
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
  // The value this step read last, while the dicts it was read from are unchanged.
  // NOTE: a dict's version tag is unique across dicts and bumped on every store
  // (dict_version_of), so an equal (dict, version) pair is the same dict holding the same
  // items: the value it held then (borrowed: the dict still holds it) is the value now. An
  // attribute is remembered only when it came from the instance __dict__ or an nn.Module's
  // _parameters/_buffers/_modules (the type's lookup is covered by cached_tag_), never from
  // a descriptor: a property or a bound method is computed anew on each read. Saves the
  // type's MRO walk and up to four dict lookups per attribute of a module on every call.
  struct DictSeen {
    PyObject* dict = nullptr;  // compared, dereferenced only while its holder is unchanged
    uint64_t version = 0;
  };
  mutable DictSeen memo_dict_;     // the dict the value (or the sub-dicts) came from
  mutable DictSeen memo_subs_[3];  // Attr on a module: the sub-dicts consulted, in order
  mutable int memo_n_subs_ = 0;
  mutable PyObject* memo_value_ = nullptr;  // null: nothing remembered
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
