#pragma once
// warnings.warn(...) in traced code: skipped when the current filters ignore it, else a
// `warning_call` graph break so CPython shows it at the user's line exactly as eager.
#include <vector>

#include "capture/tracer.h"

namespace tl::capture {

// True for warnings.warn (borrowed).
bool is_warnings_warn(PyObject* fn);

// The effect of warnings.warn(*args, **kwargs) called from a frame whose globals are `globals`
// (borrowed): None when the filters ignore the warning (guarded on the filter entries that
// decided it, so a filter change recompiles); otherwise throws GraphBreak "warning_call".
ValuePtr warning_call(CaptureContext& ctx, PyObject* globals, const std::vector<ValuePtr>& args,
                      const KwArgs& kwargs);

}  // namespace tl::capture
