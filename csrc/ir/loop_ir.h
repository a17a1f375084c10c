#pragma once
// The primitive loop IR (PrimTorch + Inductor's loop level, device-independent):
// a Kernel computes one or more outputs over an iteration space from strided
// input buffers, as an SSA expression DAG evaluated per point. Lowering
// (csrc/passes/) produces it from the graph; codegen (csrc/codegen/cpu, cuda)
// turns it into a function. Nothing here knows about Python, CUDA or LLVM.
#include <cstdint>
#include <string>
#include <vector>

namespace tl::ir {

enum class ScalarType : uint8_t { F32, F64, F16, BF16, I8, I16, I32, I64, U8, Bool };
const char* scalar_type_name(ScalarType t);  // "f32", ...
int scalar_type_size(ScalarType t);          // bytes
bool is_floating(ScalarType t);
bool is_half(ScalarType t);  // float16 or bfloat16

enum class ExprOp : uint8_t {
  // leaves
  Load,      // input[`buffer`] at the point (through its strides)
  Constant,  // `value` (as double; integers exact up to 2^53) or `ivalue` for int types
  // unary (same type in/out unless Cast)
  Neg,
  Abs,
  Sign,
  Reciprocal,
  Sqrt,
  Rsqrt,
  Exp,
  Exp2,
  Expm1,
  Log,
  Log2,
  Log10,
  Log1p,
  Sin,
  Cos,
  Tan,
  Asin,
  Acos,
  Atan,
  Sinh,
  Cosh,
  Tanh,
  Sigmoid,
  Erf,
  Erfc,
  Erfinv,
  Floor,
  Ceil,
  Round,
  Trunc,
  Frac,
  Relu,
  Not,
  BitNot,
  IsNan,
  IsInf,
  IsFinite,
  Cast,
  // binary
  Add,
  Sub,
  Mul,
  Div,
  FloorDiv,
  TruncDiv,
  Remainder,
  Fmod,
  Pow,
  Atan2,
  Maximum,
  Minimum,
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  And,
  Or,
  Xor,
  BitAnd,
  BitOr,
  BitXor,
  Copysign,
  // i64 (index, size): the index, when 0 <= index < size. Outside, a CUDA
  // kernel stops with a device-side assert, as torch's CUDA kernels do; CPU
  // kernels never hold it (they cannot raise torch's IndexError, so indexing
  // ops stay extern there).
  CheckIndex,
  // ternary
  Where,  // operands: cond, a, b
  // reductions over the kernel's reduction axes (operand: the value per point)
  ReduceSum,
  ReduceProd,
  ReduceMax,
  ReduceMin,
  ReduceArgMax,
  ReduceArgMin,
  // index leaves and indirect loads (data movement: cat, pad, flip, gather, ...)
  Index,   // i64: the point's index along kernel axis `ivalue` (0 <= index < shape[ivalue])
  Gather,  // input[`buffer`] at the point's offset (its view) plus operand %0 (i64) elements
};

struct Expr {
  ExprOp op = ExprOp::Constant;
  ScalarType type = ScalarType::F32;  // result type; math on f16/bf16 is done in f32
  std::vector<int> operands;          // indices of earlier exprs
  int buffer = -1;                    // Load, Gather
  double value = 0;                   // Constant (floating)
  int64_t ivalue = 0;                 // Constant (integer/bool); Index: the axis
};

// A buffer seen through the kernel's iteration space: element strides per
// iteration axis (0 = broadcast), plus an element offset.
struct BufferView {
  ScalarType type = ScalarType::F32;
  std::vector<int64_t> strides;  // one per axis of Kernel::shape (pointwise + reduction axes)
  int64_t offset = 0;
};

// Iteration space: `shape` = outer (pointwise) axes followed by `reduction_axes`
// trailing axes that ReduceX exprs fold. Outputs of exprs that vary along the
// reduction axes are indexed by all axes; outputs of values that do not (a
// reduction, or anything computed from a stride-0 row) either have zero strides
// over the reduction axes (stored once per outer point) or not (stored at every
// point of the row).
struct Kernel {
  std::string name;
  std::vector<int64_t> shape;
  int reduction_axes = 0;
  std::vector<BufferView> inputs;
  std::vector<Expr> exprs;  // SSA in topological order
  struct Output {
    int expr = -1;
    BufferView view;
  };
  std::vector<Output> outputs;
  // Dynamic shapes (docs/internals/dynamic-shapes.md): the code generators (CPU
  // and CUDA) pass every size, stride and offset other than 0 and 1 to the kernel at
  // run time instead of writing it into the code, so the code of two kernels
  // that differ only in those numbers is the same (one compile serves both).
  bool runtime_sizes = false;
  // With runtime_sizes: per axis of `shape`, whether its size is a model constant (a
  // parameter's size, a constant of the graph: PassContext::static_sizes) rather than one that
  // changes between the sizes the kernel serves. The code generators write such a size as a
  // literal (the static schedule: a softmax row of 768 without a bound check per element, a
  // pointwise kernel without its scalar tail), so the text then serves that size only; a wrong
  // guess costs a compile, never a wrong result (the literal is part of the text and its key).
  // Empty: none known.
  std::vector<char> static_axes;
  // With runtime sizes: per expr, whether it is an integer Constant whose value is one of the
  // model constants (PassContext::static_sizes). A divisor or modulus of such a value stays a
  // literal in the code; any other divisor is read at run time like the kernel's sizes (Llama's
  // repeat_kv divides by n_rep x length x head size: one text per length as a literal), see
  // codegen/common/runtime_constants.h. Empty: none known.
  std::vector<char> static_constants;
  // Some output is stored into an input's buffer (each element read before it
  // is written, at the same point): the CUDA text drops __restrict__.
  bool aliased_io = false;
  // Launched together with other kernels of the same code over other buffers, one launch for
  // all (passes/group_kernels.h: an optimizer's per-parameter updates): the CUDA text adds an
  // entry that reads a table of the members' buffers and dims. Pointwise kernels with runtime
  // sizes only.
  bool grouped = false;

  int64_t outer_numel() const;      // product of the pointwise axes
  int64_t reduction_numel() const;  // product of the reduction axes (1 if none)
  // One line per expr under a signature line; stable text for tests and dumps.
  std::string str() const;
  // Throws tl::Error (InternalError) naming the expr and the broken rule.
  void verify() const;
};

// ---- Added by the lowering pass (helper "hlower"); nothing above changed. ----
// Execution model that lowering relies on (csrc/passes/): for each outer point,
// every ReduceX expr (in expr order) folds its operand over all reduction axes;
// an operand may use earlier reductions' results (softmax: max, then the sum of
// exp(x - max)). Outputs whose expr varies over the reduction axes (see
// inner_exprs) are then stored at every point; the others once per outer point.
// Maximum/Minimum/ReduceMax/ReduceMin propagate NaN (torch.maximum, amax);
// Round is round-half-to-even; FloorDiv on floats is torch's floor division;
// Cast to/from b8 is `!= 0` / 0-or-1.
// Added for data movement (helper "hviews"): Index is a leaf (no operands)
// whose value is the current point's coordinate along kernel axis `ivalue`
// (axes as in Kernel::shape, reduction axes included; it varies along them).
// Gather reads input `buffer` at element offset view.offset + sum(view.strides
// * point) + operand, operand an i64 expr: the lowering computes the extra
// offset from Index exprs (and loaded indices) and guarantees it stays inside
// the buffer (indices are clamped), so a Gather is safe to evaluate even when
// a Where discards it. Its type is the input's storage type, as for Load.
const char* expr_op_name(ExprOp op);  // "add", "reduce_sum", ...
int expr_op_arity(ExprOp op);         // operand count; -1 for leaves (Load/Constant/Index)
bool is_reduction(ExprOp op);
bool is_comparison(ExprOp op);  // Eq..Ge
// Per expr: true when its value can differ along the reduction axes (it reads
// an input with a non-zero reduction-axis stride, not through a ReduceX).
std::vector<bool> inner_exprs(const Kernel& k);

}  // namespace tl::ir
