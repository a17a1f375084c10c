#include "guards/tensor_match.h"

#include <algorithm>
#include <sstream>

#include "core/errors.h"
#include "ir/graph.h"

namespace tl::guards {

namespace {
// Interned attribute names, created once and never freed.
PyObject* field_name(int f) {
  static PyObject* names[] = {
      PyUnicode_InternFromString("dtype"),         PyUnicode_InternFromString("device"),
      PyUnicode_InternFromString("requires_grad"), PyUnicode_InternFromString("shape"),
      PyUnicode_InternFromString("is_cpu"),        PyUnicode_InternFromString("layout"),
      PyUnicode_InternFromString("_version")};
  return names[f];
}
PyObject* stride_name() {
  static PyObject* name = PyUnicode_InternFromString("stride");
  return name;
}
PyObject* is_inference_name() {
  static PyObject* name = PyUnicode_InternFromString("is_inference");
  return name;
}

std::string repr(PyObject* v) {
  PyRef r = PyRef::steal(PyObject_Str(v));
  const char* s = r ? PyUnicode_AsUTF8(r.get()) : nullptr;
  if (!s) {
    PyErr_Clear();
    return "?";
  }
  return s;
}

// Sizes or strides as integers; throws on a non-int entry (e.g. a SymInt).
std::vector<Py_ssize_t> to_ints(PyObject* tuple) {
  TL_CHECK(PyTuple_Check(tuple)) << "expected a tuple of ints, got " << Py_TYPE(tuple)->tp_name;
  std::vector<Py_ssize_t> out(PyTuple_GET_SIZE(tuple));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(tuple, i));
    if (out[i] == -1 && PyErr_Occurred()) throw PythonError();
  }
  return out;
}

// True when the tuple of ints equals `expected`; stops at the first difference.
bool ints_equal(PyObject* tuple, const std::vector<Py_ssize_t>& expected) {
  if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != (Py_ssize_t)expected.size()) return false;
  for (size_t i = 0; i < expected.size(); ++i) {
    PyObject* item = PyTuple_GET_ITEM(tuple, i);
    // NOTE: small ints are cached, so this is usually one compare.
    Py_ssize_t got = PyLong_AsSsize_t(item);
    if (got == -1 && PyErr_Occurred()) throw PythonError();
    if (got != expected[i]) return false;
  }
  return true;
}

// A dynamic guard's layout test (dynamic_difference(...).empty()) on the shape and stride
// tuples as read, without copying them: the per-call path of size-generic entries.
template <class Dims>
bool dynamic_layout_matches(PyObject* shape, PyObject* stride,
                            const std::vector<Py_ssize_t>& recorded, const Dims& dynamic,
                            bool any_strides) {
  const Py_ssize_t n = static_cast<Py_ssize_t>(recorded.size());
  if (!PyTuple_Check(shape) || !PyTuple_Check(stride) || PyTuple_GET_SIZE(shape) != n ||
      PyTuple_GET_SIZE(stride) != n)
    return false;
  size_t k = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    Py_ssize_t got = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
    if (got == -1 && PyErr_Occurred()) throw PythonError();
    if (k < dynamic.size() && dynamic[k].dim == i) {
      const auto& d = dynamic[k++];
      if (got < d.min || (d.max >= 0 && got > d.max)) return false;
    } else if (got != recorded[i]) {
      return false;
    }
  }
  if (any_strides) return true;
  // NOTE: contiguous strides of the sizes (size-0 and size-1 dims count as 1).
  Py_ssize_t step = 1;
  for (Py_ssize_t i = n; i-- > 0;) {
    Py_ssize_t got = PyLong_AsSsize_t(PyTuple_GET_ITEM(stride, i));
    if (got == -1 && PyErr_Occurred()) throw PythonError();
    if (got != step) return false;
    step *= std::max<Py_ssize_t>(PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i)), 1);
  }
  return true;
}

// TensorGuards(tensor).check, or null (error cleared) when this torch has none or it does not
// pass `tensor` itself.
PyRef torch_tensor_check(PyObject* tensor) {
  static PyObject* const guards_type = [] {
    PyRef m = PyRef::steal(PyImport_ImportModule("torch._C._dynamo.guards"));
    PyObject* t = m ? PyObject_GetAttrString(m.get(), "TensorGuards") : nullptr;
    if (!t) PyErr_Clear();
    return t;  // NOTE: kept for the process, as the interned names above
  }();
  if (!guards_type) return {};
  // NOTE: keywords always (its init reads them from the kwargs dict without a null check);
  // None: sizes and strides exact. A torch whose init wants others raises: no shortcut.
  PyRef args = PyRef::steal(PyTuple_Pack(1, tensor));
  PyRef kwargs = PyRef::steal(
      Py_BuildValue("{sOsO}", "dynamic_dims_sizes", Py_None, "dynamic_dims_strides", Py_None));
  PyRef guards =
      args && kwargs ? PyRef::steal(PyObject_Call(guards_type, args.get(), kwargs.get())) : PyRef();
  PyRef check = guards ? PyRef::steal(PyObject_GetAttrString(guards.get(), "check")) : PyRef();
  PyRef self = check ? PyRef::steal(PyObject_CallOneArg(check.get(), tensor)) : PyRef();
  if (!self || self.get() != Py_True) {
    PyErr_Clear();
    return {};
  }
  return check;
}

std::string join(const std::vector<Py_ssize_t>& v) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  if (v.size() == 1) os << ",";
  os << ")";
  return os.str();
}

std::string mismatch_at(const char* what, const std::vector<Py_ssize_t>& want,
                        const std::vector<Py_ssize_t>& got) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] != got[i]) {
      std::ostringstream os;
      os << what << " mismatch at dim " << i << ": expected " << want[i] << ", got " << got[i];
      return os.str();
    }
  }
  return std::string(what) + " mismatch";
}
}  // namespace

TensorMatch::TensorMatch(PyObject* tensor) : type_(PyRef::borrow((PyObject*)Py_TYPE(tensor))) {
  PyTypeObject* type = Py_TYPE(tensor);
  for (int f = 0; f < kNumFields; ++f) {
    PyObject* d = _PyType_Lookup(type, field_name(f));  // borrowed
    getters_[f] = d && Py_IS_TYPE(d, &PyGetSetDescr_Type)
                      ? reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset
                      : nullptr;
  }
  PyObject* stride = _PyType_Lookup(type, stride_name());  // borrowed
  if (stride && Py_IS_TYPE(stride, &PyMethodDescr_Type)) stride_method_ = PyRef::borrow(stride);
  PyObject* is_inference = _PyType_Lookup(type, is_inference_name());  // borrowed
  if (is_inference && Py_IS_TYPE(is_inference, &PyMethodDescr_Type))
    is_inference_method_ = PyRef::borrow(is_inference);
  bool all = static_cast<bool>(stride_method_);
  for (auto* g : getters_) all = all && g && g->get;
  fast_tag_ = all ? type->tp_version_tag : 0;

  dtype_ = read(tensor, kDtype);
  device_ = read(tensor, kDevice);
  cpu_ = read(tensor, kIsCpu).get() == Py_True;
  requires_grad_ = read(tensor, kRequiresGrad).get() == Py_True;
  inference_ = read_inference(tensor);
  sizes_ = to_ints(read(tensor, kShape).get());
  strides_ = to_ints(read_strides(tensor).get());
  layout_ = read(tensor, kLayout);
  // NOTE: other layouts either raise on stride()/shape (caught in check) or,
  // for sparse COO, report all-zero strides: only a guard expecting a zero
  // stride (or a 0-d tensor) can confuse them, so only those pay for the read.
  check_layout_ = sizes_.empty() || std::count(strides_.begin(), strides_.end(), 0) > 0;
  fast_check_ = torch_tensor_check(tensor);
}

PyRef TensorMatch::read(PyObject* v, Field f) const {
  PyObject* r = fast_valid() && Py_TYPE(v) == (PyTypeObject*)type_.get()
                    ? getters_[f]->get(v, getters_[f]->closure)
                    : PyObject_GetAttr(v, field_name(f));
  if (!r) throw PythonError();
  return PyRef::steal(r);
}

PyRef TensorMatch::shape_of(PyObject* v) const {
  try {
    PyRef shape = read(v, kShape);
    if (PyTuple_Check(shape.get())) return shape;
  } catch (const PythonError&) {
    clear_expected_error();
  }
  return PyRef();
}

PyRef TensorMatch::read_strides(PyObject* v) const {
  PyObject* r = fast_valid() && Py_TYPE(v) == (PyTypeObject*)type_.get()
                    ? PyObject_Vectorcall(stride_method_.get(), &v, 1, nullptr)
                    : PyObject_CallMethodNoArgs(v, stride_name());
  if (!r) throw PythonError();
  return PyRef::steal(r);
}

bool TensorMatch::read_inference(PyObject* v) const {
  // NOTE: a guard that expects an inference tensor asks is_inference(): reading `_version`
  // of an inference tensor raises, and a C++ exception turned into a Python one and cleared
  // on every call costs far more than the method's argument parsing.
  if (inference_) {
    PyObject* r = fast_valid() && is_inference_method_ && Py_TYPE(v) == (PyTypeObject*)type_.get()
                      ? PyObject_Vectorcall(is_inference_method_.get(), &v, 1, nullptr)
                      : PyObject_CallMethodNoArgs(v, is_inference_name());
    if (!r) throw PythonError();
    bool yes = r == Py_True;
    Py_DECREF(r);
    return yes;
  }
  // Otherwise through the `_version` getter, not is_inference(): that method goes through
  // torch's argument parser (measured 5x a getter per guard). Only an inference tensor has
  // no version counter, so only it raises here, and then the guard fails anyway.
  PyObject* r = fast_valid() && Py_TYPE(v) == (PyTypeObject*)type_.get()
                    ? getters_[kVersion]->get(v, getters_[kVersion]->closure)
                    : PyObject_GetAttr(v, field_name(kVersion));
  if (r) {
    Py_DECREF(r);
    return false;
  }
  clear_expected_error();
  return true;
}

bool TensorMatch::check(PyObject* v) const {
  if ((PyObject*)Py_TYPE(v) != type_.get()) return false;
  if (fast_check_ && dynamic_.empty()) {
    PyObject* r = PyObject_Vectorcall(fast_check_.get(), &v, 1, nullptr);
    if (r == Py_True) {
      Py_DECREF(r);
      return true;
    }
    if (r)
      Py_DECREF(r);
    else
      clear_expected_error();
    bool passed = check_by_reads(v);
    if (passed && ++fast_misses_ >= kMaxFastMisses) fast_check_ = PyRef();
    return passed;
  }
  return check_by_reads(v);
}

bool TensorMatch::check_by_reads(PyObject* v) const {
  try {
    if (read(v, kDtype).get() != dtype_.get()) return false;  // dtypes are singletons
    if (cpu_) {
      if (read(v, kIsCpu).get() != Py_True) return false;
    } else {
      int eq = PyObject_RichCompareBool(read(v, kDevice).get(), device_.get(), Py_EQ);
      if (eq < 0) throw PythonError();
      if (eq == 0) return false;
    }
    if ((read(v, kRequiresGrad).get() == Py_True) != requires_grad_) return false;
    if (read_inference(v) != inference_) return false;
    if (!dynamic_.empty()) {
      if (!dynamic_layout_matches(read(v, kShape).get(), read_strides(v).get(), sizes_, dynamic_,
                                  any_strides_))
        return false;
    } else if (!ints_equal(read(v, kShape).get(), sizes_) ||
               !ints_equal(read_strides(v).get(), strides_)) {
      return false;
    }
    return !check_layout_ || read(v, kLayout).get() == layout_.get();
  } catch (const PythonError&) {
    // A tensor of the right type whose metadata cannot be read (a sparse or
    // nested tensor has no strides): not the tensor traced, so the guard fails.
    clear_expected_error();  // NOTE: Ctrl-C while reading it still reaches the user
    return false;
  }
}

std::string TensorMatch::mismatch(PyObject* v) const {
  try {
    return first_difference(v);
  } catch (const PythonError&) {
    PyErr_Clear();
    return "metadata could not be read (not a strided tensor?)";
  }
}

std::string TensorMatch::first_difference(PyObject* v) const {
  auto expected = [](const char* what, const std::string& want, const std::string& got) {
    return std::string(what) + " mismatch: expected " + want + ", got " + got;
  };
  PyTypeObject* want_type = reinterpret_cast<PyTypeObject*>(type_.get());
  if (Py_TYPE(v) != want_type) return expected("type", want_type->tp_name, Py_TYPE(v)->tp_name);
  PyRef dtype = read(v, kDtype);
  if (dtype.get() != dtype_.get()) return expected("dtype", repr(dtype_.get()), repr(dtype.get()));
  PyRef device = read(v, kDevice);
  if (PyObject_RichCompareBool(device.get(), device_.get(), Py_EQ) != 1) {
    PyErr_Clear();
    return expected("device", repr(device_.get()), repr(device.get()));
  }
  bool rg = read(v, kRequiresGrad).get() == Py_True;
  if (rg != requires_grad_)
    return expected("requires_grad", requires_grad_ ? "True" : "False", rg ? "True" : "False");
  if (read_inference(v) != inference_)
    return inference_ ? "not an inference tensor (traced with one)"
                      : "an inference tensor (traced with a normal one)";
  std::vector<Py_ssize_t> sizes = to_ints(read(v, kShape).get());
  if (sizes.size() != sizes_.size())
    return expected("rank", std::to_string(sizes_.size()), std::to_string(sizes.size()));
  if (!dynamic_.empty()) {
    std::string why = dynamic_difference(sizes, to_ints(read_strides(v).get()));
    if (!why.empty()) return why;
    return expected("layout", repr(layout_.get()), repr(read(v, kLayout).get()));
  }
  if (sizes != sizes_) return mismatch_at("size", sizes_, sizes);
  std::vector<Py_ssize_t> strides = to_ints(read_strides(v).get());
  if (strides != strides_) return mismatch_at("stride", strides_, strides);
  return expected("layout", repr(layout_.get()), repr(read(v, kLayout).get()));
}

std::string TensorMatch::str() const {
  ir::TensorMeta meta;
  meta.dtype = dtype_;
  meta.sizes.assign(sizes_.begin(), sizes_.end());
  std::string s = meta.str() + " stride=" + join(strides_) + " " + repr(device_.get());
  s += requires_grad_ ? " requires_grad=True" : " requires_grad=False";
  if (inference_) s += " inference=True";
  if (!dynamic_.empty()) {
    std::ostringstream os;
    os << " dynamic=";
    for (size_t i = 0; i < dynamic_.size(); ++i) {
      const DynamicDim& d = dynamic_[i];
      os << (i ? "," : "") << d.dim << ":" << d.min << "..";
      if (d.max >= 0) os << d.max;
    }
    if (any_strides_) os << " any_strides";
    s += os.str();
  }
  if (std::string(reinterpret_cast<PyTypeObject*>(type_.get())->tp_name) != "Tensor")
    s += std::string(" type=") + reinterpret_cast<PyTypeObject*>(type_.get())->tp_name;
  return s;
}

bool TensorMatch::same_as(const TensorMatch& o) const {
  if (type_.get() != o.type_.get() || dtype_.get() != o.dtype_.get() || cpu_ != o.cpu_ ||
      layout_.get() != o.layout_.get() || requires_grad_ != o.requires_grad_ ||
      inference_ != o.inference_ || sizes_ != o.sizes_ || strides_ != o.strides_ ||
      dynamic_.size() != o.dynamic_.size() || any_strides_ != o.any_strides_)
    return false;
  for (size_t i = 0; i < dynamic_.size(); ++i)
    if (dynamic_[i].dim != o.dynamic_[i].dim || dynamic_[i].min != o.dynamic_[i].min ||
        dynamic_[i].max != o.dynamic_[i].max)
      return false;
  int eq = PyObject_RichCompareBool(device_.get(), o.device_.get(), Py_EQ);
  if (eq < 0) throw PythonError();
  return eq == 1;
}

TensorMatch TensorMatch::with_dynamic_dims(std::vector<DynamicDim> dims) const {
  TensorMatch out = *this;
  for (DynamicDim& d : dims) d.min = std::max<int64_t>(d.min, 2);
  std::sort(dims.begin(), dims.end(),
            [](const DynamicDim& a, const DynamicDim& b) { return a.dim < b.dim; });
  out.dynamic_ = std::move(dims);
  return out;
}

namespace {
// torch's contiguous strides of `sizes` (size-0 and size-1 dims count as 1).
std::vector<Py_ssize_t> dense_strides(const std::vector<Py_ssize_t>& sizes) {
  std::vector<Py_ssize_t> out(sizes.size());
  Py_ssize_t step = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    out[i] = step;
    step *= std::max<Py_ssize_t>(sizes[i], 1);
  }
  return out;
}
}  // namespace

TensorMatch TensorMatch::with_all_sizes_dynamic(int64_t min_size, bool any_strides) const {
  std::vector<DynamicDim> dims;
  for (size_t i = 0; i < sizes_.size(); ++i)
    if (sizes_[i] >= min_size) dims.push_back(DynamicDim{static_cast<int>(i), min_size, -1});
  if (dims.empty() || (!any_strides && strides_ != dense_strides(sizes_))) return *this;
  // NOTE: not with_dynamic_dims, which keeps 0 and 1 exact: here the caller chose min_size.
  TensorMatch out = *this;
  out.dynamic_ = std::move(dims);  // in dimension order
  out.any_strides_ = any_strides;
  return out;
}

std::string TensorMatch::dynamic_difference(const std::vector<Py_ssize_t>& sizes,
                                            const std::vector<Py_ssize_t>& strides) const {
  if (sizes.size() != sizes_.size())
    return "rank mismatch: expected " + std::to_string(sizes_.size()) + ", got " +
           std::to_string(sizes.size());
  size_t k = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (k < dynamic_.size() && dynamic_[k].dim == static_cast<int>(i)) {
      const DynamicDim& d = dynamic_[k++];
      if (sizes[i] < d.min || (d.max >= 0 && sizes[i] > d.max))
        return "size mismatch at dim " + std::to_string(i) + ": expected " + std::to_string(d.min) +
               ".." + (d.max < 0 ? std::string("") : std::to_string(d.max)) + " (dynamic), got " +
               std::to_string(sizes[i]);
    } else if (sizes[i] != sizes_[i]) {
      return mismatch_at("size", sizes_, sizes);
    }
  }
  // NOTE: the entry was traced on a contiguous tensor; its graphs are compiled per layout
  // (frame/size_generic.h), but only contiguous layouts are promised to it.
  if (!any_strides_ && strides != dense_strides(sizes))
    return mismatch_at("stride", dense_strides(sizes), strides);
  return "";
}

}  // namespace tl::guards
