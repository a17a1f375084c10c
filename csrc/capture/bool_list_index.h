#pragma once
// `x[[True, False, True]]`: a Python list of bools indexing a tensor is a mask whose number of
// True items, so the result's size, is known at trace time; torch's meta kernel cannot run the
// nonzero() behind it. It becomes the list of the True positions (`x[[0, 2]]`: the same values,
// dtype, shape and copy) once the mask's length is checked against the size it indexes.
#include "capture/context.h"

namespace tl::capture {

// `idx` with each list of Python bools (top level, or in a tuple after ints and slices only)
// replaced by the positions of its True items, the size it indexes specialised; `idx` itself
// when there is none, or when a mask's length differs from that size (eager's IndexError then
// comes from the op as before).
ValuePtr bool_lists_as_positions(CaptureContext& ctx, const ValuePtr& tensor, const ValuePtr& idx);

}  // namespace tl::capture
