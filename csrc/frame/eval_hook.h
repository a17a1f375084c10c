#pragma once
// The PEP 523 hook and the per-thread state it reads. The hook is installed
// for the interpreter only while some thread is inside a compiled callable;
// which config applies is per thread. All functions need the GIL.
#include <memory>

#include "frame/compiled_frame.h"

namespace tl::frame {

using ConfigPtr = std::shared_ptr<const CompileConfig>;

// This thread's active config, or nullptr (nothing is intercepted). The
// pointee is owned by the running CompiledFunction (or the caller of
// ActiveConfigScope), which outlives the call, so no refcount changes per call.
const ConfigPtr* active_config();

// Sets this thread's active config for a scope and restores the previous one
// on exit, also when unwinding.
class ActiveConfigScope {
 public:
  explicit ActiveConfigScope(const ConfigPtr* config);
  ~ActiveConfigScope();
  ActiveConfigScope(const ActiveConfigScope&) = delete;
  ActiveConfigScope& operator=(const ActiveConfigScope&) = delete;

 private:
  const ConfigPtr* previous_;
};

// Bracket every call of a compiled callable: the first entry on any thread
// installs the hook, the last exit removes it.
void enter_compiled_region();
void leave_compiled_region();
bool hook_installed();

// torchlite.reset(): drop every cache entry and skip decision (lazily).
void reset_caches();

// Test support: treat instances of these types (a tuple) like tensors when
// deciding whether a frame is worth caching; an empty tuple restores the
// default (torch.Tensor and torch.nn.Module). Borrows `types`.
void set_tensor_types_for_testing(PyObject* types);

// Test support: mode 1 builds, on a miss, a graph-break entry guarded only by
// the type of each argument instead of capturing, so hook tests do not depend
// on what capture supports; mode 2 makes every capture throw ValueError;
// mode 0 captures normally.
void use_stub_compiler_for_testing(int mode);

}  // namespace tl::frame
