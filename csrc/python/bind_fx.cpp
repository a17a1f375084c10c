// torchlite as a torch.compile backend: a torch.fx.GraphModule (Dynamo's
// graph) becomes an ir::Graph, and FxCompiled compiles it with the same
// compile_graph torchlite's own front end uses (fused kernels, or op by op).
#include <pybind11/stl.h>

#include <unordered_map>

#include "core/errors.h"
#include "ir/graph.h"
#include "pipeline/compile_graph.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace tl::python {
namespace {

using GraphHandle = std::shared_ptr<ir::Graph>;

// One GraphModule being read. fx nodes stay alive with `gm`, so their
// addresses key the map; a get_attr of a non-tensor maps to a constant Arg.
struct FxReader {
  py::object gm, torch, node_type;
  py::object device;  // None, or the device of values whose examples are on "meta"
  GraphHandle graph = std::make_shared<ir::Graph>();
  std::unordered_map<PyObject*, ir::Arg> values;
  py::list extra_inputs;  // get_attr tensors, appended to the inputs on every call
};

std::vector<int64_t> static_ints(py::handle seq, const std::string& what) {
  std::vector<int64_t> out;
  for (py::handle item : seq) {
    // NOTE: a SymInt is no PyLong: symbolic shapes are left to gm.forward.
    if (!PyLong_Check(item.ptr()))
      TL_THROW(Unsupported) << "fx graph: " << what << " has a symbolic or non-int size";
    out.push_back(item.cast<int64_t>());
  }
  return out;
}

// TensorMeta of a FakeTensor (or a real get_attr tensor); nullopt for other
// values. Symbolic values and non-strided layouts are Unsupported.
std::optional<ir::TensorMeta> meta_of(const FxReader& r, py::handle v, const std::string& what) {
  for (const char* sym : {"SymInt", "SymFloat", "SymBool"})
    if (py::isinstance(v, r.torch.attr(sym)))
      TL_THROW(Unsupported) << "fx graph: " << what << " is a " << sym;
  if (!py::isinstance(v, r.torch.attr("Tensor"))) return std::nullopt;
  if (!v.attr("layout").is(r.torch.attr("strided")))
    TL_THROW(Unsupported) << "fx graph: " << what << " is not a strided tensor";
  ir::TensorMeta m;
  m.sizes = static_ints(v.attr("shape"), what);
  m.strides = static_ints(v.attr("stride")(), what);
  m.dtype = PyRef::borrow(v.attr("dtype").ptr());
  py::object device = v.attr("device");
  if (!r.device.is_none() && device.attr("type").cast<std::string>() == "meta") device = r.device;
  m.device = PyRef::borrow(device.ptr());
  m.requires_grad = v.attr("requires_grad").cast<bool>();
  return m;
}

// The trace-time example of a tensor value: a meta tensor of its shape,
// strides and dtype, as torchlite's own capture records. NOTE: Dynamo's
// FakeTensors belong to Dynamo's fake mode; passes that run ops on examples
// under a mode of their own (channels_last) cannot mix them in.
py::object example_tensor(const FxReader& r, py::handle v) {
  return r.torch.attr("empty_strided")(v.attr("shape"), v.attr("stride")(),
                                       py::arg("dtype") = v.attr("dtype"),
                                       py::arg("device") = "meta");
}

void set_example(const FxReader& r, ir::Node* node, py::handle example, const std::string& what) {
  node->meta = meta_of(r, example, what);
  node->example = PyRef::borrow(node->meta ? example_tensor(r, example).ptr() : example.ptr());
}

bool holds_node(const FxReader& r, py::handle v) {
  if (py::isinstance(v, r.node_type)) return true;
  if (PySlice_Check(v.ptr()))
    return holds_node(r, v.attr("start")) || holds_node(r, v.attr("stop")) ||
           holds_node(r, v.attr("step"));
  if (PyTuple_Check(v.ptr()) || PyList_Check(v.ptr())) {
    for (py::handle item : v)
      if (holds_node(r, item)) return true;
  }
  if (PyDict_Check(v.ptr())) {
    for (auto [k, item] : py::reinterpret_borrow<py::dict>(v))
      if (holds_node(r, k) || holds_node(r, item)) return true;
  }
  return false;
}

ir::Arg to_arg(const FxReader& r, py::handle v) {
  if (py::isinstance(v, r.node_type)) {
    auto it = r.values.find(v.ptr());
    if (it == r.values.end())
      TL_THROW(Unsupported) << "fx graph: node " << py::str(v).cast<std::string>()
                            << " is used before it is defined";
    return it->second;
  }
  // NOTE: exact tuples only: a namedtuple or torch.Size rebuilt as a plain
  // tuple would change the type the op sees.
  if (PyTuple_CheckExact(v.ptr()) || PyList_Check(v.ptr())) {
    std::vector<ir::Arg> items;
    for (py::handle item : v) items.push_back(to_arg(r, item));
    return PyTuple_Check(v.ptr()) ? ir::Arg::tuple(std::move(items))
                                  : ir::Arg::list(std::move(items));
  }
  if (PyDict_Check(v.ptr())) {
    std::vector<PyRef> keys;
    std::vector<ir::Arg> items;
    for (auto [k, item] : py::reinterpret_borrow<py::dict>(v)) {
      if (holds_node(r, k)) TL_THROW(Unsupported) << "fx graph: a dict key is a graph value";
      keys.push_back(PyRef::borrow(k.ptr()));
      items.push_back(to_arg(r, item));
    }
    return ir::Arg::dict(std::move(keys), std::move(items));
  }
  if (holds_node(r, v))
    TL_THROW(Unsupported) << "fx graph: a " << Py_TYPE(v.ptr())->tp_name
                          << " argument holds graph values";
  return ir::Arg::constant(PyRef::borrow(v.ptr()));
}

std::pair<std::vector<ir::Arg>, std::vector<std::pair<std::string, ir::Arg>>> call_args(
    const FxReader& r, py::handle fx_node) {
  std::vector<ir::Arg> args;
  for (py::handle a : fx_node.attr("args")) args.push_back(to_arg(r, a));
  std::vector<std::pair<std::string, ir::Arg>> kwargs;
  for (auto [k, v] : fx_node.attr("kwargs").cast<py::dict>())
    kwargs.emplace_back(k.cast<std::string>(), to_arg(r, v));
  return {std::move(args), std::move(kwargs)};
}

py::object example_of(py::handle fx_node) {
  py::dict meta = fx_node.attr("meta");
  // Dynamo writes "example_value"; AOT/export graphs write "val".
  for (const char* key : {"example_value", "val"})
    if (meta.contains(key)) return meta[key];
  return py::none();
}

void flatten_output(const FxReader& r, py::handle v, std::vector<ir::Arg>& out) {
  if (PyTuple_CheckExact(v.ptr()) || PyList_Check(v.ptr())) {
    for (py::handle item : v) flatten_output(r, item, out);
    return;
  }
  if (PyDict_Check(v.ptr())) TL_THROW(Unsupported) << "fx graph: the output holds a dict";
  out.push_back(to_arg(r, v));
}

py::object get_attr(const FxReader& r, const std::string& target) {
  py::object v = r.gm;
  size_t start = 0;
  while (true) {
    size_t dot = target.find('.', start);
    v = v.attr(py::str(target.substr(start, dot - start)));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// Every node but the placeholders, which are read first.
void read_node(FxReader& r, py::handle n, const std::string& op, const std::string& name) {
  py::object target = n.attr("target");
  py::object example = example_of(n);
  ir::Node* node = nullptr;
  if (op == "get_attr") {
    py::object v = get_attr(r, target.cast<std::string>());
    if (!py::isinstance(v, r.torch.attr("Tensor"))) {
      r.values[n.ptr()] = ir::Arg::constant(PyRef::borrow(v.ptr()));
      return;
    }
    // A tensor attribute is one more graph input, so kernels can read it.
    node = r.graph->add_placeholder(
        name, ir::Source::held(PyRef::borrow(v.ptr()), "get_attr " + target.cast<std::string>()));
    r.extra_inputs.append(v);
    example = v;
  } else if (op == "output") {
    std::vector<ir::Arg> outs;
    py::tuple args = n.attr("args");
    if (!args.empty()) flatten_output(r, args[0], outs);
    r.graph->set_output(std::move(outs));
    return;
  } else {
    auto [args, kwargs] = call_args(r, n);
    if (op == "call_method") {
      node =
          r.graph->add_call_method(target.cast<std::string>(), std::move(args), std::move(kwargs));
    } else if (op == "call_module") {
      py::object mod = r.gm.attr("get_submodule")(target);
      node =
          r.graph->add_call_function(PyRef::borrow(mod.ptr()), std::move(args), std::move(kwargs));
      node->target_name = "self." + target.cast<std::string>();  // extern: no rule has this name
    } else if (op == "call_function") {
      node = r.graph->add_call_function(PyRef::borrow(target.ptr()), std::move(args),
                                        std::move(kwargs));
    } else {
      TL_THROW(Unsupported) << "fx graph: node " << name << " has op " << op;
    }
  }
  set_example(r, node, example, "node " + name);
  r.values[n.ptr()] = ir::Arg::of_node(node);
}

// (graph, extra inputs): the graph takes the GraphModule's inputs, then the
// extra inputs (get_attr tensors), and returns its outputs flattened.
py::tuple graph_from_fx(py::object gm, py::object device) {
  FxReader r;
  r.gm = gm;
  r.device = device;
  r.torch = py::module_::import("torch");
  r.node_type = py::module_::import("torch.fx").attr("Node");
  py::list fx_nodes(gm.attr("graph").attr("nodes"));
  int index = 0;
  for (py::handle n : fx_nodes) {
    if (n.attr("op").cast<std::string>() != "placeholder") continue;
    std::string name = n.attr("name").cast<std::string>();
    ir::Node* node = r.graph->add_placeholder(name, ir::Source::local(index++, name));
    py::object example = example_of(n);
    set_example(r, node, example, "input " + name);
    r.values[n.ptr()] = ir::Arg::of_node(node);
  }
  for (py::handle n : fx_nodes) {
    std::string op = n.attr("op").cast<std::string>();
    if (op != "placeholder") read_node(r, n, op, n.attr("name").cast<std::string>());
  }
  if (!r.graph->output()) TL_THROW(Unsupported) << "fx graph: no output node";
  r.graph->lint();
  return py::make_tuple(r.graph, r.extra_inputs);
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
