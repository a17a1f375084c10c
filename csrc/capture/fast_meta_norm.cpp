// Normalisations.
#include <algorithm>

#include "capture/fast_meta_rules.h"

namespace tl::capture::fast_meta {
namespace {

// A per-channel parameter of a (N, C, ...) input: null/None, or a tensor of
// size (C,) and the input's dtype. Adds it to `inputs` when given.
void read_channel_param(PyObject* p, const Tensor& x, std::optional<Tensor>& out,
                        std::vector<const Tensor*>& inputs) {
  if (!p || p == Py_None) return;
  out = read_tensor(p);
  if (out->dtype != x.dtype || out->layout.sizes != Dims{x.layout.sizes[1]}) throw NotHandled();
  inputs.push_back(&*out);
}

// NOTE: torch's meta kernels of batch and group norm keep a dense input's
// strides but lay out size-1 dimensions by their own rules: answered for
// plainly contiguous and plainly channels-last inputs only.
bool plain_layout(const Tensor& x) {
  const Dims& sz = x.layout.sizes;
  if (x.layout.strides == contiguous_strides(sz)) return true;
  if (sz.size() != 4 || is_contiguous(x.layout)) return false;
  Dims cl = {sz[1] * sz[2] * sz[3], 1, sz[3] * sz[1], sz[1]};
  return x.layout.strides == cl && std::find(sz.begin(), sz.end(), 1) == sz.end();
}

bool is_float_number(PyObject* o) { return PyFloat_CheckExact(o) || PyLong_CheckExact(o); }

}  // namespace

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

// F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
// (variant 'f') and torch.batch_norm(input, weight, bias, running_mean, running_var,
// training, momentum, eps, cudnn_enabled): the input's layout, its dtype.
Result batch_norm(const OpRule& rule, const Call& c) {
  bool functional = rule.variant == 'f';
  if (functional)
    c.only_keywords(
        {"running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"});
  else
    c.only_keywords({});
  if (c.args.empty() || c.args.size() > (functional ? 8u : 9u)) throw NotHandled();
  Tensor x = read_tensor(c.args[0]);
  if (!is_float(x.dtype) || x.layout.sizes.size() < 2 || !plain_layout(x)) throw NotHandled();
  PyObject* mean = c.arg(functional ? 1 : 3, "running_mean");
  PyObject* var = c.arg(functional ? 2 : 4, "running_var");
  PyObject* weight = c.arg(functional ? 3 : 1, "weight");
  PyObject* bias = c.arg(functional ? 4 : 2, "bias");
  PyObject* training = c.arg(5, "training");
  PyObject* momentum = c.arg(6, "momentum");
  PyObject* eps = c.arg(7, "eps");
  if (!functional && (!mean || !var || !weight || !bias || !training || !momentum || !eps ||
                      c.args.size() != 9 || !PyBool_Check(c.args[8])))
    throw NotHandled();
  bool train = training == Py_True;
  if (training && !PyBool_Check(training)) throw NotHandled();
  if (momentum && !is_float_number(momentum)) throw NotHandled();
  if (eps && !is_float_number(eps)) throw NotHandled();
  // NOTE: torch raises without running statistics in eval mode and with one value per
  // channel in training.
  if (!train && (!mean || mean == Py_None || !var || var == Py_None)) throw NotHandled();
  if (train && numel(x.layout.sizes) / x.layout.sizes[1] <= 1) throw NotHandled();
  std::vector<const Tensor*> inputs = {&x};
  std::optional<Tensor> params[4];
  read_channel_param(weight, x, params[0], inputs);
  read_channel_param(bias, x, params[1], inputs);
  std::vector<const Tensor*> stats;  // never differentiated through
  read_channel_param(mean, x, params[2], stats);
  read_channel_param(var, x, params[3], stats);
  for (const Tensor* s : stats)
    if (s->requires_grad) throw NotHandled();
  Result r{x.layout, x.dtype, false};
  r.requires_grad = needs_grad(inputs, x.dtype);
  return r;
}

// group_norm(input, num_groups, weight, bias, eps[, cudnn_enabled]) of a contiguous input:
// contiguous.
// NOTE: a channels-last input's result follows the torch version (contiguous up to 2.14,
// channels-last from 2.15 on): the real meta kernel answers those.
Result group_norm(const OpRule&, const Call& c) {
  c.only_keywords({"num_groups", "weight", "bias", "eps"});
  if (c.args.empty() || c.args.size() > 6) throw NotHandled();
  Tensor x = read_tensor(c.args[0]);
  if (!is_float(x.dtype) || x.layout.sizes.size() < 2 ||
      x.layout.strides != contiguous_strides(x.layout.sizes))
    throw NotHandled();
  PyObject* groups = c.arg(1, "num_groups");
  if (!groups || !PyLong_CheckExact(groups)) throw NotHandled();
  long long g = PyLong_AsLongLong(groups);
  throw_if_python_error();
  if (g <= 0 || x.layout.sizes[1] % g != 0) throw NotHandled();
  std::vector<const Tensor*> inputs = {&x};
  std::optional<Tensor> params[2];
  read_channel_param(c.arg(2, "weight"), x, params[0], inputs);
  read_channel_param(c.arg(3, "bias"), x, params[1], inputs);
  PyObject* eps = c.arg(4, "eps");
  if (eps && !is_float_number(eps)) throw NotHandled();
  if (c.args.size() == 6 && !PyBool_Check(c.args[5])) throw NotHandled();
  return contiguous_result(x.layout.sizes, x.dtype, inputs);
}

}  // namespace tl::capture::fast_meta
