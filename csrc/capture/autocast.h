#pragma once
// torch.autocast regions in traced code (torch.autocast, torch.amp.autocast and the deprecated
// torch.cpu.amp.autocast / torch.cuda.amp.autocast). See autocast.cpp for the design.
#include <string>
#include <vector>

#include "capture/tracer.h"

namespace tl::capture {

// The class torch.amp.autocast or a subclass of it (borrowed).
bool is_autocast_class(PyObject* fn);
// A function made by the @torch.autocast(...) decorator (borrowed): inlined, its `with` is a
// region like any other (torch's file would otherwise make it an opaque torch function).
bool is_autocast_decorated(PyObject* fn);
// A value holding a torch.autocast object: the BEFORE_WITH of a `with` on it enters a region.
bool is_autocast_manager(const ValuePtr& v);
// `torch.autocast(...)` in traced code: the real object, made at trace time from constant
// arguments (nothing happens before __enter__). A deprecated class (torch.cpu.amp.autocast)
// first goes through warning_call for its FutureWarning. `globals` is borrowed.
ValuePtr construct_autocast(CaptureContext& ctx, PyObject* globals, PyObject* cls,
                            const std::vector<ValuePtr>& args, const KwArgs& kwargs);
// BEFORE_WITH on an autocast manager: enters the region and returns the value that stands for
// its __exit__ on the stack (calling it leaves the region; at a graph break it is rebuilt as
// the __exit__ of a real region entered again, see autocast.cpp).
ValuePtr enter_autocast(CaptureContext& ctx, const ValuePtr& mgr);
bool is_autocast_exit(const ValuePtr& fn);
void exit_autocast(CaptureContext& ctx, const ValuePtr& exit);
// Reads the real thread-local autocast state into ctx.autocast_on and
// ctx.autocast_key (the enabled devices and their dtypes).
void read_autocast_state(CaptureContext& ctx);
// Leaves the regions traced code entered and did not leave (a graph break inside one).
void restore_autocast(CaptureContext& ctx);

// For an op about to be recorded while autocast is on: the dtype autocast gives its result
// (null when autocast does not change it), after replacing in `args`/`kwargs` the tensors
// autocast would cast by explicit `.to(dtype)` nodes.
PyRef autocast_casts(CaptureContext& ctx, PyObject* target, const std::string& method,
                     std::vector<ValuePtr>& args, KwArgs& kwargs);
// Throws GraphBreak unless the recorded op's first floating-point result has dtype `want`.
void check_autocast_result(const ValuePtr& result, const PyRef& want, const std::string& op);

}  // namespace tl::capture
