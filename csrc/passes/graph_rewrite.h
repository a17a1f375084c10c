#pragma once
// What the passes that rewrite a captured graph before lowering share
// (fold_batch_norm, channels_last): argument lookup, use replacement, and
// metadata for new or changed nodes, taken (as at capture) by running the real
// torch op on the inputs' example meta tensors.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/py_ref.h"
#include "ir/graph.h"

namespace tl::passes {

// Example values that replace some nodes' own `example` while a pass plans.
using Examples = std::unordered_map<const ir::Node*, PyRef>;

// Argument `pos`, else keyword `name` (may be null); nullptr if absent.
ir::Arg* find_arg(ir::Node& n, size_t pos, const char* name);
const ir::Arg* find_arg(const ir::Node& n, size_t pos, const char* name);
// A tensor-valued node argument (with meta), or nullptr (absent, None, constant).
const ir::Node* tensor_arg(const ir::Node& n, size_t pos, const char* name);
// A Python bool/int/float constant argument.
bool number_arg(const ir::Node& n, size_t pos, const char* name, double* out);

// The nodes whose arguments name `n` (at any depth), in graph order.
std::vector<ir::Node*> readers_of(const ir::Graph& g, const ir::Node* n);
// Every reference to `from` in the arguments of `users` now names `to`.
void replace_uses(const std::vector<ir::Node*>& users, const ir::Node* from, ir::Node* to);

// Runs n's target (a call_function or call_method) on its arguments' example
// values (`overrides` first), with grad mode off and "device" keywords sent to
// "meta". Returns a new reference, or null with the Python error cleared when
// the op raises (e.g. a view that the new strides do not allow).
PyRef run_on_examples(const ir::Node& n, const Examples& overrides);

// The TensorMeta of meta tensor `t` (borrowed) on the real `device`.
ir::TensorMeta meta_of(PyObject* t, const PyRef& device, bool requires_grad);
std::vector<int64_t> strides_of(PyObject* t);  // borrows t; empty if not a tensor

// How insert_call computes a new node's meta result: `target(*pos, **kwargs)` (or
// `self.<method>(*pos, **kwargs)`), borrowing all; `kwargs` may be null. Set by the bindings to
// capture's meta_call (its C++ shape rules and result cache: torch's meta kernels of pointwise
// ops are Python refs, ~0.1-1 ms a call, and a new length's compile inserts ~100 of them in
// move_reshapes); unset, the op itself runs on the examples.
using MetaCallFn = PyRef (*)(PyObject* target, const std::string& method, PyObject* self,
                             PyObject* pos, PyObject* kwargs);
void set_meta_call(MetaCallFn fn);

// A new call node placed just before `pos`, its example and meta set from a
// meta run (on `device`, requires_grad off). Throws InternalError if the op
// raises on meta: passes build only calls they know to be valid.
ir::Node* insert_call(ir::Graph& g, const ir::Node* pos, PyRef target, const std::string& method,
                      std::vector<ir::Arg> args,
                      std::vector<std::pair<std::string, ir::Arg>> kwargs, const PyRef& device);

// `torch.<name>` (new reference); throws PythonError if missing.
PyRef torch_fn(const char* name);
// The device type of a torch.device ("cpu", "cuda", ...); "" on error.
std::string device_type(PyObject* device);  // borrows device

// Dense strides of `sizes` in the given order (torch's rule: size-0 and
// size-1 dims count as 1).
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);
std::vector<int64_t> channels_last_strides(const std::vector<int64_t>& sizes);  // 4-d only

}  // namespace tl::passes
