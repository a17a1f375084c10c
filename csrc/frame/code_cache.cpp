#include "frame/code_cache.h"

#include <algorithm>
#include <unordered_set>

#include "core/errors.h"

namespace tl::frame {
namespace {

uint64_t g_epoch = 1;
Py_ssize_t g_extra_index = -1;
// Every code object's state, so reset() can drop entries at once (their kernels' code is
// freed with them) instead of when each code runs next. Guarded by the GIL.
std::unordered_set<ExtraState*> g_states;

// Called by CPython when the code object dies (with the GIL held).
void free_extra(void* p) {
  g_states.erase(static_cast<ExtraState*>(p));
  delete static_cast<ExtraState*>(p);
}

Py_ssize_t extra_index() {
  if (g_extra_index < 0) {
#if PY_VERSION_HEX >= 0x030C0000
    g_extra_index = PyUnstable_Eval_RequestCodeExtraIndex(free_extra);
#else
    g_extra_index = _PyEval_RequestCodeExtraIndex(free_extra);
#endif
    TL_CHECK(g_extra_index >= 0) << "no co_extra slot left";
  }
  return g_extra_index;
}

int get_code_extra(PyCodeObject* code, void** out) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyUnstable_Code_GetExtra(reinterpret_cast<PyObject*>(code), extra_index(), out);
#else
  return _PyCode_GetExtra(reinterpret_cast<PyObject*>(code), extra_index(), out);
#endif
}

int set_code_extra(PyCodeObject* code, void* value) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyUnstable_Code_SetExtra(reinterpret_cast<PyObject*>(code), extra_index(), value);
#else
  return _PyCode_SetExtra(reinterpret_cast<PyObject*>(code), extra_index(), value);
#endif
}

void refresh(ExtraState& st) {
  if (st.epoch == g_epoch) return;
  // NOTE: swap out first: destroying entries can run Python code.
  std::vector<std::shared_ptr<CacheEntry>> old;
  old.swap(st.entries);
  st.skip = st.skip_known = st.warned_limit = st.fresh_objects = false;
  st.dynamic_numbers.clear();
  st.chains.clear();
  st.epoch = g_epoch;
  st.version++;
}

}  // namespace

ExtraState* find_extra(PyCodeObject* code) {
  void* p = nullptr;
  if (get_code_extra(code, &p) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  return static_cast<ExtraState*>(p);
}

ExtraState* get_extra(PyCodeObject* code) {
  ExtraState* st = find_extra(code);
  if (!st) {
    auto fresh = std::make_unique<ExtraState>();
    fresh->epoch = g_epoch;
    if (set_code_extra(code, fresh.get()) < 0) throw PythonError();
    st = fresh.release();
    g_states.insert(st);
  }
  refresh(*st);
  return st;
}

void bump_epoch() {
  g_epoch++;
  // NOTE: entries are moved out first and destroyed after the loop: destroying
  // one can run Python code that frees code objects (and so changes g_states).
  // An entry running now stays alive through its caller's shared_ptr.
  std::vector<std::shared_ptr<CacheEntry>> dropped;
  for (ExtraState* st : g_states) {
    std::move(st->entries.begin(), st->entries.end(), std::back_inserter(dropped));
    st->entries.clear();
    // NOTE: as refresh(): what the dropped entries saw (objects that died) is forgotten too.
    st->skip = st->skip_known = st->warned_limit = st->fresh_objects = false;
    st->dynamic_numbers.clear();
    st->epoch = g_epoch;
    st->version++;
  }
}
uint64_t current_epoch() { return g_epoch; }

int cache_entry_count(PyCodeObject* code) {
  ExtraState* st = find_extra(code);
  return st && st->epoch == g_epoch ? static_cast<int>(st->entries.size()) : 0;
}

void insert_entry(ExtraState& st, std::shared_ptr<CacheEntry> entry) {
  st.entries.insert(st.entries.begin(), std::move(entry));
  st.version++;
}

bool drop_dead_entries(ExtraState& st) {
  // NOTE: moved out before they are destroyed: destroying entries can run Python code.
  std::vector<std::shared_ptr<CacheEntry>> dead;
  for (auto it = st.entries.begin(); it != st.entries.end();) {
    if ((*it)->guards.id_matched_local_freed()) {
      dead.push_back(std::move(*it));
      it = st.entries.erase(it);
    } else {
      ++it;
    }
  }
  if (dead.empty()) return false;
  st.fresh_objects = true;
  st.version++;
  return true;
}

void move_to_front(ExtraState& st, const CacheEntry* entry) {
  auto it = std::find_if(st.entries.begin(), st.entries.end(),
                         [&](const auto& e) { return e.get() == entry; });
  if (it == st.entries.end() || it == st.entries.begin()) return;
  std::rotate(st.entries.begin(), it, it + 1);
  st.version++;
}

int count_entries(const ExtraState& st, int config_id) {
  return static_cast<int>(std::count_if(st.entries.begin(), st.entries.end(),
                                        [&](const auto& e) { return e->config->id == config_id; }));
}

int count_entries_for_objects(const ExtraState& st, int config_id, const ir::FrameView& frame) {
  auto same_objects = [&](const CacheEntry& e) {
    for (const auto& m : e.guards.id_matched_locals()) {
      if (m.slot < 0 || m.slot >= frame.nlocals || !frame.locals[m.slot]) return false;
      PyObject* v = frame.locals[m.slot];
      if (m.via_self) {
        PyRef self = PyRef::steal(PyObject_GetAttrString(v, "__self__"));
        if (!self) PyErr_Clear();
        if (self.get() != m.obj) return false;
      } else if (v != m.obj) {
        return false;
      }
    }
    return true;
  };
  return static_cast<int>(std::count_if(st.entries.begin(), st.entries.end(), [&](const auto& e) {
    return e->config->id == config_id && same_objects(*e);
  }));
}

}  // namespace tl::frame
