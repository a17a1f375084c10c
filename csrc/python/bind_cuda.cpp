// CUDA code generation without a GPU: the CUDA C of a captured graph's fused
// kernels, and NVRTC itself, for tests and for looking at generated code.
#include <pybind11/stl.h>

#include <algorithm>

#include "codegen/cuda/cuda_kernel.h"
#include "codegen/cuda/emission_key.h"
#include "core/errors.h"
#include "passes/group_kernels.h"
#include "passes/partition.h"
#include "pipeline/compile_graph.h"
#include "python/bindings.h"
#include "runtime/cuda/nvrtc.h"

namespace py = pybind11;
using namespace pybind11::literals;

namespace tl::python {

namespace {
// "sm_90" / "compute_90" -> compute capability 9.0.
codegen::cuda::Target target_of(const std::string& arch) {
  size_t us = arch.find('_');
  if (us == std::string::npos || arch.size() < us + 3)
    TL_THROW(Value) << "architecture must look like 'sm_90' or 'compute_90', got '" << arch << "'";
  int cc = std::stoi(arch.substr(us + 1));
  codegen::cuda::Target t;
  t.sm_major = cc / 10;
  t.sm_minor = cc % 10;
  return t;
}
}  // namespace

void bind_cuda(py::module_& m) {
  m.def(
      "nvrtc_available", [] { return runtime::cuda::nvrtc_available(); },
      "Whether NVRTC could be loaded (see nvrtc_version for why not).");
  m.def(
      "nvrtc_version",
      [] {
        auto v = runtime::cuda::nvrtc_version();
        return py::make_tuple(v.major, v.minor);
      },
      "(major, minor) of the loaded NVRTC; raises torchlite Unsupported naming the places\n"
      "searched when it cannot be loaded.");
  m.def(
      "nvrtc_compile",
      [](const std::string& source, const std::string& name, const std::string& arch,
         const std::vector<std::string>& options) {
        std::string image;
        {
          py::gil_scoped_release nogil;  // NVRTC is thread-safe: callers may compile in threads
          image = runtime::cuda::nvrtc_compile(source, name, arch, options);
        }
        return py::bytes(image);
      },
      py::arg("source"), py::arg("name"), py::arg("arch") = "compute_90",
      py::arg("options") = std::vector<std::string>{},
      "Compiles CUDA C to PTX (arch 'compute_XY') or a cubin ('sm_XY'), with extra NVRTC\n"
      "`options`; raises ValueError with NVRTC's log and the numbered source on an error.");
  m.def(
      "cuda_kernel_sources",
      [](const std::shared_ptr<ir::Graph>& g, const std::string& arch, bool compile,
         int pointwise_block, bool group_kernels, int reduce_block, bool runtime_sizes,
         std::vector<int64_t> static_sizes) {
        codegen::cuda::Target target = target_of(arch);
        if (pointwise_block > 0) target.pointwise_block = pointwise_block;
        target.reduce_block = reduce_block;
        passes::Partition p = passes::partition_graph(*g);
        for (auto& k : p.kernels) k.kernel.runtime_sizes = runtime_sizes;
        if (group_kernels) passes::group_kernels(p);
        std::sort(static_sizes.begin(), static_sizes.end());
        for (auto& k : p.kernels) pipeline::mark_static_axes(k.kernel, static_sizes);
        std::vector<codegen::cuda::CudaKernel> kernels;
        for (const auto& k : p.kernels)
          kernels.push_back(codegen::cuda::emit_cuda_kernel(k.kernel, k.kernel.name, target));
        py::list out;
        for (size_t i = 0; i < kernels.size(); ++i) {
          const codegen::cuda::CudaKernel& ck = kernels[i];
          py::object ptx = py::none();
          if (compile) {
            py::gil_scoped_release nogil;
            std::string image = runtime::cuda::nvrtc_compile(ck.source, ck.name, arch);
            py::gil_scoped_acquire gil;
            ptx = py::bytes(image);
          }
          py::dict launch(
              "vector_name"_a = ck.vector_name, "vector_fallback_name"_a = ck.vector_fallback_name,
              "aligned_params"_a = ck.aligned_params, "grid"_a = ck.grid, "block"_a = ck.block,
              "shared_bytes"_a = ck.shared_bytes, "dependent_launch"_a = ck.dependent_launch,
              "group_name"_a = ck.group.name, "group_members"_a = ck.group.members,
              "group_bytes"_a = ck.group.bytes, "other_blocks"_a = ck.other_blocks,
              "dims"_a = ck.dims,
              "emission_key"_a =
                  py::bytes(codegen::cuda::emission_key(p.kernels[i].kernel, target)));
          out.append(py::make_tuple(ck.name, ck.source, ptx, launch));
        }
        return out;
      },
      py::arg("graph"), py::arg("arch") = "compute_90", py::arg("compile") = true,
      py::arg("pointwise_block") = 0, py::arg("group_kernels") = false, py::arg("reduce_block") = 0,
      py::arg("runtime_sizes") = false, py::arg("static_sizes") = std::vector<int64_t>{},
      "Lowers and fuses a captured graph and emits CUDA C for each kernel: a list of\n"
      "(name, source, ptx or None, launch dict: its launch shape, dims and emission_key,\n"
      "codegen/cuda/emission_key.h), NVRTC-compiled for `arch` when `compile`;\n"
      "pointwise kernels `pointwise_block` threads a block when > 0, reductions `reduce_block`\n"
      "(Target::reduce_block; max-autotune's builds: the launch dict's `other_blocks`);\n"
      "`group_kernels`: passes::group_kernels first (grouped kernels get a group entry);\n"
      "`runtime_sizes`: every kernel takes its sizes at run time (ir::Kernel::runtime_sizes,\n"
      "as compile_graph sets it for dynamic shapes); `static_sizes`: with it, the sizes that\n"
      "are model constants (PassContext::static_sizes: axes of these sizes are literals).");
}

}  // namespace tl::python
