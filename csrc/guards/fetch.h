#pragma once
#include "core/py_ref.h"
#include "ir/frame_view.h"
#include "ir/source.h"

namespace tl::guards {

// Reads the value a source names from a frame. Returns a new reference, or a
// null PyRef when the value does not exist (unbound local, missing global,
// attribute error) with no Python error left set. Throws PythonError only for
// unexpected failures.
PyRef fetch(const ir::Source& source, const ir::FrameView& frame);

}  // namespace tl::guards
