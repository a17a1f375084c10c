#include "capture/fast_meta_args.h"

#include "capture/torch_api.h"
#include "core/errors.h"

namespace tl::capture::fast_meta {
namespace {

struct DTypes {
  std::vector<std::pair<PyObject*, DType>> table;  // torch.<dtype> -> DType
  PyObject* strided;
};

const DTypes& dtypes() {
  // NOTE: built once under the GIL; torch's dtype objects are immortal singletons.
  static const DTypes* d = [] {
    auto* d = new DTypes();
    PyObject* torch = torch_api().torch.get();
    const std::pair<const char*, DType> names[] = {
        {"bool", DType::Bool},       {"uint8", DType::UInt8},       {"int8", DType::Int8},
        {"int16", DType::Int16},     {"int32", DType::Int32},       {"int64", DType::Int64},
        {"float16", DType::Float16}, {"bfloat16", DType::BFloat16}, {"float32", DType::Float32},
        {"float64", DType::Float64}};
    for (auto [name, dt] : names) {
      PyObject* o = PyObject_GetAttrString(torch, name);
      if (!o) throw PythonError();
      d->table.emplace_back(o, dt);
    }
    d->strided = PyObject_GetAttrString(torch, "strided");
    if (!d->strided) throw PythonError();
    return d;
  }();
  return *d;
}

}  // namespace

PyObject* strided_layout() { return dtypes().strided; }

DType to_dtype(PyObject* o) {
  for (auto [obj, dt] : dtypes().table)
    if (obj == o) return dt;
  return DType::Other;
}

PyObject* from_dtype(DType d) {
  for (auto [obj, dt] : dtypes().table)
    if (dt == d) return obj;
  return nullptr;
}

PyRef attr(PyObject* o, const char* name) {
  PyRef r = PyRef::steal(PyObject_GetAttrString(o, name));
  if (!r) throw PythonError();
  return r;
}

Dims ints_of(PyObject* seq) {
  if (!PyTuple_Check(seq)) throw NotHandled();
  Dims out;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); ++i) {
    PyObject* v = PyTuple_GET_ITEM(seq, i);
    if (!PyLong_CheckExact(v)) throw NotHandled();  // SymInts and the like
    out.push_back(PyLong_AsLongLong(v));
  }
  throw_if_python_error();
  return out;
}

bool is_plain_tensor(PyObject* o) {
  return Py_TYPE(o) == reinterpret_cast<PyTypeObject*>(torch_api().tensor_type.get());
}

Tensor read_tensor(PyObject* o) {
  if (!is_plain_tensor(o)) throw NotHandled();
  if (attr(o, "is_meta").get() != Py_True || attr(o, "layout").get() != strided_layout())
    throw NotHandled();
  Tensor t;
  t.dtype = to_dtype(attr(o, "dtype").get());
  if (t.dtype == DType::Other) throw NotHandled();
  t.layout.sizes = ints_of(attr(o, "shape").get());
  PyRef strides = PyRef::steal(PyObject_CallMethod(o, "stride", nullptr));
  if (!strides) throw PythonError();
  t.layout.strides = ints_of(strides.get());
  // NOTE: empty tensors have corner cases (legacy cat of 1-d empties, size-0 strides).
  if (numel(t.layout.sizes) == 0) throw NotHandled();
  t.requires_grad = attr(o, "requires_grad").get() == Py_True;
  return t;
}

Operand read_operand(PyObject* o) {
  Operand op;
  if (PyBool_Check(o)) {
    op.promo.kind = PromotionArg::Bool;
  } else if (PyLong_CheckExact(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    throw_if_python_error();
    // NOTE: wide integers overflow some dtypes; such calls go to torch.
    if (overflow || v > (1LL << 31) || v < -(1LL << 31)) throw NotHandled();
    op.promo.kind = PromotionArg::Int;
  } else if (PyFloat_CheckExact(o)) {
    op.promo.kind = PromotionArg::Float;
  } else {
    op.tensor = read_tensor(o);
    op.promo = {PromotionArg::Tensor, op.tensor->dtype, op.tensor->layout.sizes.empty()};
  }
  return op;
}

void Call::only_keywords(std::initializer_list<const char*> allowed) const {
  if (!kwargs) return;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(kwargs, &pos, &k, &v)) {
    const char* s = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : nullptr;
    if (!s) throw NotHandled();
    bool ok = false;
    for (const char* a : allowed) ok = ok || std::string(a) == s;
    if (!ok) throw NotHandled();
  }
}

bool needs_grad(const std::vector<const Tensor*>& inputs, DType out) {
  if (!is_float(out)) return false;
  bool any = false;
  for (const Tensor* t : inputs) any = any || t->requires_grad;
  if (!any) return false;
  PyRef on = PyRef::steal(PyObject_CallNoArgs(torch_api().is_grad_enabled_fn.get()));
  if (!on) throw PythonError();
  return on.get() == Py_True;
}

DType default_float() {
  static PyObject* get_default = PyObject_GetAttrString(torch_api().torch.get(),
                                                        "get_default_dtype");  // kept
  if (!get_default) throw PythonError();
  PyRef d = PyRef::steal(PyObject_CallNoArgs(get_default));
  if (!d) throw PythonError();
  DType dt = to_dtype(d.get());
  if (!is_float(dt)) throw NotHandled();
  return dt;
}

void require_canonical_if_contiguous(const Tensor& t) {
  if (is_contiguous(t.layout) && t.layout.strides != contiguous_strides(t.layout.sizes))
    throw NotHandled();
}

int64_t wrap_dim(PyObject* o, size_t ndim) {
  if (!PyLong_CheckExact(o)) throw NotHandled();
  long long d = PyLong_AsLongLong(o);
  throw_if_python_error();
  auto n = static_cast<long long>(ndim);
  if (d < -n || d >= n) throw NotHandled();
  return d < 0 ? d + n : d;
}
Dims ints_or_int(PyObject* o, size_t n) {
  if (PyLong_CheckExact(o)) {
    long long v = PyLong_AsLongLong(o);
    throw_if_python_error();
    return Dims(n, v);
  }
  if (PyList_CheckExact(o)) {
    PyRef t = PyRef::steal(PyList_AsTuple(o));
    if (!t) throw PythonError();
    return ints_of(t.get());
  }
  return ints_of(o);
}

Result contiguous_result(const Dims& sizes, DType dtype, const std::vector<const Tensor*>& inputs) {
  Result r{{sizes, contiguous_strides(sizes)}, dtype, false};
  r.requires_grad = needs_grad(inputs, dtype);
  return r;
}

}  // namespace tl::capture::fast_meta
