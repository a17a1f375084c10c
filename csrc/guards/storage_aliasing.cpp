#include "guards/storage_aliasing.h"

#include <sstream>
#include <unordered_map>

#include "core/errors.h"

namespace tl::guards {
namespace {

// The address of the tensor's StorageImpl: one per storage, also for empty ones (whose data
// pointers are all null). Borrows `t`.
long long storage_id(PyObject* t) {
  PyRef storage = PyRef::steal(PyObject_CallMethod(t, "untyped_storage", nullptr));
  PyRef cdata = storage ? PyRef::steal(PyObject_GetAttrString(storage.get(), "_cdata")) : PyRef();
  if (!cdata) throw PythonError();
  long long id = PyLong_AsLongLong(cdata.get());
  if (id == -1 && PyErr_Occurred()) throw PythonError();
  return id;
}

long long storage_offset(PyObject* t) {
  PyRef off = PyRef::steal(PyObject_CallMethod(t, "storage_offset", nullptr));
  long long v = off ? PyLong_AsLongLong(off.get()) : -1;
  if (!off || (v == -1 && PyErr_Occurred())) throw PythonError();
  return v;
}

}  // namespace

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
  Pattern p;
  std::unordered_map<long long, size_t> first;
  std::vector<size_t> members(tensors.size(), 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto [it, fresh] = first.emplace(storage_id(tensors[i]), i);
    p.group.push_back(it->second);
    ++members[it->second];
  }
  for (size_t i = 0; i < tensors.size(); ++i)
    p.offset.push_back(members[p.group[i]] > 1 ? storage_offset(tensors[i]) : -1);
  return p;
}

bool StorageAliasing::check(const ir::FrameView& frame) const {
  std::vector<PyRef> held;
  std::vector<PyObject*> tensors;
  for (size_t i = 0; i < fetchers_.size(); ++i) {
    held.push_back(fetchers_[i](frame));
    if (!held.back()) {
      failure_ = labels_[i] + " could not be read";
      return false;
    }
    tensors.push_back(held.back().get());
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
