#pragma once
// Results of torch ops run on meta tensors while tracing, reused when the same
// op sees arguments with the same metadata again.
//
// Shape propagation runs every captured op on meta tensors, and many of torch's
// meta kernels are Python (torch._refs, decompositions): a layer_norm costs
// ~4 ms, an addmm ~1.4 ms. A model repeats the same layer with the same
// shapes (BERT-base: 12 layers, 25 layer norms, 73 linears), so most calls
// are answered here from the first one's result.
#include <string>

#include "core/py_ref.h"

namespace tl::capture {

// Runs `target(*pos, **kwargs)` (or `self.<method>(*pos, **kwargs)` when
// `method` is set; `target` is then ignored) on meta arguments, or rebuilds
// its result from an earlier call with the same op and argument metadata.
// `kwargs` may be null. Calls are cached only when every argument is a plain
// strided meta tensor or a constant of a simple type, the op is not in place,
// and its result is tensors that need no grad and are fresh, views of the
// arguments or the arguments themselves. `cacheable` false always calls.
// Returns null with the Python error set when the call raises. Borrows all.
PyRef meta_call(PyObject* target, const std::string& method, PyObject* self, PyObject* pos,
                PyObject* kwargs, bool cacheable);

// scaled_dot_product_attention's meta result `result` (owned) laid out as the fused CUDA and
// CPU kernels lay out theirs (context.cpp); unchanged on other devices. `q`: the query's meta
// tensor (borrowed, may be null); `device`: the real device (borrowed); `drops`: dropout_p is
// not a constant 0 (the CPU then runs the math path). Throws PythonError.
PyRef fused_attention_layout(PyRef result, PyObject* q, PyObject* device, bool drops);
// `drops` for fused_attention_layout: dropout_p given (`given`) and not a constant 0
// (`constant`: its value when a constant, else null). Never raises.
bool attention_drops(bool given, PyObject* constant);

// Forgets every cached result (torchlite.reset()).
void clear_meta_cache();

// Calls answered from the cache since the process started (for tests).
long long meta_cache_hits();

}  // namespace tl::capture
