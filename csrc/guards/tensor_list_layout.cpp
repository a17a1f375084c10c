#include "guards/tensor_list_layout.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/errors.h"
#include "core/py_ref.h"

namespace tl::guards {
namespace {

// NOTE: interned once under the GIL and kept for the process: making the name per call cost as
// much as the attribute read.
PyObject* name(const char* s) {
  PyObject* n = PyUnicode_InternFromString(s);
  if (!n) throw PythonError();
  return n;
}

PyRef attr(PyObject* o, PyObject* n) {
  PyRef r = PyRef::steal(PyObject_GetAttr(o, n));
  if (!r) throw PythonError();
  return r;
}

PyRef call0(PyObject* o, PyObject* method) {
  PyObject* argv[] = {o};
  PyRef r = PyRef::steal(
      PyObject_VectorcallMethod(method, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
  if (!r) throw PythonError();
  return r;
}

long long as_int(PyObject* v) {
  long long x = PyLong_AsLongLong(v);
  if (x == -1 && PyErr_Occurred()) throw PythonError();
  return x;
}

void append(std::string& key, long long v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// The bytes [begin, end) one tensor's elements span, and whether the step writes it.
struct Span {
  uintptr_t begin, end;
  bool written;
};

}  // namespace

TensorListLayout read_tensor_list_layout(PyObject* tensors, Py_ssize_t read_begin,
                                         Py_ssize_t read_end) {
  static PyObject* dtype_name = name("dtype");
  static PyObject* layout_name = name("layout");
  static PyObject* shape_name = name("shape");
  static PyObject* stride_name = name("stride");
  static PyObject* get_device_name = name("get_device");
  static PyObject* data_ptr_name = name("data_ptr");
  static PyObject* itemsize_name = name("itemsize");
  static PyObject* is_complex_name = name("is_complex");
  static PyObject* strided = [] {
    PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
    if (!torch) throw PythonError();
    return attr(torch.get(), name("strided")).release();  // NOTE: kept for the process
  }();

  TL_CHECK(PyList_Check(tensors)) << "read_tensor_list_layout: expected a list";
  const Py_ssize_t n = PyList_GET_SIZE(tensors);
  TensorListLayout out;
  out.key.reserve(static_cast<size_t>(n) * 64);
  std::vector<Span> spans;
  spans.reserve(n);
  // NOTE: dtypes are singletons: their item size and complexity are read once per call.
  PyObject* last_dtype = nullptr;
  long long itemsize = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* t = PyList_GET_ITEM(tensors, i);
    if (attr(t, layout_name).get() != strided) out.supported = false;
    PyRef dtype = attr(t, dtype_name);
    if (dtype.get() != last_dtype) {
      last_dtype = dtype.get();
      itemsize = as_int(attr(last_dtype, itemsize_name).get());
      if (attr(last_dtype, is_complex_name).get() == Py_True) out.supported = false;
    }
    if (!out.supported) return out;
    PyRef shape = attr(t, shape_name);
    PyRef stride = call0(t, stride_name);
    TL_CHECK(PyTuple_Check(shape.get()) && PyTuple_Check(stride.get()))
        << "read_tensor_list_layout: sizes and strides must be tuples";
    const Py_ssize_t dims = PyTuple_GET_SIZE(shape.get());
    append(out.key, reinterpret_cast<long long>(last_dtype));
    append(out.key, as_int(call0(t, get_device_name).get()));
    append(out.key, dims);
    long long last = 0;  // offset of the last element, in elements
    bool empty = false;
    for (Py_ssize_t d = 0; d < dims; ++d) {
      long long size = as_int(PyTuple_GET_ITEM(shape.get(), d));
      long long step = as_int(PyTuple_GET_ITEM(stride.get(), d));
      append(out.key, size);
      append(out.key, step);
      empty = empty || size == 0;
      last += (size - 1) * step;
    }
    if (empty) continue;  // NOTE: holds no memory, overlaps nothing
    auto begin = static_cast<uintptr_t>(as_int(call0(t, data_ptr_name).get()));
    bool written = i < read_begin || i >= read_end;
    spans.push_back({begin, begin + static_cast<uintptr_t>((last + 1) * itemsize), written});
  }
  // NOTE: sorted by start, a span overlaps a later one exactly when the later one starts
  // before it ends; one scan per span stops at the first that starts after its end.
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < spans.size(); ++i) {
    for (size_t j = i + 1; j < spans.size() && spans[j].begin < spans[i].end; ++j) {
      if (spans[i].written != spans[j].written) {
        out.sharing = "read_written";
        return out;
      }
      if (spans[i].written) out.sharing = "written";
    }
  }
  return out;
}

}  // namespace tl::guards
