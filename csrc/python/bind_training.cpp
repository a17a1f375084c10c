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
#include "guards/tensor_list_layout.h"
#include "passes/partition_joint.h"
#include "pipeline/compile_graph.h"
#include "python/bindings.h"
#include "runtime/compiled_graph.h"

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
    std::vector<PyRef> relaid;  // NOTE: owns the copies `inputs` points at
    relayout_inputs(inputs, relaid);
    return run_as_tuple(*executable_, inputs);
  }

  // The same with the inputs handed over in `args` (a list, emptied here): each is released
  // after its last reader. NOTE: a training backward's saved values, which eager's autograd
  // frees node by node as backward walks back; held to the end of one compiled backward, all
  // of them live beside every gradient it makes (GPT-2's peak memory).
  py::tuple consume(py::list args) const {
    std::vector<PyRef> inputs;
    inputs.reserve(args.size());
    for (py::handle v : args) inputs.push_back(PyRef::borrow(v.ptr()));
    if (PyList_SetSlice(args.ptr(), 0, PyList_GET_SIZE(args.ptr()), nullptr) < 0)
      throw PythonError();
    if (!relayout_.empty()) {
      std::vector<PyObject*> in = borrowed(inputs);
      std::vector<PyRef> relaid;
      relayout_inputs(in, relaid);
      for (size_t i = 0; i < inputs.size(); ++i)
        if (in[i] != inputs[i].get()) inputs[i] = PyRef::borrow(in[i]);
    }
    return py::reinterpret_steal<py::tuple>(
        runtime::outputs_as_tuple(executable_->run_owned(std::move(inputs))).release());
  }

  // A backward: before each call, input `index` is made dense in `memory_format` (a
  // torch.memory_format) unless it already is. NOTE: the layout the backward was traced with;
  // a forward run op by op can hand back another (torchlite/_training.py, _saved_layouts).
  void set_relayout(const std::vector<std::pair<size_t, py::object>>& relayout) {
    relayout_.clear();
    for (const auto& [index, format] : relayout)
      relayout_.push_back({index, PyRef::borrow(format.ptr())});
  }

  size_t kernel_count() const { return executable_->kernel_count(); }
  // After a call that raised: true when nothing it ran before raising is visible afterwards
  // beyond what putting the generators back undoes (runtime::Executable). NOTE: a forward
  // writes its mutated inputs (running statistics) in place; once one is written, the frame
  // must not run the graph again eagerly (eager would update them twice).
  bool failed_before_lasting_effects() const {
    return executable_->failed_before_lasting_effects();
  }
  const GraphHandle& graph() const { return graph_; }

  // A forward under CUDA graphs: the saved values (indices into `saved`) that a replay hands
  // out from the pool uncloned; empty when there are none.
  std::vector<int> pool_saved;
  // Whether the last call replayed a recording, so the pool_saved values are pool tensors.
  bool replayed() const {
    const runtime::CudaGraphs* g = cuda_graphs();
    return g && g->last_replayed() >= 0;
  }
  // After a replay: `holder.on_overwrite()` is called before any replay that could overwrite
  // the pool tensors it holds (runtime::CudaGraphPool::keep_valid).
  void keep_valid(py::object holder) const {
    const runtime::CudaGraphs* g = cuda_graphs();
    if (!g || g->last_replayed() < 0) return;
    g->pool()->keep_valid(g->last_replayed(), holder.ptr());
  }

 private:
  struct Relayout {
    size_t index;
    PyRef format;
  };

  void relayout_inputs(std::vector<PyObject*>& inputs, std::vector<PyRef>& relaid) const {
    if (relayout_.empty()) return;
    static PyObject* is_contiguous = PyUnicode_InternFromString("is_contiguous");
    static PyObject* contiguous = PyUnicode_InternFromString("contiguous");
    static PyObject* kwnames = Py_BuildValue("(s)", "memory_format");
    if (!is_contiguous || !contiguous || !kwnames) throw PythonError();
    for (const Relayout& r : relayout_) {
      if (r.index >= inputs.size()) continue;
      PyObject* argv[] = {nullptr, inputs[r.index], r.format.get()};  // NOTE: argv[0] spare
      const size_t nargs = 1 | PY_VECTORCALL_ARGUMENTS_OFFSET;
      PyRef dense =
          PyRef::steal(PyObject_VectorcallMethod(is_contiguous, argv + 1, nargs, kwnames));
      if (!dense) throw PythonError();
      if (dense.get() == Py_True) continue;
      PyRef copy = PyRef::steal(PyObject_VectorcallMethod(contiguous, argv + 1, nargs, kwnames));
      if (!copy) throw PythonError();
      inputs[r.index] = copy.get();
      relaid.push_back(std::move(copy));
    }
  }

  std::vector<Relayout> relayout_;
  const runtime::CudaGraphs* cuda_graphs() const {
    const runtime::CompiledGraph* c = executable_->compiled();
    return c ? c->cuda_graphs() : nullptr;
  }
  GraphHandle graph_;
  std::unique_ptr<runtime::Executable> executable_;
};

pipeline::PassContext sub_context(const pipeline::PassContext& ctx, const std::string& name) {
  pipeline::PassContext sub = ctx;
  // NOTE: a training half keeps torch's SDPA: the backward traced from torch's formulas reads
  // what its forward kernel saved.
  sub.settings.decompose_attention = false;
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

// A function (one flag per tangent -> CompiledHalf) compiling the backward with the flagged
// tangents constant zeros (passes::with_zero_tangents), which the training function calls when
// autograd hands it no gradient for an output; None for a size-generic graph (its zeros would
// need the run's sizes: there autograd materializes them).
// NOTE: called before the backward compiles: compile_graph's passes rewrite the graph they
// compile, and the variants start from the backward as the partitioner made it.
py::object zero_tangent_backwards(const passes::JointSplit& split,
                                  const pipeline::PassContext& ctx) {
  if (ctx.runtime_sizes) return py::none();
  const size_t num_saved = split.saved.size();
  const size_t num_tangents = split.backward->placeholders().size() - num_saved;
  GraphHandle backward = passes::with_zero_tangents(*split.backward, num_saved,
                                                    std::vector<bool>(num_tangents, false));
  auto count = std::make_shared<int>(0);
  return py::cpp_function([backward, num_saved, ctx, count](const std::vector<bool>& zero) {
    GraphHandle g = passes::with_zero_tangents(*backward, num_saved, zero);
    pipeline::PassContext bwd_ctx = sub_context(ctx, "backward_zeros" + std::to_string((*count)++));
    bwd_ctx.cuda_graph_warmups = 2;
    bwd_ctx.copy_inputs_from = static_cast<int64_t>(num_saved);
    bwd_ctx.backward_half = true;
    pipeline::CompileResult ex = pipeline::compile_graph(g, bwd_ctx);
    TL_CHECK(!ex.training_fn) << "a backward with zero tangents requires grad";
    return py::cast(CompiledHalf(g, std::move(ex)));
  });
}

PyRef compile_training(GraphHandle graph, const pipeline::PassContext& ctx, std::string& why,
                       std::string& cuda_graphs) {
  if (PyRef split = split_at_ddp_buckets(graph, ctx)) {
    why = "split at DDP's gradient buckets";
    if (ctx.settings.cuda_graphs) cuda_graphs = "split at DDP's gradient buckets (per piece)";
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
                                    ctx.settings.recompute_in_backward,
                                    ctx.settings.recompute_matmul_inputs,
                                    joint.attr("mutated_inputs").cast<std::vector<size_t>>());
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Unsupported) throw;
    why = e.what();
    return PyRef();
  }
  write_trace(ctx, *joint_graph, split);
  // NOTE: under CUDA graphs the forward hands its saved values out of the pool uncloned and
  // the backward reads them there (docs/internals/cuda_graphs.md): no copy of the activations
  // per step. Saved primals (weights) are the caller's tensors and stay with save_for_backward.
  const size_t num_fwd_outputs = split.forward->output()->args.size() - split.saved.size();
  std::vector<int> pool_saved;
  for (size_t k = 0; k < split.saved.size(); ++k) {
    const ir::Arg& a = split.forward->output()->args[num_fwd_outputs + k];
    if (!(a.kind == ir::Arg::Kind::Node && a.node && a.node->op == ir::OpKind::Placeholder))
      pool_saved.push_back(static_cast<int>(k));
  }
  pipeline::PassContext fwd_ctx = sub_context(ctx, "forward");
  pipeline::PassContext bwd_ctx = sub_context(ctx, "backward");
  fwd_ctx.pool_outputs_from = static_cast<int64_t>(num_fwd_outputs);
  // NOTE: the forward's only writes into its inputs are the write-backs of the mutated ones
  // (partition_joint), each stored by the kernel that computes it (passes/store_in_place.h).
  // That is what eager does (batch norm's kernel updates its running statistics in place), so
  // an input that shares memory with a written one sees the write where eager's would, unlike
  // the optimizer step's functional semantics that inputs_unaliased protects elsewhere.
  fwd_ctx.inputs_unaliased = true;
  fwd_ctx.saved_outputs_from = static_cast<int64_t>(num_fwd_outputs);
  bwd_ctx.cuda_graph_warmups = 2;
  bwd_ctx.copy_inputs_from = static_cast<int64_t>(split.saved.size());  // the tangents
  bwd_ctx.backward_half = true;
  py::object zero_tangents = zero_tangent_backwards(split, ctx);
  pipeline::CompileResult fwd = pipeline::compile_graph(split.forward, fwd_ctx);
  pipeline::CompileResult bwd = pipeline::compile_graph(split.backward, bwd_ctx);
  if (fwd.training_fn || bwd.training_fn) {
    why = "a half of the joint graph still requires grad";
    return PyRef();
  }
  if (ctx.settings.cuda_graphs)
    cuda_graphs = "forward: " + fwd.cuda_graphs + "; backward: " + bwd.cuda_graphs;
  bool fwd_recorded = fwd.executable->compiled() && fwd.executable->compiled()->cuda_graphs();
  CompiledHalf forward_half(split.forward, std::move(fwd));
  if (fwd_recorded) forward_half.pool_saved = std::move(pool_saved);
  py::object f = py::cast(std::move(forward_half));
  py::object b = py::cast(CompiledHalf(split.backward, std::move(bwd)));
  py::object fn =
      helper("training.make_training_function")(joint, f, b, py::cast(split.saved), zero_tangents);
  return PyRef::borrow(fn.ptr());
}

}  // namespace

void bind_training(py::module_& m) {
  py::class_<CompiledHalf>(m, "CompiledHalf")
      .def("__call__", &CompiledHalf::call)
      .def("consume", &CompiledHalf::consume, py::arg("args"))
      .def_property_readonly("kernel_count", &CompiledHalf::kernel_count)
      .def_property_readonly("failed_before_lasting_effects",
                             &CompiledHalf::failed_before_lasting_effects)
      .def_property_readonly("graph", &CompiledHalf::graph)
      .def_readonly("pool_saved", &CompiledHalf::pool_saved)
      .def_property_readonly("replayed", &CompiledHalf::replayed)
      .def("keep_valid", &CompiledHalf::keep_valid, py::arg("holder"))
      .def("set_relayout", &CompiledHalf::set_relayout, py::arg("relayout"));
  m.def(
      "tensor_list_layout",
      [](py::list tensors, Py_ssize_t read_begin, Py_ssize_t read_end) {
        guards::TensorListLayout l =
            guards::read_tensor_list_layout(tensors.ptr(), read_begin, read_end);
        return py::make_tuple(py::bytes(l.key), l.sharing, l.supported);
      },
      py::arg("tensors"), py::arg("read_begin"), py::arg("read_end"),
      "(layout key bytes, sharing, supported) of a list of tensors; those in [read_begin, "
      "read_end) are only read (guards/tensor_list_layout.h).");
  m.def(
      "partition_joint",
      [](const GraphHandle& joint, size_t num_primals, size_t num_forward_outputs, bool recompute,
         bool matmul_inputs, const std::vector<size_t>& mutated) {
        // NOTE: None binds as an empty handle (a joint trace that failed has no graph).
        if (!joint) throw py::value_error("partition_joint: no joint graph (None)");
        passes::JointSplit s = passes::partition_joint(*joint, num_primals, num_forward_outputs,
                                                       recompute, matmul_inputs, mutated);
        return py::make_tuple(s.forward, s.backward, s.saved, s.recomputed);
      },
      py::arg("joint"), py::arg("num_primals"), py::arg("num_forward_outputs"),
      py::arg("recompute") = true, py::arg("matmul_inputs") = true,
      py::arg("mutated") = std::vector<size_t>{},
      "Splits a joint graph: (forward, backward, saved names, recomputed names). `mutated`: the "
      "primal index of each of the last forward outputs that is a mutated input's new value "
      "(the forward then writes it back itself).");
  pipeline::set_training_compiler([](GraphHandle graph, const pipeline::PassContext& ctx,
                                     std::string& why, std::string& cuda_graphs) -> PyRef {
    try {
      return compile_training(std::move(graph), ctx, why, cuda_graphs);
    } catch (py::error_already_set& e) {
      e.restore();
      throw PythonError();
    }
  });
}

}  // namespace tl::python
