#pragma once
// Python objects of torch and the standard library that capture consults on
// every traced instruction, looked up once (under the GIL) at first use.
#include <string>

#include "core/py_ref.h"

namespace tl::capture {

struct TorchApi {
  PyRef torch;                // the torch module
  PyRef tensor_type;          // torch.Tensor
  PyRef parameter_type;       // torch.nn.Parameter
  PyRef module_type;          // torch.nn.Module
  PyRef size_type;            // torch.Size
  PyRef dtype_type;           // torch.dtype
  PyRef device_type;          // torch.device
  PyRef meta_device;          // torch.device("meta")
  PyRef empty_strided;        // torch.empty_strided
  PyRef set_grad_enabled_fn;  // torch._C._set_grad_enabled
  PyRef is_grad_enabled_fn;   // torch.is_grad_enabled
  PyRef assert_fn;            // torch._assert
  PyRef no_grad_cls, enable_grad_cls, set_grad_enabled_cls;
  PyRef module_call;       // torch.nn.Module.__call__
  PyRef operator_getitem;  // operator.getitem
  PyRef builtin_getattr;   // builtins.getattr
  PyRef builtins;          // the builtins module
  PyRef math_module, operator_module;
  PyRef op_overload_types;  // (torch._ops.OpOverload, torch._ops.OpOverloadPacket)
  std::string torch_dir;    // ".../site-packages/torch/" (files there are torch's own)
  int torch_version = 0;    // major * 100 + minor (2.15 -> 215); 0 when unreadable
};

// Throws PythonError if torch cannot be imported.
const TorchApi& torch_api();

// True for functions (Python or C) that belong to torch's namespace and take
// part in graphs as ops (torch.add, torch.nn.functional.relu, torch._C._nn.linear).
bool is_torch_function(PyObject* fn);  // borrows
// True if the code object's file lies inside torch's package.
bool is_torch_file(PyObject* filename);  // borrows

}  // namespace tl::capture
