#pragma once
// The only folder that includes pybind11. One bind_* function per area; each
// lives in its own file and is called from module.cpp.
#include <pybind11/pybind11.h>

#include <vector>

#include "core/flags.h"
#include "runtime/executable.h"

namespace tl::python {

void bind_core(pybind11::module_& m);          // counters, logging, errors
void bind_ir(pybind11::module_& m);            // Graph
void bind_capture(pybind11::module_& m);       // bytecode disassembly
void bind_frame(pybind11::module_& m);         // CompiledFunction, disable, reset, configs
void bind_compile(pybind11::module_& m);       // backend bridge, trace dir, explain graphs
void bind_passes(pybind11::module_& m);        // partition_summary
void bind_fx(pybind11::module_& m);            // torch.fx GraphModule -> Graph, FxCompiled
void bind_cuda(pybind11::module_& m);          // CUDA C of a graph's kernels, NVRTC
void bind_cuda_runtime(pybind11::module_& m);  // CUDA driver status, test launcher
void bind_settings(pybind11::module_& m);      // the settings table, passes for tests
void bind_cache(pybind11::module_& m);         // disk cache info/clear, live JIT kernels
void bind_training(pybind11::module_& m);      // compiled forward/backward halves, partition_joint

// The process settings with `values` ({name: value}, or None) applied; throws
// ValueError for an unknown name, TypeError for a value of the wrong type.
Settings settings_from_dict(pybind11::handle values);

// Runs `executable` on `inputs` (borrowed, in the graph's placeholder order): a tuple of the
// outputs.
inline pybind11::tuple run_as_tuple(runtime::Executable& executable,
                                    const std::vector<PyObject*>& inputs) {
  return pybind11::reinterpret_steal<pybind11::tuple>(
      runtime::outputs_as_tuple(executable.run(inputs.data(), inputs.size())).release());
}

}  // namespace tl::python
