#include "runtime/weight_layouts.h"

#include <cstdint>
#include <unordered_map>

#include "core/counters.h"
#include "core/errors.h"
#include "core/py_import.h"
#include "core/py_ref.h"

namespace tl::runtime {
namespace {

// One weight's copy and what it was made from.
struct Entry {
  PyRef weakref;  // to the weight; its callback erases this entry when the weight dies
  int64_t version = 0;
  void* data_ptr = nullptr;
  PyRef storage;  // the weight's storage then, held: no later storage can take its address
  PyRef copy;
};

// Python objects looked up once and kept for the process.
struct Names {
  PyRef version = PyRef::steal(PyUnicode_InternFromString("_version"));
  PyRef data_ptr = PyRef::steal(PyUnicode_InternFromString("data_ptr"));
  PyRef requires_grad = PyRef::steal(PyUnicode_InternFromString("requires_grad"));
  PyRef is_cuda = PyRef::steal(PyUnicode_InternFromString("is_cuda"));
  PyRef is_meta = PyRef::steal(PyUnicode_InternFromString("is_meta"));
  PyRef contiguous = PyRef::steal(PyUnicode_InternFromString("contiguous"));
  PyRef storage = PyRef::steal(PyUnicode_InternFromString("untyped_storage"));
  PyRef kwnames = PyRef::steal(Py_BuildValue("(s)", "memory_format"));
  PyRef channels_last = import_attr("torch", "channels_last");
  PyRef grad_enabled = import_attr("torch", "is_grad_enabled");
  PyRef tensor_type = import_attr("torch", "Tensor");
  PyRef parameter_type = import_attr("torch.nn", "Parameter");
  PyRef capturing;  // torch._C._cuda_isCurrentStreamCapturing; null in a torch without CUDA
  Names() {
    PyRef c = PyRef::steal(PyImport_ImportModule("torch._C"));
    if (c)
      capturing = PyRef::steal(PyObject_GetAttrString(c.get(), "_cuda_isCurrentStreamCapturing"));
    PyErr_Clear();
  }
};

const Names& names() {
  static const Names* n = new Names();  // NOTE: kept for the process (no teardown after Python's)
  return *n;
}

// Keyed by the weight (borrowed: its entry goes before it does).
std::unordered_map<PyObject*, Entry>& cache() {
  static auto* c = new std::unordered_map<PyObject*, Entry>();  // NOTE: kept for the process
  return *c;
}

// The weakref callback: erases the entry of the weight that died. Borrows `ref`.
PyObject* weight_died(PyObject*, PyObject* ref) {
  auto& c = cache();
  for (auto it = c.begin(); it != c.end(); ++it)
    if (it->second.weakref.get() == ref) {
      Entry dead = std::move(it->second);  // released after the map is consistent again
      c.erase(it);
      break;
    }
  Py_RETURN_NONE;
}

PyMethodDef weight_died_def = {"_weight_layout_died", weight_died, METH_O, nullptr};

PyRef attr(PyObject* o, PyObject* name) { return PyRef::steal(PyObject_GetAttr(o, name)); }

// -1 error (set), 0 false, 1 true.
int truth(PyRef r) { return r ? PyObject_IsTrue(r.get()) : -1; }

PyRef call_no_args(PyObject* fn) { return PyRef::steal(PyObject_CallNoArgs(fn)); }

// `w.contiguous(memory_format=torch.channels_last)`, counted unless `count` is false.
PyRef convert(PyObject* w, bool count = true) {
  const Names& n = names();
  PyObject* argv[] = {w, n.channels_last.get()};
  PyRef r = PyRef::steal(PyObject_VectorcallMethod(
      n.contiguous.get(), argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, n.kwnames.get()));
  if (count && r && r.get() != w) ++counters().conv_weight_copies;
  return r;
}

// 1 when the copy of `w` may be kept (see the header), 0 when not, -1 on error.
int cacheable(PyObject* w) {
  const Names& n = names();
  int grad = truth(attr(w, n.requires_grad.get()));
  if (grad < 0) return -1;
  if (grad == 1) {
    int on = truth(call_no_args(n.grad_enabled.get()));
    if (on != 0) return on < 0 ? -1 : 0;
  }
  int cuda = truth(attr(w, n.is_cuda.get()));
  if (cuda < 0) return -1;
  if (cuda == 1 && n.capturing) {
    int capturing = truth(call_no_args(n.capturing.get()));
    if (capturing != 0) return capturing < 0 ? -1 : 0;
  }
  return 1;
}

// The weight's version counter and data pointer; false (error cleared) for a
// tensor without a version counter (an inference tensor).
bool identity(PyObject* w, int64_t* version, void** data_ptr) {
  const Names& n = names();
  PyRef v = attr(w, n.version.get());
  PyRef p = v ? PyRef::steal(PyObject_CallMethodNoArgs(w, n.data_ptr.get())) : PyRef();
  if (!p) {
    PyErr_Clear();
    return false;
  }
  *version = PyLong_AsLongLong(v.get());
  *data_ptr = PyLong_AsVoidPtr(p.get());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

// Makes and keeps the copy of `w` (a plain tensor or parameter, not in the cache or changed).
PyObject* refill(PyObject* w) {
  const Names& n = names();
  int meta = truth(attr(w, n.is_meta.get()));
  if (meta < 0) return nullptr;
  // NOTE: meta tensors (a pass computing this node's metadata) are neither counted nor kept,
  // and have no data pointer to key on.
  if (meta) return convert(w, false).release();
  int64_t version = 0;
  void* data_ptr = nullptr;
  if (!identity(w, &version, &data_ptr)) return convert(w).release();
  PyRef copy = convert(w);
  if (!copy || copy.get() == w) return copy.release();  // NOTE: a copy that is `w` keeps it alive
  PyRef storage = PyRef::steal(PyObject_CallMethodNoArgs(w, n.storage.get()));
  static PyObject* callback = PyCFunction_New(&weight_died_def, nullptr);  // NOTE: kept
  PyRef ref = storage && callback ? PyRef::steal(PyWeakref_NewRef(w, callback)) : PyRef();
  if (!ref) {  // NOTE: no weak reference or storage: no cache
    PyErr_Clear();
    return copy.release();
  }
  Entry& e = cache()[w];
  Entry old = std::move(e);  // released after the new entry is in place
  e = Entry{std::move(ref), version, data_ptr, std::move(storage), copy};
  return copy.release();
}

}  // namespace

PyObject* channels_last_weight(PyObject* w) {
  try {
    names();
  } catch (const PythonError&) {
    return nullptr;
  }
  // NOTE: plain tensors and parameters only, neither kept nor counted otherwise: a subclass
  // (FakeTensor while a pass computes metadata, FunctionalTensor, DTensor) may have no storage of
  // its own to key on.
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(w));
  if (type != names().tensor_type.get() && type != names().parameter_type.get())
    return convert(w, false).release();
  int ok = cacheable(w);
  if (ok < 0) return nullptr;
  if (ok == 0) return convert(w).release();
  auto it = cache().find(w);
  if (it == cache().end()) return refill(w);
  int64_t version = 0;
  void* data_ptr = nullptr;
  if (!identity(w, &version, &data_ptr)) return convert(w).release();
  if (it->second.version == version && it->second.data_ptr == data_ptr)
    return PyRef(it->second.copy).release();
  return refill(w);
}

size_t weight_layouts_cached() { return cache().size(); }

void forget_weight_layouts() {
  std::unordered_map<PyObject*, Entry> dropped;
  dropped.swap(cache());  // NOTE: released after the map is empty: a release may run Python
}

}  // namespace tl::runtime
