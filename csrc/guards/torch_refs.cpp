#include "guards/torch_refs.h"

#include "core/py_ref.h"

namespace tl::guards {

namespace {
// Returns a new reference to sys.modules[name], or null with no error set.
PyObject* loaded_module(const char* name) {
  PyRef key = PyRef::steal(PyUnicode_FromString(name));
  PyObject* m = key ? PyImport_GetModule(key.get()) : nullptr;
  if (!m) PyErr_Clear();
  return m;
}

// Returns a new reference to module.attr, or null with no error set.
PyObject* attr_or_null(PyObject* module, const char* name) {
  PyObject* r = PyObject_GetAttrString(module, name);
  if (!r) PyErr_Clear();
  return r;
}

void load(TorchRefs& t) {
  // NOTE: PyImport_GetModule only reads sys.modules; importing torch from a
  // guard would run arbitrary code (and fail on 3.12 here).
  PyRef torch = PyRef::steal(loaded_module("torch"));
  // Without torch.nn, torch is half-imported (we run inside its import): try again later.
  PyRef nn_module = PyRef::steal(loaded_module("torch.nn.modules.module"));
  if (!torch || !nn_module) return;
  t.module_type = attr_or_null(nn_module.get(), "Module");
  if (t.module_type && PyType_Check(t.module_type)) {
    PyRef name = PyRef::steal(PyUnicode_InternFromString("__getattr__"));
    t.module_getattr = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(t.module_type), name.get());
    Py_XINCREF(t.module_getattr);  // kept for the process lifetime
  }
  t.dtype_type = attr_or_null(torch.get(), "dtype");
  t.device_type = attr_or_null(torch.get(), "device");
  t.size_type = attr_or_null(torch.get(), "Size");
  t.layout_type = attr_or_null(torch.get(), "layout");
  t.memory_format_type = attr_or_null(torch.get(), "memory_format");
  t.loaded = true;
}
}  // namespace

const TorchRefs& torch_refs() {
  // The GIL serialises initialisation; leaked on purpose (see header).
  static TorchRefs* refs = new TorchRefs();
  if (!refs->loaded) load(*refs);
  return *refs;
}

}  // namespace tl::guards
