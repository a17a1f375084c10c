#include "frame/entry_reaper.h"

#include <algorithm>

namespace tl::frame {
namespace {

// What a callback needs. NOTE: raw pointers are safe: the weakref calling back
// is owned by the entry, which the code object's state owns, so while a
// callback can run, both are alive.
struct Watch {
  PyCodeObject* code;
  const CacheEntry* entry;
};

constexpr const char* kCapsule = "torchlite.entry_watch";

// Called by CPython (GIL held) when a watched object dies; `ref` is the weakref (borrowed).
PyObject* on_object_freed(PyObject* capsule, PyObject* ref) {
  auto* w = static_cast<Watch*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (!w) return nullptr;
  // NOTE: removing the entry drops the weakref being called; keep it until we return.
  PyRef keep = PyRef::borrow(ref);
  ExtraState* st = find_extra(w->code);
  if (!st) Py_RETURN_NONE;
  auto it = std::find_if(st->entries.begin(), st->entries.end(),
                         [&](const auto& e) { return e.get() == w->entry; });
  if (it == st->entries.end()) Py_RETURN_NONE;
  // NOTE: destroyed after erase returns: destroying an entry can run Python code.
  std::shared_ptr<CacheEntry> dead = std::move(*it);
  st->entries.erase(it);
  st->version++;
  dead.reset();
  Py_RETURN_NONE;
}

PyMethodDef g_callback_def = {"_torchlite_entry_reaper", on_object_freed, METH_O, nullptr};

}  // namespace

void watch_guarded_objects(PyCodeObject* code, CacheEntry& entry, const ir::FrameView& frame) {
  for (const auto& m : entry.guards.id_matched_locals()) {
    if (m.slot < 0 || m.slot >= frame.nlocals || !frame.locals[m.slot]) continue;
    PyRef obj = PyRef::borrow(frame.locals[m.slot]);
    if (m.via_self) obj = PyRef::steal(PyObject_GetAttrString(obj.get(), "__self__"));
    if (!obj || obj.get() != m.obj) {
      PyErr_Clear();
      continue;
    }
    auto* w = new Watch{code, &entry};
    PyRef capsule = PyRef::steal(PyCapsule_New(w, kCapsule, [](PyObject* c) {
      delete static_cast<Watch*>(PyCapsule_GetPointer(c, kCapsule));
    }));
    if (!capsule) {
      delete w;
      PyErr_Clear();
      continue;
    }
    PyRef callback = PyRef::steal(PyCFunction_New(&g_callback_def, capsule.get()));
    PyRef ref = callback ? PyRef::steal(PyWeakref_NewRef(obj.get(), callback.get())) : PyRef();
    if (!ref) {
      PyErr_Clear();  // NOTE: a type without weakrefs: its entry stays (as before)
      continue;
    }
    entry.watchers.push_back(std::move(ref));
  }
}

}  // namespace tl::frame
