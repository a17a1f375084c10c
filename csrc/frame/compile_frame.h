#pragma once
// Cache miss: capture the frame, compile its graph with the configured
// backend, and return the new cache entry. Ties capture, guards and runtime
// together (DESIGN.md: frame/ is the only place that sees all three).
#include "frame/compiled_frame.h"

namespace tl::frame {

// `code` and `func` are borrowed. A graph break yields an entry with
// compiled == nullptr and the guards seen up to the break. Throws tl::Error
// (fullgraph=True and a graph break, or a backend failure) or PythonError.
CacheEntry compile_frame(PyCodeObject* code, PyObject* func, const ir::FrameView& frame,
                         const std::shared_ptr<const CompileConfig>& config);

}  // namespace tl::frame
