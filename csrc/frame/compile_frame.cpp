// TEMPORARY STUB (lead replaces with the real capture): every frame is a
// graph break run eagerly, guarded by global state only.
#include "frame/compile_frame.h"

namespace tl::frame {

CacheEntry compile_frame(PyCodeObject* code, PyObject* func, const ir::FrameView& frame,
                         const std::shared_ptr<const CompileConfig>& config) {
  CacheEntry e;
  e.guards.add_global_state();
  e.config = config;
  return e;
}

}  // namespace tl::frame
