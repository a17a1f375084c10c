#pragma once
// Tensors computed from Python constants alone (`torch.div(seq_len, w, rounding_mode="trunc")`
// on ints, `torch.tensor(3)`, then `- 1`): every call the guards admit computes the same value,
// so the trace keeps it (small, on the CPU) beside the meta tensor (Value::folded). Where eager
// reads such a tensor as a number (a size given to view/new_zeros/as_strided, `.item()`,
// `int(t)`, `if t:`), which a meta tensor cannot give, the trace reads the same number.
// Symbolic sizes among the operands are pinned (CaptureContext::specialise) when the number is
// read: the number holds only at those sizes.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "capture/value.h"
#include "ir/graph.h"

namespace tl::capture {

class CaptureContext;

using FoldKwArgs = std::vector<std::pair<std::string, ValuePtr>>;

// After `out` was recorded as `node` for `target(*args, **kwargs)` (or the method `method` of
// args[0]): sets out->folded when every operand is a constant or a folded tensor, the op draws
// no random numbers and allocates no uninitialised memory, and the result is a small CPU
// tensor. An op that writes an operand while some operand is folded turns folding off for the
// rest of the capture (a folded value could go stale through a view). `out` may be null.
void fold_result(CaptureContext& ctx, PyObject* target, const std::string& method,
                 const std::vector<ValuePtr>& args, const FoldKwArgs& kwargs, const ir::Node& node,
                 const ValuePtr& out);

// args and kwargs with each folded one-element tensor (also inside tuples and lists; not the
// `self` of a method) replaced by its number, as eager's `__index__` reads it; nullopt when
// there is none. For an op the meta tensors could not run.
std::optional<std::pair<std::vector<ValuePtr>, FoldKwArgs>> with_folded_numbers(
    CaptureContext& ctx, const std::string& method, const std::vector<ValuePtr>& args,
    const FoldKwArgs& kwargs);

// `t.<method>()` on the folded value of `t` ("item", "tolist", "__bool__", "__int__",
// "__float__", "__index__") as a constant; nullopt when `t` is not folded.
std::optional<ValuePtr> folded_call(CaptureContext& ctx, const ValuePtr& t, const char* method);

}  // namespace tl::capture
