#pragma once
// Helpers shared by the reduction rule files (lower_reduction.cpp,
// lower_statistics.cpp). Internal to csrc/passes.
#include <optional>
#include <vector>

#include "passes/lowering.h"

namespace tl::passes::reduction {

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

}  // namespace tl::passes::reduction

namespace tl::passes {
// var std argmax argmin all any norm group_norm (lower_statistics.cpp).
void add_statistics_rules(RuleTable& t);
}  // namespace tl::passes
