#pragma once
// Lowering: how one graph node computes its value, as a small loop-IR body
// independent of the kernel it ends up in (fuse.cpp places it, build_kernel.cpp
// instantiates it). One rule per op family, looked up by the op's base name so
// torch.X, Tensor.X and operator.X share a rule. No rule: the node is extern.
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "ir/loop_ir.h"
#include "passes/graph_info.h"

namespace tl::passes {

// An operand read at a shifted coordinate along one axis (a cat part at its
// place in the result): the operand's coordinate is the node's plus `offset`,
// clamped into [0, bound) so that a point a Where discards still reads inside
// every buffer the operand's producers read. bound == 0: no shift.
struct AxisShift {
  int64_t offset = 0;
  int64_t bound = 0;
  bool operator==(const AxisShift& o) const { return offset == o.offset && bound == o.bound; }
  bool operator<(const AxisShift& o) const {
    return offset != o.offset ? offset < o.offset : bound < o.bound;
  }
};

struct OpLowering {
  enum class Kind {
    Pointwise,    // body over the node's shape; inputs broadcast to it
    View,         // index remap of inputs[0]: no compute, never stored
    StridedView,  // inputs[0] read through this node's own strides (reshape of contiguous)
    Reduction,    // body over `space`; ReduceX folds `reduce_dims`
  };
  Kind kind = Kind::Pointwise;
  std::vector<const ir::Node*> inputs;  // tensor operands
  // Load{buffer = i} is inputs[i]'s value (broadcast to the body's space) in
  // compute_type of its dtype; `result` is the node's value in its compute type.
  std::vector<ir::Expr> body;
  int result = -1;
  // Pointwise, optional: per input (empty: broadcast right-aligned), per input
  // axis, the node axis indexing it or -1 (batch_norm's per-channel stats).
  std::vector<std::vector<int>> input_axes;
  // Pointwise, optional: per input (empty: none), per input axis, the shift of
  // its coordinate (only with input_axes).
  std::vector<std::vector<AxisShift>> input_shifts;
  std::vector<int> base_axes;  // View: per inputs[0] axis, the node axis indexing it, or -1
  // View, optional: per inputs[0] axis (empty: none), a slice's start there as a shift of
  // the coordinate ({start, start + the node's size}; bound 0: none). A slice of a computed
  // value stays a remap, so the value computes in its reader's kernel.
  std::vector<AxisShift> base_shifts;
  std::vector<int64_t> space;          // Reduction: the iteration space (operand shape)
  std::vector<int> reduce_dims;        // Reduction: reduced space axes, sorted
  bool full_result = false;            // Reduction: result has `space`'s shape (softmax)
  int64_t view_offset = 0;             // StridedView: element offset from inputs[0]'s data
  const ir::Node* absorbed = nullptr;  // tuple node (x.max(dim)) whose only use this is
};

// nullopt: no rule, or the rule does not cover these arguments (extern).
std::optional<OpLowering> lower_node(const ir::Node& n, const GraphInfo& info);

// What rules see: the node, argument access, and a body builder.
class RuleCtx {
 public:
  RuleCtx(const ir::Node& n, const GraphInfo& info, OpLowering& out);
  const ir::Node& node;
  const GraphInfo& info;
  OpLowering& out;

  // Argument `pos` or keyword `name` (nullptr if absent). Marks the keyword
  // as understood: a rule fails if the node has a keyword no rule read.
  const ir::Arg* arg(size_t pos, const char* name = nullptr);
  bool is_tensor(const ir::Arg* a) const;                // a node with supported TensorMeta
  std::optional<double> number(const ir::Arg* a) const;  // Python bool/int/float
  std::optional<std::vector<int64_t>> ints(const ir::Arg* a) const;  // int or list of ints
  std::optional<std::string> str(const ir::Arg* a) const;
  bool all_kwargs_read() const;

  ir::ScalarType out_type() const;                 // the node's dtype
  ir::ScalarType type_of(const ir::Arg* a) const;  // tensor dtype, or Python number's kind
  ir::ScalarType type(int e) const { return out.body[e].type; }
  bool is_operand(const ir::Arg* a) const { return is_tensor(a) || number(a).has_value(); }
  // A tensor or number operand as a body value of type `t` (cast if needed);
  // anything else makes finish() fail.
  int value(const ir::Arg* a, ir::ScalarType t);
  int constant(double v, ir::ScalarType t);
  // A number of elements `n` (a mean's or variance's divisor) as type `t`: n >= 2 is an integer
  // constant cast to `t`, so a kernel with runtime sizes reads it from its dims array
  // (codegen/common/runtime_constants.h) and a mean over a dynamic length keeps one text for
  // every length (a float literal was an LLVM or NVRTC compile per length).
  int count(int64_t n, ir::ScalarType t);
  int unary(ir::ExprOp op, int a);          // same type; b8 for predicates
  int binary(ir::ExprOp op, int a, int b);  // type of a; b8 for comparisons
  int where(int c, int a, int b);
  int cast(int a, ir::ScalarType t);
  int reduce(ir::ExprOp op, int a);
  // Data movement (Pointwise bodies): the coordinate along node axis `axis`
  // (i64), and tensor `n` read from memory at the point's offset (per input axis
  // `axes[j]`: the node axis indexing it, or -1) plus `extra` (i64 expr)
  // elements, in the compute type of n's dtype. A gathered input is never fused
  // into the consumer's kernel (it must be in memory).
  int index(int axis);
  int gather(const ir::Node* n, std::vector<int> axes, int extra);
  bool finish(int result);  // sets out.result; fails if a keyword was not read

 private:
  int push(ir::Expr e);
  std::vector<bool> kw_read_;
  bool failed_ = false;
};

using Rule = bool (*)(RuleCtx&);
using RuleTable = std::unordered_map<std::string, Rule>;
void add_pointwise_rules(RuleTable& t);
void add_activation_rules(RuleTable& t);
void add_reduction_rules(RuleTable& t);
void add_view_rules(RuleTable& t);
void add_data_movement_rules(RuleTable& t);
void add_factory_rules(RuleTable& t);

// True when `l` reads `n` through a Gather (so `n` must be in memory).
bool gathers(const OpLowering& l, const ir::Node* n);

// Base name a rule is registered under: "torch.nn.functional.relu" -> "relu".
std::string op_base_name(const ir::Node& n);

// Row-major dense, as torch's is_contiguous (a size-1 dimension's stride is not read).
bool contiguous(const ir::TensorMeta& m);

}  // namespace tl::passes
