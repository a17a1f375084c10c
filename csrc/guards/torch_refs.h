#pragma once
// torch objects the guards use, looked up once from sys.modules (never
// imported from here: on an interpreter without torch, module-aware fast
// paths are simply off). All references are owned by a process-wide table that
// is never freed (it must outlive every GuardSet, and Py_Finalize is not run).
#include <Python.h>

namespace tl::guards {

struct TorchRefs {
  PyObject* module_type = nullptr;     // torch.nn.Module
  PyObject* module_getattr = nullptr;  // torch.nn.Module.__getattr__ (the function)
  PyObject* dtype_type = nullptr;      // torch.dtype
  PyObject* device_type = nullptr;     // torch.device
  PyObject* size_type = nullptr;       // torch.Size
  PyObject* layout_type = nullptr;     // torch.layout
  PyObject* memory_format_type = nullptr;
  bool loaded = false;  // torch was found in sys.modules (retried until it is)
};

// Borrowed table; fields stay null while torch has not been imported. Needs the GIL.
const TorchRefs& torch_refs();

}  // namespace tl::guards
