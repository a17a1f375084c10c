#include "capture/torch_api.h"

#include <cstdio>

#include "core/errors.h"

namespace tl::capture {
namespace {

PyRef import(const char* name) {
  PyRef m = PyRef::steal(PyImport_ImportModule(name));
  if (!m) throw PythonError();
  return m;
}

PyRef attr(const PyRef& obj, const char* name) {
  PyRef a = PyRef::steal(PyObject_GetAttrString(obj.get(), name));
  if (!a) throw PythonError();
  return a;
}

std::string str_of(PyObject* s) {
  const char* c = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : nullptr;
  if (!c) {
    clear_expected_error();
    return "";
  }
  return c;
}

TorchApi* build() {
  auto* api = new TorchApi();
  api->torch = import("torch");
  api->tensor_type = attr(api->torch, "Tensor");
  PyRef nn = import("torch.nn");
  api->parameter_type = attr(nn, "Parameter");
  api->module_type = attr(nn, "Module");
  api->size_type = attr(api->torch, "Size");
  api->dtype_type = attr(api->torch, "dtype");
  api->device_type = attr(api->torch, "device");
  api->meta_device = PyRef::steal(PyObject_CallFunction(api->device_type.get(), "s", "meta"));
  if (!api->meta_device) throw PythonError();
  api->empty_strided = attr(api->torch, "empty_strided");
  PyRef c = attr(api->torch, "_C");
  api->set_grad_enabled_fn = attr(c, "_set_grad_enabled");
  api->is_grad_enabled_fn = attr(api->torch, "is_grad_enabled");
  api->assert_fn = attr(api->torch, "_assert");
  api->no_grad_cls = attr(api->torch, "no_grad");
  api->enable_grad_cls = attr(api->torch, "enable_grad");
  api->set_grad_enabled_cls = attr(api->torch, "set_grad_enabled");
  api->module_call = attr(api->module_type, "__call__");
  api->operator_module = import("operator");
  api->operator_getitem = attr(api->operator_module, "getitem");
  api->builtins = import("builtins");
  api->builtin_getattr = attr(api->builtins, "getattr");
  api->math_module = import("math");
  PyRef ops = import("torch._ops");
  api->op_overload_types = PyRef::steal(
      PyTuple_Pack(2, attr(ops, "OpOverload").get(), attr(ops, "OpOverloadPacket").get()));
  if (!api->op_overload_types) throw PythonError();
  PyRef file = attr(api->torch, "__file__");
  std::string f = str_of(file.get());
  api->torch_dir = f.substr(0, f.rfind('/') + 1);
  std::string version = str_of(attr(api->torch, "__version__").get());
  int major = 0, minor = 0;
  if (std::sscanf(version.c_str(), "%d.%d", &major, &minor) == 2)
    api->torch_version = major * 100 + minor;
  return api;
}

}  // namespace

const TorchApi& torch_api() {
  // NOTE: built once under the GIL and never freed: these objects live as long
  // as the interpreter, and freeing them at exit would race torch's teardown.
  static TorchApi* api = nullptr;
  if (!api) api = build();
  return *api;
}

bool is_torch_file(PyObject* filename) {
  std::string f = str_of(filename);
  const std::string& dir = torch_api().torch_dir;
  return !dir.empty() && f.compare(0, dir.size(), dir) == 0;
}

bool is_torch_function(PyObject* fn) {
  if (PyCFunction_Check(fn)) {
    PyRef mod = PyRef::steal(PyObject_GetAttrString(fn, "__module__"));
    if (!mod) {
      clear_expected_error();
      // Methods of torch._C objects (torch._C._nn.linear) have a module self.
      PyObject* self = PyCFunction_GET_SELF(fn);
      if (self && PyModule_Check(self)) {
        const char* name = PyModule_GetName(self);
        if (!name) clear_expected_error();
        return name && std::string(name).rfind("torch", 0) == 0;
      }
      return false;
    }
    std::string m = str_of(mod.get());
    if (m.rfind("torch", 0) == 0) return true;
    PyObject* self = PyCFunction_GET_SELF(fn);
    if (self && PyModule_Check(self)) {
      const char* name = PyModule_GetName(self);
      if (!name) clear_expected_error();
      return name && std::string(name).rfind("torch", 0) == 0;
    }
    return false;
  }
  if (PyFunction_Check(fn)) {
    PyObject* code = PyFunction_GET_CODE(fn);
    return is_torch_file(reinterpret_cast<PyCodeObject*>(code)->co_filename);
  }
  // Method descriptors of torch.Tensor used unbound: torch.Tensor.add(x, y).
  if (Py_TYPE(fn) == &PyMethodDescr_Type || Py_TYPE(fn) == &PyWrapperDescr_Type) {
    PyTypeObject* owner = reinterpret_cast<PyDescrObject*>(fn)->d_type;
    return PyType_IsSubtype(owner, reinterpret_cast<PyTypeObject*>(torch_api().tensor_type.get()));
  }
  return false;
}

}  // namespace tl::capture
