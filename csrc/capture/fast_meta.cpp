#include "capture/fast_meta.h"

#include "capture/fast_meta_rules.h"
#include "capture/torch_api.h"
#include "core/errors.h"

namespace tl::capture {
namespace {

using namespace fast_meta;

Result infer(const OpRule& rule, const Call& c, bool method) {
  switch (rule.family) {
    case OpFamily::Unary:
      return unary(rule, c);
    case OpFamily::Binary:
      return binary(rule, c);
    case OpFamily::Where:
      return where(rule, c, method);
    case OpFamily::MaskedFill:
      return masked_fill(rule, c);
    case OpFamily::Clamp:
      return clamp(rule, c);
    case OpFamily::Reduce:
      return reduce(rule, c);
    case OpFamily::Softmax:
      return softmax(rule, c);
    case OpFamily::LayerNorm:
      return layer_norm(rule, c);
    case OpFamily::BatchNorm:
      return batch_norm(rule, c);
    case OpFamily::GroupNorm:
      return group_norm(rule, c);
    case OpFamily::Cat:
    case OpFamily::Stack:
      return join(rule, c);
    case OpFamily::Tri:
      return tri(rule, c);
    case OpFamily::Linear:
      return linear(rule, c);
    case OpFamily::Addmm:
      return addmm(rule, c);
    case OpFamily::Attention:
      return attention(rule, c);
    case OpFamily::Gather:
      return gather(rule, c);
  }
  throw NotHandled();
}

PyRef int_tuple(const Dims& v) {
  PyRef t = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(v.size())));
  if (!t) throw PythonError();
  for (size_t i = 0; i < v.size(); ++i) {
    PyObject* n = PyLong_FromLongLong(v[i]);
    if (!n) throw PythonError();
    PyTuple_SET_ITEM(t.get(), static_cast<Py_ssize_t>(i), n);
  }
  return t;
}

// A fresh meta tensor; one that needs grad is made by autograd (a clone of a
// leaf), so it is not a leaf, as the op's own result would not be.
PyRef make(const Result& r) {
  if (r.same_as) return PyRef::borrow(r.same_as);
  const TorchApi& api = torch_api();
  PyRef sizes = int_tuple(r.layout.sizes), strides = int_tuple(r.layout.strides);
  PyRef pos = PyRef::steal(PyTuple_Pack(2, sizes.get(), strides.get()));
  PyRef kw = PyRef::steal(Py_BuildValue("{s:O,s:O,s:O}", "dtype", from_dtype(r.dtype), "device",
                                        api.meta_device.get(), "requires_grad",
                                        r.requires_grad ? Py_True : Py_False));
  if (!pos || !kw) throw PythonError();
  PyRef t = PyRef::steal(PyObject_Call(api.empty_strided.get(), pos.get(), kw.get()));
  if (!t) throw PythonError();
  if (r.requires_grad) t = PyRef::steal(PyObject_CallMethod(t.get(), "clone", nullptr));
  if (t && r.viewed_as) {
    PyRef shape = int_tuple(*r.viewed_as);
    t = PyRef::steal(PyObject_CallMethodOneArg(
        t.get(), PyRef::steal(PyUnicode_FromString("view")).get(), shape.get()));
  }
  if (!t) throw PythonError();
  return t;
}

}  // namespace

PyRef fast_meta_call(PyObject* target, const std::string& method, PyObject* self, PyObject* pos,
                     PyObject* kwargs) {
  const OpRule* rule = method.empty() ? rule_for_function(target) : rule_for_method(method);
  if (!rule || !PyTuple_Check(pos)) return PyRef();
  Call c;
  c.kwargs = kwargs;
  c.number_first = method.empty() && is_python_operator(target);
  if (!method.empty()) c.args.push_back(self);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pos); ++i) c.args.push_back(PyTuple_GET_ITEM(pos, i));
  try {
    return make(infer(*rule, c, !method.empty()));
  } catch (const NotHandled&) {
    return PyRef();
  } catch (const PythonError&) {
    clear_expected_error();
    return PyRef();
  }
}

void check_fast_meta(const std::string& op, PyObject* fast, PyObject* real) {
  if (!real) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyRef type = PyRef::steal(t), value = PyRef::steal(v), trace = PyRef::steal(tb);
    PyRef s = value ? PyRef::steal(PyObject_Str(value.get())) : PyRef();
    const char* text = s ? PyUnicode_AsUTF8(s.get()) : nullptr;
    PyErr_Clear();
    TL_CHECK(false) << "fast meta inference answered " << op
                    << " but torch's meta kernel raised: " << (text ? text : "?");
  }
  auto describe = [](PyObject* t) -> std::string {
    if (!is_plain_tensor(t)) return "not a tensor";
    std::string out;
    for (const char* a : {"shape", "dtype", "requires_grad", "device", "_base"}) {
      PyRef v = attr(t, a);
      if (std::string(a) == "_base") v = PyRef::borrow(v.get() == Py_None ? Py_True : Py_False);
      PyRef s = PyRef::steal(PyObject_Str(v.get()));
      if (!s) throw PythonError();
      out += std::string(a == std::string("_base") ? "fresh" : a) + "=" +
             PyUnicode_AsUTF8(s.get()) + " ";
    }
    for (const char* m : {"stride", "storage_offset"}) {
      PyRef v = PyRef::steal(PyObject_CallMethod(t, m, nullptr));
      PyRef s = v ? PyRef::steal(PyObject_Str(v.get())) : PyRef();
      if (!s) throw PythonError();
      out += std::string(m) + "=" + PyUnicode_AsUTF8(s.get()) + " ";
    }
    return out;
  };
  std::string a = describe(fast), b = describe(real);
  TL_CHECK(a == b) << "fast meta inference of " << op
                   << " differs from torch's meta kernel:\n  fast: " << a << "\n  meta: " << b;
}

}  // namespace tl::capture
