// torchlite as a torch.compile backend: a torch.fx.GraphModule (Dynamo's
// graph) becomes an ir::Graph (ir/fx_import.h), and FxCompiled compiles it with
// the same compile_graph torchlite's own front end uses (fused kernels, or op by op).
#include <pybind11/stl.h>

#include "core/errors.h"
#include "ir/fx_import.h"
#include "ir/graph.h"
#include "pipeline/compile_graph.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace tl::python {
namespace {

using GraphHandle = std::shared_ptr<ir::Graph>;

// (graph, extra inputs): the graph takes the GraphModule's inputs, then the
// extra inputs (get_attr tensors), and returns its outputs flattened.
py::tuple graph_from_fx(py::object gm, py::object device) {
  ir::FxImport imported = ir::graph_from_fx(gm.ptr(), device.ptr());
  py::list extra_inputs;
  for (const PyRef& v : imported.extra_inputs) extra_inputs.append(py::handle(v.get()));
  return py::make_tuple(imported.graph, extra_inputs);
}

class FxCompiled {
 public:
  // The same compile_graph as the frame hook's (passes, verify, trace, kernels).
  FxCompiled(GraphHandle graph, py::list extra_inputs, py::object settings, const std::string& mode,
             bool inputs_unaliased)
      : graph_(graph) {
    for (py::handle v : extra_inputs) extras_.push_back(PyRef::borrow(v.ptr()));
    n_inputs_ = graph->placeholders().size() - extras_.size();
    pipeline::PassContext ctx{settings_from_dict(settings), mode, ""};
    ctx.inputs_unaliased = inputs_unaliased;
    if (ctx.settings.trace)
      ctx.trace_dir = pipeline::new_trace_folder(ctx.settings.debug_dir, "fx");
    pipeline::CompileResult ex = pipeline::compile_graph(graph, ctx);
    executable_ = std::move(ex.executable);
    passes_ = std::move(ex.passes);
  }

  // Positional inputs, or one list of them (the "boxed" calling convention).
  py::tuple call(py::args args) const {
    py::sequence flat = args;
    if (args.size() == 1 && PyList_Check(args[0].ptr()))
      flat = py::reinterpret_borrow<py::sequence>(args[0]);
    if (flat.size() != n_inputs_)
      TL_THROW(Type) << "torchlite FxCompiled: expected " << n_inputs_ << " inputs, got "
                     << flat.size();
    std::vector<PyObject*> inputs;
    for (py::handle v : flat) inputs.push_back(v.ptr());
    for (const PyRef& v : extras_) inputs.push_back(v.get());
    return run_as_tuple(*executable_, inputs);
  }

  size_t kernel_count() const { return executable_->kernel_count(); }
  size_t in_place_stores() const {
    size_t n = 0;
    if (const runtime::CompiledGraph* compiled = executable_->compiled())
      for (const auto& k : compiled->partition().kernels)
        for (const ir::Node* t : k.store_into) n += t != nullptr;
    return n;
  }
  const GraphHandle& graph() const { return graph_; }
  const std::vector<std::string>& passes() const { return passes_; }

 private:
  GraphHandle graph_;
  std::vector<PyRef> extras_;
  size_t n_inputs_ = 0;
  std::unique_ptr<runtime::Executable> executable_;  // kernels, op by op, or forward+backward
  std::vector<std::string> passes_;
};

}  // namespace

void bind_fx(py::module_& m) {
  m.def("graph_from_fx", &graph_from_fx, py::arg("gm"), py::arg("device") = py::none(),
        "A torch.fx.GraphModule as a torchlite Graph: (graph, extra_inputs). The graph takes\n"
        "the module's inputs then extra_inputs (its get_attr tensors) and returns a flat tuple.\n"
        "Raises Unsupported for symbolic shapes and values it cannot represent. `device`: the\n"
        "real device of values whose examples are meta tensors (a joint graph traced on meta).");
  py::class_<FxCompiled>(m, "FxCompiled")
      .def(py::init<GraphHandle, py::list, py::object, const std::string&, bool>(),
           py::arg("graph"), py::arg("extra_inputs") = py::list(), py::arg("settings") = py::none(),
           py::arg("mode") = "default", py::arg("inputs_unaliased") = false,
           "inputs_unaliased: the caller promises no two inputs share memory, so a kernel may\n"
           "store a value copied into an input (`x.copy_(v)` at the end) into x's buffer.")
      .def("__call__", &FxCompiled::call)
      .def_property_readonly("kernel_count", &FxCompiled::kernel_count)
      .def_property_readonly("in_place_stores", &FxCompiled::in_place_stores)
      .def_property_readonly("passes", &FxCompiled::passes)
      .def_property_readonly("graph", &FxCompiled::graph);
}

}  // namespace tl::python
