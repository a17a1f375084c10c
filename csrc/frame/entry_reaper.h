#pragma once
// Removes a cache entry when an object its guards match by identity dies: a
// module's `forward` code is shared by every instance, so each compiled and
// dropped model would otherwise leave an entry (and its compiled graph) on the
// code object for the life of the process. The guards' own weak references
// only make such an entry fail; this removes it.
#include <memory>

#include "frame/code_cache.h"
#include "ir/frame_view.h"

namespace tl::frame {

// Watches the ID-matched locals of `entry` (objects in `frame` now) with weak
// references whose callbacks remove `entry` from `code`'s cache. Objects
// without weakref support are skipped. Borrows `code`; never throws (a watch
// that cannot be made leaves the entry as it was).
void watch_guarded_objects(PyCodeObject* code, CacheEntry& entry, const ir::FrameView& frame);

}  // namespace tl::frame
