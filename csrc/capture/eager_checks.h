#pragma once
// Argument checks eager torch kernels make that their meta kernels skip. An op traced on meta
// tensors would otherwise be accepted and compiled where eager raises; these send it back to
// eager (a graph break), so the user sees eager's error at eager's line.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "capture/context.h"
#include "capture/value.h"

namespace tl::capture {

// Throws GraphBreak ("op_error") when `op_name` applied to `args` raises in eager but not on
// meta tensors. `op_name` is the function or method name (sub, rsub, sub_, __isub__, ...).
// Overlaps between tensor inputs are found through ctx.real_storage().
void check_eager_only_errors(const CaptureContext& ctx, const std::string& op_name,
                             const std::vector<ValuePtr>& args);

// Where the memory of a meta storage (its `_cdata`) really is, for the meta tensors of tensor
// inputs (CaptureContext::real_storage); nullopt for a storage of its own.
using RealStorageOf =
    std::function<std::optional<CaptureContext::RealStorage>(long long meta_storage)>;

// The rule check_eager_only_errors applies to an in-place op: `op_name` (as there) on `args`,
// the op's positional arguments as meta values (borrowed; tensors as meta tensors, the index of
// a setitem as its meta form, null for an argument with none). Returns the position of the
// first tensor operand sharing memory with the tensor the op writes without being that very
// view (eager's kernels refuse it or write in an order of their own), or -1 (none, or the op
// writes no operand). Whether views overlap follows from their sizes: a graph traced where none
// did is asked again at other sizes (frame/size_generic.cpp).
int overlapping_operand(const RealStorageOf& real, const std::string& op_name,
                        const std::vector<PyObject*>& args);

}  // namespace tl::capture
