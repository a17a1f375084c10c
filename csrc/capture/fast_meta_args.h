#pragma once
// What fast_meta's rules read from a call: meta tensors of modelled dtypes,
// Python numbers, positional/keyword arguments; and what they answer.
#include <optional>
#include <string>
#include <vector>

#include "capture/dtype_promotion.h"
#include "capture/fast_meta_ops.h"
#include "capture/meta_layout.h"
#include "core/errors.h"
#include "core/py_ref.h"

namespace tl::capture::fast_meta {

// Thrown (and caught in fast_meta_call) when a call is not one answered here.
struct NotHandled {};

DType to_dtype(PyObject* o);    // DType::Other for dtypes not modelled
PyObject* from_dtype(DType d);  // borrowed
PyObject* strided_layout();     // torch.strided, borrowed

PyRef attr(PyObject* o, const char* name);  // new reference; throws PythonError
// A tuple of Python ints (no SymInts), or NotHandled.
Dims ints_of(PyObject* seq);
// A tuple/list of ints or one int repeated `n` times (stride=2 for two dimensions).
Dims ints_or_int(PyObject* o, size_t n);

struct Tensor {
  Layout layout;
  DType dtype;
  bool requires_grad;
};

bool is_plain_tensor(PyObject* o);
// A plain strided meta tensor of a modelled dtype with elements, or NotHandled.
Tensor read_tensor(PyObject* o);

// One operand: a tensor or a Python bool/int/float.
struct Operand {
  std::optional<Tensor> tensor;
  PromotionArg promo;
};
Operand read_operand(PyObject* o);

// The call's arguments as one list (self first for methods) and its keywords.
struct Call {
  std::vector<PyObject*> args;
  PyObject* kwargs;           // may be null
  bool number_first = false;  // operator.add(2, x); torch.add and methods take a tensor first

  PyObject* kw(const char* name) const {
    return kwargs ? PyDict_GetItemString(kwargs, name) : nullptr;
  }
  // Argument `i` given by position or keyword `name`, or null.
  PyObject* arg(size_t i, const char* name) const {
    PyObject* by_kw = kw(name);
    if (i < args.size()) {
      if (by_kw) throw NotHandled();
      return args[i];
    }
    return by_kw;
  }
  // Every keyword is one of `allowed`.
  void only_keywords(std::initializer_list<const char*> allowed) const;
};

inline bool is_false_or_absent(PyObject* o) { return !o || o == Py_False; }

struct Result {
  Layout layout;
  DType dtype;
  bool requires_grad;
  std::optional<Dims> viewed_as;  // the op returns a view of this size of its result
  PyObject* same_as = nullptr;    // an in-place op returns this argument itself (borrowed)
};

// Autograd records the op when grad mode is on, an input needs grad and the
// result can hold gradients (integer and bool results never do).
bool needs_grad(const std::vector<const Tensor*>& inputs, DType out);
DType default_float();
// NOTE: ops that copy a contiguous input as is (x.contiguous() returns x) keep
// its strides of size-1 dimensions, whatever they are; answered only when
// those are the canonical ones, so the result is plainly contiguous.
void require_canonical_if_contiguous(const Tensor& t);
int64_t wrap_dim(PyObject* o, size_t ndim);
// A fresh contiguous result of `sizes` and `dtype`; requires_grad from `inputs`.
Result contiguous_result(const Dims& sizes, DType dtype, const std::vector<const Tensor*>& inputs);

}  // namespace tl::capture::fast_meta
