#pragma once
// The layouts of a list of tensors and how their memory overlaps, read in one pass: what a
// compiled optimizer step (torchlite/_optimizer.py) is keyed on every step. Its Python version
// (a tuple per tensor, hashed, plus a storage per tensor) cost more than the step's kernels
// for GPT-2's 148 parameters.
#include <Python.h>

#include <string>

namespace tl::guards {

struct TensorListLayout {
  // dtype, device, sizes and strides of every tensor as bytes: equal keys, equal layouts.
  std::string key;
  // "": no two tensors overlap in memory; "written": only tensors the step writes overlap
  // each other; "read_written": a tensor the step only reads overlaps one it writes.
  const char* sharing = "";
  // False when a tensor is not strided (sparse, mkldnn) or complex: not for compiled steps.
  bool supported = true;
};

// `tensors`: a list (borrowed). The ones in [read_begin, read_end) are only read; the others
// are written. Throws PythonError when an item is not a tensor.
TensorListLayout read_tensor_list_layout(PyObject* tensors, Py_ssize_t read_begin,
                                         Py_ssize_t read_end);

}  // namespace tl::guards
