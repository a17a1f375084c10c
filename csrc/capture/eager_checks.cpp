#include "capture/eager_checks.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <unordered_set>
#include <vector>

#include "capture/context.h"
#include "capture/graph_break.h"
#include "capture/torch_api.h"
#include "core/errors.h"
#include "guards/storage_aliasing.h"

namespace tl::capture {
namespace {

// A Python bool, or a tensor of dtype torch.bool (its meta tensor is asked).
bool is_bool_operand(const ValuePtr& v) {
  if (v->is_const()) return PyBool_Check(v->obj.get());
  if (!v->is_tensor() || !v->meta) return false;
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(v->meta.get(), "dtype"));
  if (!dtype) throw PythonError();
  PyRef name = PyRef::steal(PyObject_Str(dtype.get()));
  if (!name) throw PythonError();
  return PyUnicode_CompareWithASCIIString(name.get(), "torch.bool") == 0;
}

// An op writing into its first argument: add_, iadd, __iadd__, copy_ (setitem writes x[index]).
bool writes_first_argument(const std::string& op) {
  static const std::unordered_set<std::string> augmented = {
      "iadd", "isub", "imul", "itruediv", "ifloordiv", "imod",   "ipow",
      "iand", "ior",  "ixor", "ilshift",  "irshift",   "imatmul"};
  if (augmented.count(op)) return true;
  // NOTE: operator.and_/or_/not_ (`a | b` on masks) end in '_' only because their names are
  // keywords: they make a new tensor (funnel broke at `mask[1:] | mask[:-1]`).
  if (op == "and_" || op == "or_" || op == "not_") return false;
  if (op.size() > 4 && op.rfind("__", 0) == 0 && op.compare(op.size() - 2, 2, "__") == 0)
    return augmented.count(op.substr(2, op.size() - 4)) > 0;
  return op.size() > 1 && op.back() == '_' && op.front() != '_';
}

struct Extent {
  long long storage = 0;           // the storage's identity (the real one for an input's memory)
  long long first = 0, last = -1;  // bytes it may touch
  std::vector<long long> layout;   // byte offset, element size, sizes, strides
};

long long as_ll(PyObject* o) {
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) throw PythonError();
  return v;
}

PyRef call0(PyObject* o, const char* name) {
  PyRef r = PyRef::steal(PyObject_CallMethod(o, name, nullptr));
  if (!r) throw PythonError();
  return r;
}

// The bytes `meta` covers, placed in the real storage when it views a tensor input's memory.
Extent extent_of(const RealStorageOf& real_storage, PyObject* meta) {
  Extent e;
  e.storage = guards::storage_id(meta);
  long long base = 0;
  if (auto real = real_storage(e.storage)) {
    e.storage = real->storage;
    base = real->byte_offset;
  }
  long long item = as_ll(call0(meta, "element_size").get());
  long long offset = as_ll(call0(meta, "storage_offset").get());
  PyRef sizes = call0(meta, "size"), strides = call0(meta, "stride");
  e.layout.push_back(base + offset * item);
  e.layout.push_back(item);
  long long span = 0;
  bool empty = false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sizes.get()); ++i) {
    long long n = as_ll(PyTuple_GET_ITEM(sizes.get(), i));
    long long st = as_ll(PyTuple_GET_ITEM(strides.get(), i));
    e.layout.push_back(n);
    e.layout.push_back(st);
    empty = empty || n == 0;
    span += (n - 1) * (st < 0 ? -st : st);
  }
  if (!empty) {
    e.first = base + offset * item;
    e.last = base + (offset + span) * item + item - 1;
  }
  return e;
}

// One dimension of the search below: an index in [0, count] times `stride` (in elements).
struct Term {
  long long stride = 0, count = 0;
};

// False only when no element of the view `w` is an element of the view `o` (layouts as in
// Extent, same storage): then reading `o` before writing `w` (the graph's order) gives what any
// eager loop order gives. Solves w.offset + sum(i*a) == o.offset + sum(j*b) over the index
// boxes by a depth-first search, largest strides first, pruned by what the smaller strides can
// still reach; an unsure answer (other element sizes, a search too long) is "may share".
bool may_share_elements(const std::vector<long long>& w, const std::vector<long long>& o) {
  if (w[1] != o[1] || w[1] <= 0) return true;
  long long item = w[1], d = o[0] - w[0];
  if (d % item != 0) return true;
  d /= item;
  std::vector<Term> terms;
  for (size_t k = 2; k + 1 < w.size(); k += 2) {
    if (w[k] > 1 && w[k + 1] == 0) return true;  // the write itself overlaps: eager decides
    if (w[k] > 1) terms.push_back({w[k + 1], w[k] - 1});
  }
  for (size_t k = 2; k + 1 < o.size(); k += 2)
    if (o[k] > 1 && o[k + 1] != 0) terms.push_back({-o[k + 1], o[k] - 1});
  std::sort(terms.begin(), terms.end(), [](const Term& a, const Term& b) {
    return std::llabs(a.stride) > std::llabs(b.stride);
  });
  // low[k]/high[k]: the least/greatest sum the terms from k on reach.
  std::vector<long long> low(terms.size() + 1, 0), high(terms.size() + 1, 0);
  for (size_t k = terms.size(); k-- > 0;) {
    long long reach = terms[k].stride * terms[k].count;
    low[k] = low[k + 1] + std::min(0LL, reach);
    high[k] = high[k + 1] + std::max(0LL, reach);
  }
  long long budget = 100000;
  std::function<bool(size_t, long long)> reach = [&](size_t k, long long target) -> bool {
    if (--budget < 0) return true;
    if (target < low[k] || target > high[k]) return false;
    if (k == terms.size()) return target == 0;
    const Term& t = terms[k];
    // c * stride must land within [target - high[k+1], target - low[k+1]].
    long long a = target - high[k + 1], b = target - low[k + 1], s = t.stride;
    if (s < 0) std::swap(a, b), a = -a, b = -b, s = -s;
    long long lo = std::max(0LL, a <= 0 ? -((-a) / s) : (a + s - 1) / s);
    long long hi = std::min(t.count, b < 0 ? -((-b + s - 1) / s) : b / s);
    for (long long c = lo; c <= hi; ++c)
      if (reach(k + 1, target - c * t.stride)) return true;
    return false;
  };
  return reach(0, d);
}

// True when `operand` shares some of the memory `written` (both meta tensors) covers without
// being the very same view: eager's in-place kernels refuse that when both are dense, and
// otherwise write in an order of their own, so only views with no element in common (the
// columns `x[..., -1] = x[..., 0]` touches) are traced.
bool partly_overlaps(const RealStorageOf& real, PyObject* written, PyObject* operand) {
  if (written == operand) return false;
  Extent w = extent_of(real, written), o = extent_of(real, operand);
  return o.storage == w.storage && o.layout != w.layout && o.last >= w.first && w.last >= o.first &&
         may_share_elements(w.layout, o.layout);
}

}  // namespace

int overlapping_operand(const RealStorageOf& real, const std::string& op_name,
                        const std::vector<PyObject*>& args) {
  PyObject* written = nullptr;
  PyRef dest;
  size_t first_operand = 1;
  PyObject* tensor = torch_api().tensor_type.get();
  auto is_tensor = [&](PyObject* o) {
    int r = o ? PyObject_IsInstance(o, tensor) : 0;
    if (r < 0) throw PythonError();
    return r == 1;
  };
  if ((op_name == "setitem" || op_name == "__setitem__") && args.size() == 3 &&
      is_tensor(args[0]) && args[1]) {
    dest = PyRef::steal(PyObject_GetItem(args[0], args[1]));
    if (!dest) clear_expected_error();  // the op itself raises that, on meta tensors too
    written = dest.get();
    first_operand = 2;
  } else if (writes_first_argument(op_name) && args.size() >= 2 && is_tensor(args[0])) {
    written = args[0];
  }
  for (size_t i = first_operand; written && i < args.size(); ++i)
    if (is_tensor(args[i]) && partly_overlaps(real, written, args[i])) return static_cast<int>(i);
  return -1;
}

void check_eager_only_errors(const CaptureContext& ctx, const std::string& op_name,
                             const std::vector<ValuePtr>& args) {
  // NOTE: the check that an in-place op's operand does not partly overlap the tensor it writes
  // (`x.add_(x[1])`) runs in the CPU/CUDA kernels only: a graph raising there would drop the
  // side effects eager made before it.
  bool setitem = (op_name == "setitem" || op_name == "__setitem__") && args.size() == 3 &&
                 args[0]->is_tensor() && args[0]->meta;
  if (setitem || writes_first_argument(op_name)) {
    std::vector<PyRef> held;
    std::vector<PyObject*> metas;
    for (size_t i = 0; i < args.size(); ++i) {
      if (setitem && i == 1) {
        held.push_back(to_meta_arg(args[1]));
        if (!held.back()) clear_expected_error();  // the op itself raises that
      } else {
        held.push_back(args[i]->is_tensor() && args[i]->meta ? args[i]->meta : PyRef());
      }
      metas.push_back(held.back().get());
    }
    auto real = [&ctx](long long meta_storage) { return ctx.real_storage(meta_storage); };
    if (overlapping_operand(real, op_name, metas) >= 0)
      graph_break("op_error", op_name +
                                  " with an operand sharing memory with the tensor it writes (it "
                                  "runs eagerly, where torch checks the overlap)");
  }
  // NOTE: torch's sub_check runs in the CPU/CUDA kernels only (measured on torch 2.13): on meta
  // tensors `x - True` and `x - bool_tensor` return a result, in eager they raise.
  static const std::unordered_set<std::string> subtractions = {
      "sub", "sub_", "rsub", "isub", "subtract", "subtract_", "__sub__", "__rsub__", "__isub__"};
  if (!subtractions.count(op_name) || args.size() < 2) return;
  bool any_tensor = false, any_bool = false;
  for (size_t i = 0; i < 2; ++i) {
    any_tensor = any_tensor || args[i]->is_tensor();
    any_bool = any_bool || is_bool_operand(args[i]);
  }
  if (any_tensor && any_bool)
    graph_break("op_error",
                op_name +
                    " with a bool operand raises in eager but not on meta tensors (it runs "
                    "eagerly so the real error surfaces)");
}

}  // namespace tl::capture
