#include "ir/dtype.h"

#include "core/errors.h"
#include "core/py_ref.h"

namespace tl::ir {
namespace {

constexpr int kNumTypes = static_cast<int>(ScalarType::Bool) + 1;

// NOTE: the dtype objects are looked up once and intentionally never released:
// torch's dtypes are immortal for the process and static destructors would
// run after the interpreter is gone.
PyObject* const* dtype_table() {
  static PyObject** table = [] {
    static const char* names[kNumTypes] = {"float32", "float64", "float16", "bfloat16", "int8",
                                           "int16",   "int32",   "int64",   "uint8",    "bool"};
    PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
    if (!torch) throw PythonError();
    auto** t = new PyObject*[kNumTypes];
    for (int i = 0; i < kNumTypes; ++i) {
      t[i] = PyObject_GetAttrString(torch.get(), names[i]);  // new reference, kept
      if (!t[i]) throw PythonError();
    }
    return t;
  }();
  return table;
}

// Promotion lattice of two types of the same category (c10::promoteTypes).
ScalarType promote_pair(ScalarType a, ScalarType b) {
  if (a == b) return a;
  if (a == ScalarType::Bool) return b;
  if (b == ScalarType::Bool) return a;
  bool fa = ir::is_floating(a), fb = ir::is_floating(b);
  if (fa != fb) return fa ? a : b;
  if (fa) {
    if ((a == ScalarType::F16 && b == ScalarType::BF16) ||
        (a == ScalarType::BF16 && b == ScalarType::F16))
      return ScalarType::F32;
    return ir::scalar_type_size(a) >= ir::scalar_type_size(b) ? a : b;
  }
  bool ua = a == ScalarType::U8, ub = b == ScalarType::U8;
  if (ua || ub) {  // u8 with a signed type: the next signed type that holds both
    ScalarType s = ua ? b : a;
    return s == ScalarType::I8 ? ScalarType::I16 : s;
  }
  return ir::scalar_type_size(a) >= ir::scalar_type_size(b) ? a : b;
}

int category(ScalarType t) { return t == ScalarType::Bool ? 0 : ir::is_floating(t) ? 2 : 1; }

// c10 combine_categories: the higher-priority state wins unless the lower one
// is of a higher category.
std::optional<ScalarType> combine(std::optional<ScalarType> higher,
                                  std::optional<ScalarType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (ir::is_floating(*higher)) return higher;
  if (*higher == ScalarType::Bool || ir::is_floating(*lower)) return promote_pair(*higher, *lower);
  return higher;
}

}  // namespace

std::optional<ScalarType> scalar_type_of(PyObject* dtype) {
  PyObject* const* t = dtype_table();
  for (int i = 0; i < kNumTypes; ++i)
    if (t[i] == dtype) return static_cast<ScalarType>(i);
  return std::nullopt;
}

PyObject* torch_dtype_of(ScalarType t) { return dtype_table()[static_cast<int>(t)]; }

ScalarType compute_type(ScalarType t) {
  return t == ScalarType::F16 || t == ScalarType::BF16 ? ScalarType::F32 : t;
}

ScalarType result_type(const std::vector<PromoteOperand>& operands) {
  std::optional<ScalarType> dim, zero, wrapped;
  for (const auto& o : operands) {
    auto& slot = o.kind == PromoteOperand::Kind::Tensor    ? dim
                 : o.kind == PromoteOperand::Kind::ZeroDim ? zero
                                                           : wrapped;
    ScalarType t = o.type;
    // A Python float counts as the default dtype, an int as i64 (torch wraps them so).
    if (o.kind == PromoteOperand::Kind::Scalar && category(t) == 2) t = ScalarType::F32;
    slot = slot ? promote_pair(*slot, t) : t;
  }
  auto r = combine(dim, combine(zero, wrapped));
  TL_CHECK(r) << "result_type of no operands";
  return *r;
}

}  // namespace tl::ir
