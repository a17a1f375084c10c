#pragma once
// Which arguments of a resume function hold objects made inside the compiled call (a
// SimpleNamespace, an object(), a torch.Generator the code before the break created): new on
// every call, so an identity guard on them fails every time and each identical call
// recompiles. Such an object is guarded by its type and by the attributes the trace reads
// instead (CaptureContext::wrap), and is never baked into a graph as a constant.
#include <Python.h>

#include <string>
#include <unordered_set>

#include "capture/value.h"
#include "ir/source.h"

namespace tl::capture {

// Records that the local `name` of `code` (any code of one user function: the record is
// kept per user code, bytecode::user_code_of) held an object made in the call at a break.
void record_made_in_call(PyCodeObject* code, const std::string& name);

// The names of `code`'s parameters (a resume function or loop body) whose objects were made in
// the call: those recorded for its user code, and every value-stack parameter (a temporary of
// the expression that broke, or the breaking call's result). Empty for user code.
std::unordered_set<std::string> made_in_call_names(PyCodeObject* code);

// Whether `v`, handed on at a break of a frame whose own made-in-call names are `fresh`, was
// made in the call: built by the trace (no source), or read from such a name.
bool value_made_in_call(const ValuePtr& v, const std::unordered_set<std::string>& fresh);

// An instance of a C type that is no function, class, module or descriptor (SimpleNamespace,
// object(), torch.Generator): what wrap() guards by identity unless it was made in the call.
bool plain_c_instance(PyObject* obj);

// The local name a source reads from, "" when its root is not a frame local.
std::string root_local_name(const ir::SourcePtr& src);

}  // namespace tl::capture
