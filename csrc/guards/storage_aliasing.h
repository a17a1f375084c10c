#pragma once
// Which tensor inputs share memory. The trace modelled the inputs it saw: one object reached
// through two names as one value, views of one storage at their real offsets (so an in-place
// op whose operand partly overlaps what it writes is seen and left to eager). A graph that
// mutates tensors is valid only for inputs that share memory the same way.
#include <Python.h>

#include <string>
#include <vector>

#include "core/py_ref.h"
#include "guards/fetch.h"
#include "ir/frame_view.h"
#include "ir/source.h"

namespace tl::guards {

// The address of the tensor's StorageImpl (`t.untyped_storage()._cdata`): one per storage,
// also for empty ones (whose data pointers are all null). Borrows `t`; throws PythonError.
long long storage_id(PyObject* t);

class StorageAliasing {
 public:
  // `sources` and `tensors` (borrowed, the real inputs now) in the same order.
  StorageAliasing(const std::vector<ir::SourcePtr>& sources, const std::vector<PyObject*>& tensors);
  // True when the tensors at the sources share storages as they did. Throws PythonError only
  // for unexpected failures.
  bool check(const ir::FrameView& frame) const;
  std::string str() const;  // one line for guards.txt
  const std::string& failure() const { return failure_; }

 private:
  // For each input: the index of the first input on its storage, and its storage offset when
  // another input shares the storage (-1 otherwise).
  struct Pattern {
    std::vector<size_t> group;
    std::vector<long long> offset;
    bool operator==(const Pattern&) const = default;
  };
  static Pattern pattern_of(const std::vector<PyObject*>& tensors);

  std::vector<std::string> labels_;
  std::vector<SourceFetcher> fetchers_;
  Pattern expected_;
  mutable std::string failure_;  // written by the const check(): the GIL serialises calls
};

}  // namespace tl::guards
