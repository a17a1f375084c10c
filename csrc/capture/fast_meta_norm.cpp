// Normalisations.
#include <algorithm>

#include "capture/fast_meta_rules.h"

namespace tl::capture::fast_meta {

Result layer_norm(const OpRule&, const Call& c) {
  c.only_keywords({"normalized_shape", "weight", "bias", "eps"});
  if (c.args.empty() || c.args.size() > 5) throw NotHandled();
  Tensor x = read_tensor(c.args[0]);
  if (!is_float(x.dtype)) throw NotHandled();
  require_canonical_if_contiguous(x);
  PyObject* shape_obj = c.arg(1, "normalized_shape");
  if (!shape_obj) throw NotHandled();
  Dims normalized;
  if (PyLong_CheckExact(shape_obj)) {
    normalized.push_back(PyLong_AsLongLong(shape_obj));
  } else if (PyTuple_Check(shape_obj)) {
    normalized = ints_of(shape_obj);
  } else if (PyList_CheckExact(shape_obj)) {
    PyRef t = PyRef::steal(PyList_AsTuple(shape_obj));
    if (!t) throw PythonError();
    normalized = ints_of(t.get());
  } else {
    throw NotHandled();
  }
  const Dims& sizes = x.layout.sizes;
  if (normalized.empty() || normalized.size() > sizes.size() ||
      !std::equal(normalized.begin(), normalized.end(), sizes.end() - normalized.size()))
    throw NotHandled();
  std::vector<const Tensor*> inputs = {&x};
  std::optional<Tensor> params[2];
  const char* names[2] = {"weight", "bias"};
  for (size_t i = 0; i < 2; ++i) {
    PyObject* p = c.arg(2 + i, names[i]);
    if (!p || p == Py_None) continue;
    params[i] = read_tensor(p);
    if (params[i]->dtype != x.dtype || params[i]->layout.sizes != normalized) throw NotHandled();
    inputs.push_back(&*params[i]);
  }
  PyObject* eps = c.arg(4, "eps");
  if (eps && !PyFloat_CheckExact(eps)) throw NotHandled();
  Result r{{sizes, contiguous_strides(sizes)}, x.dtype, false};
  r.requires_grad = needs_grad(inputs, x.dtype);
  return r;
}

}  // namespace tl::capture::fast_meta
