#include <pybind11/stl.h>

#include "frame/compile_frame.h"
#include "ir/graph.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace tl::python {
namespace {

// NOTE: pybind11 holders cannot be shared_ptr<const T>; graphs are never
// mutated once wrapped.
using GraphHandle = std::shared_ptr<ir::Graph>;

struct NodeRef {
  std::string name;
};

py::object arg_to_py(const ir::Arg& a) {
  switch (a.kind) {
    case ir::Arg::Kind::Node:
      return py::cast(NodeRef{a.node->name});
    case ir::Arg::Kind::Const:
      return py::reinterpret_borrow<py::object>(a.value.get());
    case ir::Arg::Kind::Tuple: {
      py::tuple t(a.items.size());
      for (size_t i = 0; i < a.items.size(); ++i) t[i] = arg_to_py(a.items[i]);
      return t;
    }
    case ir::Arg::Kind::List: {
      py::list l;
      for (auto& it : a.items) l.append(arg_to_py(it));
      return l;
    }
    case ir::Arg::Kind::Dict: {
      py::dict d;
      for (size_t i = 0; i < a.items.size(); ++i)
        d[py::reinterpret_borrow<py::object>(a.keys[i].get())] = arg_to_py(a.items[i]);
      return d;
    }
  }
  return py::none();
}

py::list graph_nodes(const GraphHandle& g) {
  static const char* kOps[] = {"placeholder", "call_function", "call_method", "output"};
  py::list out;
  for (auto& n : g->nodes()) {
    py::dict d;
    d["op"] = kOps[static_cast<int>(n->op)];
    d["name"] = n->name;
    if (n->op == ir::OpKind::CallFunction)
      d["target"] = py::reinterpret_borrow<py::object>(n->target.get());
    else if (n->op == ir::OpKind::CallMethod)
      d["target"] = n->target_name;
    else
      d["target"] = py::none();
    py::tuple args(n->args.size());
    for (size_t i = 0; i < n->args.size(); ++i) args[i] = arg_to_py(n->args[i]);
    d["args"] = args;
    py::dict kwargs;
    for (auto& [k, v] : n->kwargs) kwargs[py::str(k)] = arg_to_py(v);
    d["kwargs"] = kwargs;
    if (n->meta) {
      py::dict m;
      m["shape"] = py::tuple(py::cast(n->meta->sizes));
      m["stride"] = py::tuple(py::cast(n->meta->strides));
      m["dtype"] = py::reinterpret_borrow<py::object>(n->meta->dtype.get());
      m["device"] = py::reinterpret_borrow<py::object>(n->meta->device.get());
      m["requires_grad"] = n->meta->requires_grad;
      d["meta"] = m;
    } else {
      d["meta"] = py::none();
    }
    // The trace-time meta value (tensor, tuple, ...), aliasing like the real one.
    d["example"] = n->example ? py::reinterpret_borrow<py::object>(n->example.get()) : py::none();
    d["source"] = n->source ? py::cast(n->source->str()) : py::none();
    d["location"] = n->location;
    out.append(d);
  }
  return out;
}

ir::Node* node_named(const GraphHandle& g, const std::string& name) {
  for (auto& n : g->nodes())
    if (n->name == name) return n.get();
  throw py::key_error("no node named " + name);
}

void move_before(const GraphHandle& g, const std::string& node, const std::string& before) {
  g->move_before(node_named(g, node), node_named(g, before));
}

PyObject* wrap_graph(std::shared_ptr<const ir::Graph> g) {
  try {
    return py::cast(std::const_pointer_cast<ir::Graph>(std::move(g))).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  }
}

}  // namespace

void bind_ir(py::module_& m) {
  py::class_<NodeRef>(m, "NodeRef")
      .def_readonly("name", &NodeRef::name)
      .def("__repr__", [](const NodeRef& r) { return "%" + r.name; });
  py::class_<ir::Graph, GraphHandle>(m, "Graph")
      .def("__str__", [](const GraphHandle& g) { return g->str(); })
      .def("__repr__",
           [](const GraphHandle& g) {
             return "<torchlite Graph with " + std::to_string(g->num_ops()) + " ops>";
           })
      .def("nodes", &graph_nodes, "Nodes as dicts (op, name, target, args, kwargs, meta, source).")
      .def_property_readonly("num_ops", [](const GraphHandle& g) { return g->num_ops(); })
      .def("move_before", &move_before, py::arg("node"), py::arg("before"),
           "Graph::move_before by node names: for passes written in Python (tests).");
  frame::set_graph_wrapper(&wrap_graph);
}

void bind_compile(py::module_& m) {
  m.def("set_backend_bridge",
        [](py::object fn) { frame::set_backend_bridge(fn.is_none() ? nullptr : fn.ptr()); });
}

}  // namespace tl::python
