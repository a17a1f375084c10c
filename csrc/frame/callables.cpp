#include "frame/callables.h"

#include <structmember.h>

#include <atomic>
#include <cstddef>
#include <new>

#include "core/errors.h"

namespace tl::frame {
namespace {

PyTypeObject* g_config_type = nullptr;
PyTypeObject* g_compiled_type = nullptr;
PyTypeObject* g_disabled_type = nullptr;
std::atomic<int> g_next_config_id{1};

// ---- Config ---------------------------------------------------------------

struct ConfigObject {
  PyObject_HEAD ConfigPtr config;  // constructed in new_config, destroyed in config_dealloc
};

void config_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  reinterpret_cast<ConfigObject*>(self)->config.~ConfigPtr();
  type->tp_free(self);
  Py_DECREF(type);
}

const CompileConfig& cfg(PyObject* self) { return *reinterpret_cast<ConfigObject*>(self)->config; }

PyObject* config_get_id(PyObject* self, void*) { return PyLong_FromLong(cfg(self).id); }
PyObject* config_get_backend_name(PyObject* self, void*) {
  return PyUnicode_FromString(cfg(self).backend_name.c_str());
}
PyObject* config_get_fullgraph(PyObject* self, void*) {
  return PyBool_FromLong(cfg(self).fullgraph);
}
PyObject* config_get_limit(PyObject* self, void*) {
  return PyLong_FromLong(cfg(self).cache_size_limit);
}
PyObject* config_get_ref(const PyRef& r) {
  PyObject* o = r ? r.get() : Py_None;
  Py_INCREF(o);
  return o;
}
PyObject* config_get_backend(PyObject* self, void*) { return config_get_ref(cfg(self).backend); }
PyObject* config_get_recorder(PyObject* self, void*) { return config_get_ref(cfg(self).recorder); }

PyGetSetDef config_getset[] = {
    {"id", config_get_id, nullptr, nullptr, nullptr},
    {"backend", config_get_backend, nullptr, nullptr, nullptr},
    {"backend_name", config_get_backend_name, nullptr, nullptr, nullptr},
    {"fullgraph", config_get_fullgraph, nullptr, nullptr, nullptr},
    {"cache_size_limit", config_get_limit, nullptr, nullptr, nullptr},
    {"recorder", config_get_recorder, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot config_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(config_dealloc)},
    {Py_tp_getset, config_getset},
    {Py_tp_doc, const_cast<char*>("The options of one torchlite.compile() call (opaque).")},
    {0, nullptr},
};

PyType_Spec config_spec = {"torchlite._C.Config", sizeof(ConfigObject), 0,
                           Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, config_slots};

// ---- CompiledFunction / DisabledFunction ------------------------------------

struct WrapperObject {
  PyObject_HEAD vectorcallfunc vectorcall;
  PyObject* fn;          // strong
  PyObject* config_obj;  // strong; a Config, or NULL for DisabledFunction
  PyObject* dict;        // strong, may be NULL
  PyObject* weakrefs;
};

const ConfigPtr* wrapper_config(WrapperObject* w) {
  return &reinterpret_cast<ConfigObject*>(w->config_obj)->config;
}

// The hot path: well under a microsecond on top of calling fn.
PyObject* compiled_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf,
                              PyObject* kwnames) {
  auto* w = reinterpret_cast<WrapperObject*>(self);
  PyObject* fn = w->fn;
  if (!fn) {
    PyErr_SetString(PyExc_RuntimeError, "torchlite: CompiledFunction was cleared");
    return nullptr;
  }
  Py_INCREF(fn);
  ActiveConfigScope scope(wrapper_config(w));
  enter_compiled_region();
  PyObject* result = PyObject_Vectorcall(fn, args, nargsf, kwnames);
  leave_compiled_region();
  Py_DECREF(fn);
  return result;
}

PyObject* disabled_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf,
                              PyObject* kwnames) {
  auto* w = reinterpret_cast<WrapperObject*>(self);
  PyObject* fn = w->fn;
  if (!fn) {
    PyErr_SetString(PyExc_RuntimeError, "torchlite: DisabledFunction was cleared");
    return nullptr;
  }
  Py_INCREF(fn);
  ActiveConfigScope scope(nullptr);
  PyObject* result = PyObject_Vectorcall(fn, args, nargsf, kwnames);
  Py_DECREF(fn);
  return result;
}

// Returns a new wrapper, or NULL with an exception set. Borrows its arguments.
PyObject* new_wrapper(PyTypeObject* type, PyObject* fn, PyObject* config_obj, vectorcallfunc call) {
  if (!PyCallable_Check(fn)) {
    PyErr_Format(PyExc_TypeError, "torchlite: expected a callable, got %R", fn);
    return nullptr;
  }
  auto* w = PyObject_GC_New(WrapperObject, type);
  if (!w) return nullptr;
  w->vectorcall = call;
  w->fn = Py_NewRef(fn);
  w->config_obj = Py_XNewRef(config_obj);
  w->weakrefs = nullptr;
  // __wrapped__ lives in the instance dict so update_wrapper can overwrite it.
  w->dict = PyDict_New();
  if (!w->dict || PyDict_SetItemString(w->dict, "__wrapped__", fn) < 0) {
    Py_DECREF(w);
    return nullptr;
  }
  PyObject_GC_Track(w);
  return reinterpret_cast<PyObject*>(w);
}

// CompiledFunction(fn, config): new reference or NULL.
PyObject* compiled_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *fn, *config;
  static const char* kw[] = {"fn", "config", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO:CompiledFunction", const_cast<char**>(kw), &fn,
                                   &config)) {
    return nullptr;
  }
  if (!config_of(config)) {
    PyErr_Format(PyExc_TypeError, "CompiledFunction: expected a torchlite._C.Config, got %R",
                 config);
    return nullptr;
  }
  return new_wrapper(type, fn, config, compiled_vectorcall);
}

// DisabledFunction(fn): new reference or NULL.
PyObject* disabled_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject* fn;
  static const char* kw[] = {"fn", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:DisabledFunction", const_cast<char**>(kw),
                                   &fn)) {
    return nullptr;
  }
  return new_wrapper(type, fn, nullptr, disabled_vectorcall);
}

int wrapper_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* w = reinterpret_cast<WrapperObject*>(self);
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(w->fn);
  Py_VISIT(w->config_obj);
  Py_VISIT(w->dict);
  return 0;
}

int wrapper_clear(PyObject* self) {
  auto* w = reinterpret_cast<WrapperObject*>(self);
  Py_CLEAR(w->fn);
  Py_CLEAR(w->config_obj);
  Py_CLEAR(w->dict);
  return 0;
}

void wrapper_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  auto* w = reinterpret_cast<WrapperObject*>(self);
  if (w->weakrefs) PyObject_ClearWeakRefs(self);
  wrapper_clear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

// Binds like a function: instance access returns a bound method.
PyObject* wrapper_descr_get(PyObject* self, PyObject* obj, PyObject* type) {
  if (obj == nullptr || obj == Py_None) return Py_NewRef(self);
  return PyMethod_New(self, obj);
}

PyObject* wrapper_repr(PyObject* self) {
  auto* w = reinterpret_cast<WrapperObject*>(self);
  return PyUnicode_FromFormat("<%s of %R>", Py_TYPE(self)->tp_name, w->fn ? w->fn : Py_None);
}

PyObject* wrapper_get_fn(PyObject* self, void*) {
  PyObject* fn = reinterpret_cast<WrapperObject*>(self)->fn;
  return Py_NewRef(fn ? fn : Py_None);
}

PyObject* wrapper_get_config(PyObject* self, void*) {
  PyObject* c = reinterpret_cast<WrapperObject*>(self)->config_obj;
  return Py_NewRef(c ? c : Py_None);
}

PyGetSetDef wrapper_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {"fn", wrapper_get_fn, nullptr, const_cast<char*>("the wrapped callable"), nullptr},
    {"config", wrapper_get_config, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMemberDef wrapper_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(WrapperObject, vectorcall), READONLY, nullptr},
    {"__dictoffset__", T_PYSSIZET, offsetof(WrapperObject, dict), READONLY, nullptr},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(WrapperObject, weakrefs), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

#define TL_WRAPPER_SLOTS(NEW, DOC)                                                         \
  {Py_tp_new, reinterpret_cast<void*>(NEW)},                                               \
      {Py_tp_dealloc, reinterpret_cast<void*>(wrapper_dealloc)},                           \
      {Py_tp_traverse, reinterpret_cast<void*>(wrapper_traverse)},                         \
      {Py_tp_clear, reinterpret_cast<void*>(wrapper_clear)},                               \
      {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},                            \
      {Py_tp_descr_get, reinterpret_cast<void*>(wrapper_descr_get)},                       \
      {Py_tp_repr, reinterpret_cast<void*>(wrapper_repr)}, {Py_tp_getset, wrapper_getset}, \
      {Py_tp_members, wrapper_members}, {Py_tp_doc, const_cast<char*>(DOC)}, {             \
    0, nullptr                                                                             \
  }

PyType_Slot compiled_slots[] = {
    TL_WRAPPER_SLOTS(compiled_new, "CompiledFunction(fn, config): calls fn with config active.")};
PyType_Slot disabled_slots[] = {
    TL_WRAPPER_SLOTS(disabled_new, "DisabledFunction(fn): calls fn with torchlite inactive.")};

constexpr unsigned kWrapperFlags =
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
PyType_Spec compiled_spec = {"torchlite._C.CompiledFunction", sizeof(WrapperObject), 0,
                             kWrapperFlags, compiled_slots};
PyType_Spec disabled_spec = {"torchlite._C.DisabledFunction", sizeof(WrapperObject), 0,
                             kWrapperFlags, disabled_slots};

}  // namespace

int init_callable_types() {
  if (g_config_type) return 0;
  g_config_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&config_spec));
  g_compiled_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&compiled_spec));
  g_disabled_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&disabled_spec));
  return g_config_type && g_compiled_type && g_disabled_type ? 0 : -1;
}

PyTypeObject* config_type() { return g_config_type; }
PyTypeObject* compiled_function_type() { return g_compiled_type; }
PyTypeObject* disabled_function_type() { return g_disabled_type; }

PyObject* new_config(PyObject* backend, const std::string& backend_name, bool fullgraph,
                     int cache_size_limit, PyObject* recorder, const Settings& settings,
                     const std::string& mode, int dynamic) {
  auto c = std::make_shared<CompileConfig>();
  c->id = g_next_config_id++;
  // NOTE: None (not NULL) marks the builtin runner / no recorder.
  c->backend = PyRef::borrow(backend ? backend : Py_None);
  c->backend_name = backend_name;
  c->fullgraph = fullgraph;
  c->cache_size_limit = cache_size_limit;
  c->recorder = PyRef::borrow(recorder ? recorder : Py_None);
  c->settings = settings;
  c->mode = mode;
  c->dynamic = dynamic;
  auto* obj = PyObject_New(ConfigObject, g_config_type);
  if (!obj) return nullptr;
  new (&obj->config) ConfigPtr(std::move(c));
  return reinterpret_cast<PyObject*>(obj);
}

const ConfigPtr* config_of(PyObject* obj) {
  if (!g_config_type || !PyObject_TypeCheck(obj, g_config_type)) return nullptr;
  return &reinterpret_cast<ConfigObject*>(obj)->config;
}

PyObject* wrapped_function(PyObject* obj) {
  if (!PyObject_TypeCheck(obj, g_compiled_type) && !PyObject_TypeCheck(obj, g_disabled_type)) {
    return nullptr;
  }
  return reinterpret_cast<WrapperObject*>(obj)->fn;
}

}  // namespace tl::frame
