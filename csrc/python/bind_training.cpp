// Training: a graph autograd records runs as a compiled forward and a compiled
// backward. compile_graph calls the TrainingCompiler registered here, which
// traces the joint graph in Python (torchlite/_training.py: torch's own
// derivative formulas run on meta tensors under a recording dispatch mode),
// splits it (passes/partition_joint.cpp), compiles both halves with the
// caller's PassContext, and asks Python for the torch.autograd.Function that
// links them.
#include <pybind11/stl.h>

#include "core/dump_dir.h"
#include "core/errors.h"
#include "core/python_helpers.h"
#include "core/secure_fs.h"
#include "passes/partition_joint.h"
#include "pipeline/compile_graph.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace tl::python {
namespace {

// A function of torchlite/_training.py or _ddp_buckets.py, registered at import.
py::object helper(const char* name) {
  return py::reinterpret_steal<py::object>(python_helper(name).release());
}

using GraphHandle = std::shared_ptr<ir::Graph>;

// One half (forward or backward): fused kernels, or op by op.
class CompiledHalf {
 public:
  CompiledHalf(GraphHandle graph, pipeline::CompileResult ex)
      : graph_(std::move(graph)), executable_(std::move(ex.executable)) {}

  // Positional inputs in the graph's placeholder order; a tuple of outputs.
  py::tuple call(py::args args) const {
    std::vector<PyObject*> inputs;
    inputs.reserve(args.size());
    for (py::handle v : args) inputs.push_back(v.ptr());
    return run_as_tuple(*executable_, inputs);
  }

  size_t kernel_count() const { return executable_->kernel_count(); }
  const GraphHandle& graph() const { return graph_; }

 private:
  GraphHandle graph_;
  std::unique_ptr<runtime::Executable> executable_;
};

pipeline::PassContext sub_context(const pipeline::PassContext& ctx, const std::string& name) {
  pipeline::PassContext sub = ctx;
  if (ctx.trace_dir.empty()) return sub;
  // NOTE: trace_dir lies in this process's private dump folder; tracing never fails a compile.
  bool made = secure_fs::make_private_dir(ctx.trace_dir + name).problem.empty();
  sub.trace_dir = made ? ctx.trace_dir + name + "/" : "";
  return sub;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "(none)" : out;
}

void write_trace(const pipeline::PassContext& ctx, const ir::Graph& joint,
                 const passes::JointSplit& split) {
  if (ctx.trace_dir.empty()) return;
  write_dump(ctx.trace_dir + "joint.txt", joint.str());
  write_dump(ctx.trace_dir + "partition.txt",
             "saved for backward: " + joined(split.saved) +
                 "\nrecomputed in backward: " + joined(split.recomputed) + "\n\nforward:\n" +
                 split.forward->str() + "\nbackward:\n" + split.backward->str());
}

// A graph captured inside DistributedDataParallel's forward: its pieces between gradient
// buckets, each compiled on its own (torchlite/_ddp_buckets.py), or null when not split.
PyRef split_at_ddp_buckets(const GraphHandle& graph, const pipeline::PassContext& ctx) {
  auto index = std::make_shared<int>(0);
  py::cpp_function compile_piece([ctx, index](GraphHandle piece) -> py::object {
    std::string name = "bucket_piece" + std::to_string((*index)++);
    pipeline::CompileResult ex = pipeline::compile_graph(piece, sub_context(ctx, name));
    if (ex.training_fn) return py::reinterpret_borrow<py::object>(ex.training_fn.get());
    return py::cast(CompiledHalf(piece, std::move(ex)));  // NOTE: op by op under autograd
  });
  py::object split = helper("ddp_buckets.split_at_buckets")(graph, compile_piece);
  return split.is_none() ? PyRef() : PyRef::borrow(split.ptr());
}

PyRef compile_training(GraphHandle graph, const pipeline::PassContext& ctx, std::string& why) {
  if (PyRef split = split_at_ddp_buckets(graph, ctx)) {
    why = "split at DDP's gradient buckets";
    return split;
  }
  py::object joint = helper("training.trace_joint")(graph);
  if (!joint.attr("reason").is_none()) {
    why = joint.attr("reason").cast<std::string>();
    return PyRef();
  }
  auto joint_graph = joint.attr("graph").cast<GraphHandle>();
  passes::JointSplit split;
  try {
    split = passes::partition_joint(*joint_graph, joint.attr("num_primals").cast<size_t>(),
                                    joint.attr("num_forward_outputs").cast<size_t>(),
                                    ctx.settings.recompute_in_backward);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Unsupported) throw;
    why = e.what();
    return PyRef();
  }
  write_trace(ctx, *joint_graph, split);
  pipeline::CompileResult fwd = pipeline::compile_graph(split.forward, sub_context(ctx, "forward"));
  pipeline::CompileResult bwd =
      pipeline::compile_graph(split.backward, sub_context(ctx, "backward"));
  if (fwd.training_fn || bwd.training_fn) {
    why = "a half of the joint graph still requires grad";
    return PyRef();
  }
  py::object f = py::cast(CompiledHalf(split.forward, std::move(fwd)));
  py::object b = py::cast(CompiledHalf(split.backward, std::move(bwd)));
  py::object fn = helper("training.make_training_function")(joint, f, b, py::cast(split.saved));
  return PyRef::borrow(fn.ptr());
}

}  // namespace

void bind_training(py::module_& m) {
  py::class_<CompiledHalf>(m, "CompiledHalf")
      .def("__call__", &CompiledHalf::call)
      .def_property_readonly("kernel_count", &CompiledHalf::kernel_count)
      .def_property_readonly("graph", &CompiledHalf::graph);
  m.def(
      "partition_joint",
      [](const GraphHandle& joint, size_t num_primals, size_t num_forward_outputs, bool recompute) {
        passes::JointSplit s =
            passes::partition_joint(*joint, num_primals, num_forward_outputs, recompute);
        return py::make_tuple(s.forward, s.backward, s.saved, s.recomputed);
      },
      py::arg("joint"), py::arg("num_primals"), py::arg("num_forward_outputs"),
      py::arg("recompute") = true,
      "Splits a joint graph: (forward, backward, saved names, recomputed names).");
  pipeline::set_training_compiler(
      [](GraphHandle graph, const pipeline::PassContext& ctx, std::string& why) -> PyRef {
        try {
          return compile_training(std::move(graph), ctx, why);
        } catch (py::error_already_set& e) {
          e.restore();
          throw PythonError();
        }
      });
}

}  // namespace tl::python
