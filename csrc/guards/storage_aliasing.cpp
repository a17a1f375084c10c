#include "guards/storage_aliasing.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "core/errors.h"

namespace tl::guards {
namespace {

// NOTE: interned once (under the GIL, never changed after): a name made from a C string on
// every call cost as much as the call.
PyObject* interned(const char* name) {
  PyObject* s = PyUnicode_InternFromString(name);
  if (!s) throw PythonError();
  return s;  // NOTE: kept for the life of the process
}

long long storage_offset(PyObject* t) {
  static PyObject* name = interned("storage_offset");
  PyObject* argv[] = {t};
  PyRef off = PyRef::steal(
      PyObject_VectorcallMethod(name, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
  long long v = off ? PyLong_AsLongLong(off.get()) : -1;
  if (!off || (v == -1 && PyErr_Occurred())) throw PythonError();
  return v;
}

}  // namespace

long long storage_id(PyObject* t) {
  static PyObject* untyped_storage = interned("untyped_storage");
  static PyObject* cdata_name = interned("_cdata");
  PyObject* argv[] = {t};
  PyRef storage = PyRef::steal(PyObject_VectorcallMethod(
      untyped_storage, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
  PyRef cdata = storage ? PyRef::steal(PyObject_GetAttr(storage.get(), cdata_name)) : PyRef();
  if (!cdata) throw PythonError();
  long long id = PyLong_AsLongLong(cdata.get());
  if (id == -1 && PyErr_Occurred()) throw PythonError();
  return id;
}

StorageAliasing::StorageAliasing(const std::vector<ir::SourcePtr>& sources,
                                 const std::vector<PyObject*>& tensors) {
  TL_CHECK(sources.size() == tensors.size()) << "storage aliasing guard: sources and tensors";
  for (const auto& s : sources) {
    labels_.push_back(s->str());
    fetchers_.emplace_back(*s);
  }
  expected_ = pattern_of(tensors);
}

StorageAliasing::Pattern StorageAliasing::pattern_of(const std::vector<PyObject*>& tensors) {
  const size_t n = tensors.size();
  Pattern p;
  p.group.resize(n);
  p.offset.assign(n, -1);
  // NOTE: sorted by storage, each run of one storage is a group led by its first input: no
  // hash map for the few inputs a call has.
  std::vector<std::pair<long long, size_t>> by_storage(n);
  for (size_t i = 0; i < n; ++i) by_storage[i] = {storage_id(tensors[i]), i};
  std::sort(by_storage.begin(), by_storage.end());
  for (size_t run = 0; run < n;) {
    size_t end = run + 1;
    while (end < n && by_storage[end].first == by_storage[run].first) ++end;
    for (size_t k = run; k < end; ++k) {
      p.group[by_storage[k].second] = by_storage[run].second;
      if (end - run > 1)
        p.offset[by_storage[k].second] = storage_offset(tensors[by_storage[k].second]);
    }
    run = end;
  }
  return p;
}

bool StorageAliasing::check(const ir::FrameView& frame) const {
  std::vector<PyRef> held(fetchers_.size());
  std::vector<PyObject*> tensors(fetchers_.size());
  for (size_t i = 0; i < fetchers_.size(); ++i) {
    held[i] = fetchers_[i](frame);
    if (!held[i]) {
      failure_ = labels_[i] + " could not be read";
      return false;
    }
    tensors[i] = held[i].get();
  }
  if (pattern_of(tensors) == expected_) return true;
  failure_ = "tensor inputs share memory differently than when traced (" + str() + ")";
  return false;
}

std::string StorageAliasing::str() const {
  std::ostringstream os;
  os << "STORAGE_ALIASING";
  for (size_t i = 0; i < labels_.size(); ++i) {
    os << " " << labels_[i];
    if (expected_.group[i] != i) os << "~" << labels_[expected_.group[i]];
    if (expected_.offset[i] >= 0) os << "@" << expected_.offset[i];
  }
  return os.str();
}

}  // namespace tl::guards
