#pragma once
// Argument checks eager torch kernels make that their meta kernels skip. An op traced on meta
// tensors would otherwise be accepted and compiled where eager raises; these send it back to
// eager (a graph break), so the user sees eager's error at eager's line.
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

}  // namespace tl::capture
