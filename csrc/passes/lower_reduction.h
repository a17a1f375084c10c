#pragma once
// Helpers shared by the reduction rule files (lower_reduction.cpp,
// lower_statistics.cpp). Internal to csrc/passes.
#include <optional>
#include <vector>

#include "passes/lowering.h"

namespace tl::passes::reduction {

// An argument position no call reaches: c.arg(kKeywordOnly, name) reads the keyword only.
constexpr size_t kKeywordOnly = 64;

// Sets up a reduction of `x` over `dims` (nullopt or empty: every dim).
bool setup(RuleCtx& c, const ir::Arg* x, std::optional<std::vector<int64_t>> dims);
// nullptr for an absent argument or a constant None.
const ir::Arg* none_to_null(const ir::Arg* a);
// Argument `pos`/`name` as dims (nullopt if None/absent); clears *ok if it is not ints.
std::optional<std::vector<int64_t>> dims_arg(RuleCtx& c, size_t pos, const char* name, bool* ok);
int64_t reduced_numel(const OpLowering& o);
// Multiplies by weight and adds bias when present (None or absent: skipped).
bool affine(RuleCtx& c, int* v, const ir::Arg* w, const ir::Arg* b, ir::ScalarType t);
// True for a constant Python bool (var(x, True) is `unbiased`, not a dim).
bool is_bool_const(const ir::Arg* a);
// Over the set-up reduction of x: ReduceMax/Min as x's compute type (bool through u8),
// or ReduceArgMax/ArgMin as the i64 index of the first extreme or NaN (0 for one element).
int extreme(RuleCtx& c, const ir::Arg* x, ir::ExprOp op);
// var/std/var_mean/std_mean arguments (input, dim=None, *, correction=1, keepdim=False),
// (input, dim, unbiased, keepdim) and (input, unbiased); false if not understood.
bool var_args(RuleCtx& c, std::optional<std::vector<int64_t>>* dims, double* correction);
// Mean and variance (sum of squared deviations over max(0, n - correction)) of `v` over the
// set-up reduction, in two passes (lower_statistics.cpp says how); the same exprs for the
// same v, so var_mean's two parts fuse into one kernel.
struct Moments {
  int mean = -1, var = -1;
};
Moments moments(RuleCtx& c, int v, double correction, ir::ScalarType t);
// (v - mean) * rsqrt(biased variance + eps): layer_norm and group_norm before the affine.
int normalized(RuleCtx& c, int v, double eps, ir::ScalarType t);

}  // namespace tl::passes::reduction

namespace tl::passes {
// var std argmax argmin all any norm group_norm (lower_statistics.cpp).
void add_statistics_rules(RuleTable& t);
// getitem of max/min(x, dim), aminmax, var_mean, std_mean (lower_tuple.cpp).
void add_tuple_rules(RuleTable& t);
}  // namespace tl::passes
