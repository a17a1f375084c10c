// The CUDA runtime's Python surface: whether the driver loads, the CUBIN cache
// folder, and a launcher for hand-written CUDA C (tests and benchmarks check
// the runtime apart from the code generator with it).
#include <pybind11/stl.h>

#include "core/errors.h"
#include "python/bindings.h"
#include "runtime/cuda/compile.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda_autotune.h"

namespace py = pybind11;

namespace tl::python {

namespace {
// Compiles `source` (cached like generated kernels) and launches `entry` with
// one pointer per tensor on torch's current stream of the first tensor's device.
// With a `vector_name` it launches the vector entry the runtime picks instead
// (that entry, or `vector_fallback_name` where that one spills registers).
void launch_source(const std::string& source, const std::string& entry, py::list tensors,
                   int64_t grid, int block, int shared_bytes, bool dependent_launch,
                   const std::string& vector_name, const std::string& vector_fallback_name) {
  if (tensors.empty()) TL_THROW(Value) << "_cuda_launch_source needs at least one tensor";
  int device = tensors[0].attr("device").attr("index").cast<int>();
  codegen::cuda::CudaKernel spec;
  spec.name = entry;
  spec.source = source;
  spec.grid = grid;
  spec.block = block;
  spec.shared_bytes = shared_bytes;
  spec.vector_name = vector_name;
  spec.vector_fallback_name = vector_fallback_name;
  runtime::cuda::LoadedKernel k = runtime::cuda::load_kernels({spec}, device)[0];
  std::vector<void*> ptrs;
  for (py::handle t : tensors)
    ptrs.push_back(reinterpret_cast<void*>(t.attr("data_ptr")().cast<uintptr_t>()));
  std::vector<void*> args;
  for (auto& p : ptrs) args.push_back(&p);
  py::object torch_c = py::module_::import("torch").attr("_C");
  auto stream = torch_c.attr("_cuda_getCurrentRawStream")(device).cast<uintptr_t>();
  runtime::cuda::ContextScope ctx(device);
  runtime::cuda::launch(vector_name.empty() ? k.fn : k.vector_fn, k.grid, k.block, k.shared_bytes,
                        reinterpret_cast<void*>(stream), args.data(), entry, dependent_launch);
}
}  // namespace

void bind_cuda_runtime(py::module_& m) {
  m.def(
      "_autotune_choose_grid",
      [](const std::string& key, const std::string& gpu, unsigned default_grid, unsigned max_grid,
         py::function time_us) {
        runtime::GridChoice c =
            runtime::choose_grid(key, gpu, default_grid, max_grid,
                                 [&](unsigned grid) { return time_us(grid).cast<double>(); });
        return py::make_tuple(c.grid, c.cached, c.report);
      },
      py::arg("key"), py::arg("gpu"), py::arg("default_grid"), py::arg("max_grid"),
      py::arg("time_us"),
      "The autotune grid choice (runtime/cuda_autotune.h) with `time_us(grid)` as the timer "
      "(tests time nothing): (grid, read from the disk cache, report).");
  m.def(
      "_autotune_choose_launch",
      [](const std::string& key, const std::string& gpu, const std::vector<py::tuple>& variants,
         py::function time_us) {
        std::vector<runtime::LaunchVariant> vs;
        for (const py::tuple& v : variants)
          vs.push_back({v[0].cast<std::string>(), v[1].cast<unsigned>(), v[2].cast<unsigned>()});
        runtime::LaunchChoice c = runtime::choose_launch(
            key, gpu, vs, [&](size_t v, unsigned grid) { return time_us(v, grid).cast<double>(); });
        return py::make_tuple(c.variant, c.grid, c.cached, c.report);
      },
      py::arg("key"), py::arg("gpu"), py::arg("variants"), py::arg("time_us"),
      "The autotune choice over several builds of a kernel (runtime/cuda_autotune.h): "
      "`variants` a list of (label, default grid, max grid), `time_us(variant, grid)` the "
      "timer: (variant, grid, read from the disk cache, report).");
  m.def(
      "cuda_driver_available",
      [] {
        std::string why;
        bool ok = runtime::cuda::driver_available(&why);
        return py::make_tuple(ok, why);
      },
      "(True, '') when libcuda.so.1 loads and cuInit succeeds, else (False, why).");
  m.def("live_cuda_modules", &runtime::cuda::live_modules,
        "CUDA modules loaded now (each is unloaded once no compiled graph uses its kernels).");
  m.def("cuda_emits", &runtime::cuda::kernel_emits,
        "Kernels emitted as CUDA C so far (a kernel whose emission key names code still loaded\n"
        "takes that code without emitting: codegen/cuda/emission_key.h).");
  m.def("_cuda_launch_source", &launch_source, py::arg("source"), py::arg("entry"),
        py::arg("tensors"), py::arg("grid"), py::arg("block"), py::arg("shared_bytes") = 0,
        py::arg("dependent_launch") = false, py::arg("vector_name") = "",
        py::arg("vector_fallback_name") = "",
        "Tests: compiles CUDA C with NVRTC and launches `entry(tensor pointers...)`, with\n"
        "programmatic stream serialization when `dependent_launch`; with `vector_name`, the\n"
        "vector entry the runtime picks (`vector_fallback_name` where that one spills).");
}

}  // namespace tl::python
