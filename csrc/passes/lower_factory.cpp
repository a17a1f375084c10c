// Factories whose values are a function of the point's coordinates, so they
// fuse into the kernels that read them instead of being made in memory first:
// torch.arange (an attention mask built from position indices is one kernel
// with no inputs, not five aranges and a comparison), and tensors of one value
// (torch.ones/zeros/full, their _like and new_ forms: transformers' mask
// functions start from `q_idx.new_ones(())`).
#include <cmath>

#include "passes/dtype.h"
#include "passes/graph_rewrite.h"
#include "passes/lowering.h"

namespace tl::passes {
namespace {

using ir::ExprOp;
using ir::ScalarType;

// The largest integer every value up to which `t` holds exactly.
double exact_integer_limit(ScalarType t) {
  switch (t) {
    case ScalarType::F64:
    case ScalarType::I64:
      return 9007199254740992.0;  // 2^53: what the double arguments carry exactly
    case ScalarType::F32:
      return 16777216.0;  // 2^24
    case ScalarType::F16:
      return 2048.0;
    case ScalarType::BF16:
      return 256.0;
    case ScalarType::I32:
      return 2147483647.0;
    case ScalarType::I16:
      return 32767.0;
    case ScalarType::I8:
      return 127.0;
    case ScalarType::U8:
      return 255.0;
    case ScalarType::Bool:
      return 0.0;
  }
  return 0.0;
}

bool is_integral(double v) { return std::isfinite(v) && v == std::floor(v); }

// No layout, or torch.strided.
bool strided_layout(const ir::Arg* a) {
  if (ir::is_none_or_absent(a)) return true;
  return a->kind == ir::Arg::Kind::Const && a->value.get() == torch_fn("strided").get();
}

// torch.arange(end) / (start, end) / (start, end, step): start + i * step.
// Only where every value is an integer the result type holds exactly, so the
// i64 arithmetic here gives torch's values bit for bit whatever precision
// torch computes them in (it differs between the CPU and CUDA); fractional
// steps stay extern. The length is the node's (its meta), so `end` is not read
// for its value.
bool arange(RuleCtx& c) {
  if (c.node.meta->sizes.size() != 1) return false;
  const bool end_only = c.node.args.size() == 1;
  const ir::Arg* start_arg = end_only ? nullptr : c.arg(0, "start");
  c.arg(end_only ? 0 : 1, "end");
  const ir::Arg* step_arg = c.arg(2, "step");
  if (end_only && step_arg) return false;
  std::optional<double> start = start_arg ? c.number(start_arg) : 0.0;
  std::optional<double> step = step_arg ? c.number(step_arg) : 1.0;
  if (!start || !step || !is_integral(*start) || !is_integral(*step) || *step == 0) return false;
  for (const char* kw : {"dtype", "device"}) c.arg(99, kw);  // the node's meta has both
  if (c.arg(99, "out") || !strided_layout(c.arg(99, "layout"))) return false;
  for (const char* kw : {"requires_grad", "pin_memory"})
    if (!ir::is_none_or_absent(c.arg(99, kw)) && c.number(c.arg(99, kw)).value_or(1) != 0)
      return false;
  const ScalarType t = c.out_type();
  const double last = *start + *step * static_cast<double>(c.node.meta->sizes[0] - 1);
  const double limit = exact_integer_limit(t);
  if (std::fabs(*start) > limit || std::fabs(last) > limit) return false;
  if (t == ScalarType::U8 && std::fmin(*start, last) < 0) return false;
  int v = c.index(0);
  if (*step != 1) v = c.binary(ExprOp::Mul, v, c.constant(*step, ScalarType::I64));
  if (*start != 0) v = c.binary(ExprOp::Add, v, c.constant(*start, ScalarType::I64));
  return c.finish(c.cast(v, compute_type(t)));
}

// Reads the keywords every factory takes; false for `out=` or a layout,
// requires_grad or pinned memory this kernel cannot give.
bool plain_factory_kwargs(RuleCtx& c) {
  for (const char* kw : {"dtype", "device", "memory_format"}) c.arg(99, kw);  // meta has them
  if (c.arg(99, "out") || !strided_layout(c.arg(99, "layout"))) return false;
  for (const char* kw : {"requires_grad", "pin_memory"})
    if (!ir::is_none_or_absent(c.arg(99, kw)) && c.number(c.arg(99, kw)).value_or(1) != 0)
      return false;
  return true;
}

// Whether `v` in `t` is exactly `v`: bool 0/1, integers the type holds, and for
// floating types integers up to exact_integer_limit or an infinity, so rounding
// through the compute type cannot differ from torch's (which rounds once).
bool exact_in(double v, ScalarType t) {
  if (t == ScalarType::Bool) return v == 0 || v == 1;
  if (ir::is_floating(t) && std::isinf(v)) return true;
  if (!is_integral(v)) return false;
  if (t == ScalarType::U8) return v >= 0 && v <= 255;
  return std::fabs(v) <= exact_integer_limit(t) || (t == ScalarType::I64 && std::fabs(v) < 9.2e18);
}

bool filled(RuleCtx& c, std::optional<double> v) {
  const ScalarType t = c.out_type();
  if (!v || !exact_in(*v, t) || !plain_factory_kwargs(c)) return false;
  return c.finish(c.constant(*v, compute_type(t)));
}

// ones/zeros(*size), ones_like/zeros_like(x), x.new_ones/new_zeros(size): the
// shape and dtype are the node's (its meta), so only the value is read here.
bool ones(RuleCtx& c) { return filled(c, 1.0); }
bool zeros(RuleCtx& c) { return filled(c, 0.0); }

// full(size, fill), full_like(x, fill), x.new_full(size, fill).
bool full(RuleCtx& c) {
  const size_t pos = op_base_name(c.node) == "new_full" ? 2 : 1;  // after self and size
  return filled(c, c.number(c.arg(pos, "fill_value")));
}

}  // namespace

void add_factory_rules(RuleTable& t) {
  t["arange"] = arange;
  for (const char* n : {"ones", "ones_like", "new_ones"}) t[n] = ones;
  for (const char* n : {"zeros", "zeros_like", "new_zeros"}) t[n] = zeros;
  for (const char* n : {"full", "full_like", "new_full"}) t[n] = full;
}

}  // namespace tl::passes
