#include "ir/fx_import.h"

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/errors.h"
#include "core/py_import.h"

namespace tl::ir {
namespace {

PyRef checked(PyObject* p) {
  if (!p) throw PythonError();
  return PyRef::steal(p);
}

PyRef attr(PyObject* o, const char* name) { return checked(PyObject_GetAttrString(o, name)); }

std::string utf8(PyObject* s) {
  const char* c = PyUnicode_AsUTF8(s);
  if (!c) throw PythonError();
  return c;
}

std::string str_of(PyObject* o) { return utf8(checked(PyObject_Str(o)).get()); }
std::string str_attr(PyObject* o, const char* name) { return utf8(attr(o, name).get()); }

bool is_instance(PyObject* o, PyObject* type) {
  int r = PyObject_IsInstance(o, type);
  if (r < 0) throw PythonError();
  return r == 1;
}

// The items of a list, tuple or other iterable, as new references.
std::vector<PyRef> items_of(PyObject* seq) {
  PyRef it = checked(PyObject_GetIter(seq));
  std::vector<PyRef> out;
  while (PyObject* item = PyIter_Next(it.get())) out.push_back(PyRef::steal(item));
  if (PyErr_Occurred()) throw PythonError();
  return out;
}

// One GraphModule being read. fx nodes stay alive with `gm`, so their
// addresses key the map; a get_attr of a non-tensor maps to a constant Arg.
struct FxReader {
  PyRef gm, torch, node_type, tensor_type;
  PyRef device;  // null, or the device of values whose examples are on "meta"
  FxImport out{std::make_shared<Graph>(), {}};
  std::unordered_map<PyObject*, Arg> values;
  // Per storage's root tensor among the graph's values (held): the example standing for it.
  mutable std::vector<std::pair<PyRef, PyRef>> roots;
};

std::vector<int64_t> static_ints(PyObject* seq, const std::string& what) {
  std::vector<int64_t> out;
  for (const PyRef& item : items_of(seq)) {
    // NOTE: a SymInt is no PyLong: symbolic shapes are left to gm.forward.
    if (!PyLong_Check(item.get()))
      TL_THROW(Unsupported) << "fx graph: " << what << " has a symbolic or non-int size";
    long long v = PyLong_AsLongLong(item.get());
    if (v == -1 && PyErr_Occurred()) throw PythonError();
    out.push_back(v);
  }
  return out;
}

// TensorMeta of a FakeTensor (or a real get_attr tensor); nullopt for other
// values. Symbolic values and non-strided layouts are Unsupported.
std::optional<TensorMeta> meta_of(const FxReader& r, PyObject* v, const std::string& what) {
  for (const char* sym : {"SymInt", "SymFloat", "SymBool"})
    if (is_instance(v, attr(r.torch.get(), sym).get()))
      TL_THROW(Unsupported) << "fx graph: " << what << " is a " << sym;
  if (!is_instance(v, r.tensor_type.get())) return std::nullopt;
  if (attr(v, "layout").get() != attr(r.torch.get(), "strided").get())
    TL_THROW(Unsupported) << "fx graph: " << what << " is not a strided tensor";
  TensorMeta m;
  m.sizes = static_ints(attr(v, "shape").get(), what);
  m.strides = static_ints(checked(PyObject_CallMethod(v, "stride", nullptr)).get(), what);
  m.dtype = attr(v, "dtype");
  PyRef device = attr(v, "device");
  if (r.device && str_attr(device.get(), "type") == "meta") device = r.device;
  m.device = device;
  PyRef grad = attr(v, "requires_grad");
  m.requires_grad = PyObject_IsTrue(grad.get()) == 1;
  return m;
}

// The trace-time example of a tensor value: a meta tensor of its shape,
// strides and dtype, as torchlite's own capture records. NOTE: Dynamo's
// FakeTensors belong to Dynamo's fake mode; passes that run ops on examples
// under a mode of their own (channels_last) cannot mix them in.
PyRef fresh_example(const FxReader& r, PyObject* v) {
  PyRef args = checked(PyTuple_Pack(2, attr(v, "shape").get(),
                                    checked(PyObject_CallMethod(v, "stride", nullptr)).get()));
  PyRef kwargs = checked(PyDict_New());
  PyRef meta = checked(PyUnicode_FromString("meta"));
  if (PyDict_SetItemString(kwargs.get(), "dtype", attr(v, "dtype").get()) < 0 ||
      PyDict_SetItemString(kwargs.get(), "device", meta.get()) < 0)
    throw PythonError();
  return checked(
      PyObject_Call(attr(r.torch.get(), "empty_strided").get(), args.get(), kwargs.get()));
}

// NOTE: values that share memory at trace time (a slice, split's pieces, a transpose of a
// value of the graph) share it in the examples too: a view's example is a view of its root's,
// at the same offset, as torchlite's own capture records them. passes/alias.h reads that (a
// slice of a computed value lowers as a remap); fresh tensors for every value made every view
// in a training graph an extern call. Only roots that are values of this graph count: a view
// of a temporary no node holds (F.linear's 3-d result views its 2-d product) is a fresh value
// here, as compile_graph's "views are never kernel outputs" needs.
PyRef example_tensor(const FxReader& r, PyObject* v) {
  PyRef base = PyRef::steal(PyObject_GetAttrString(v, "_base"));
  if (!base) {
    PyErr_Clear();
    return fresh_example(r, v);
  }
  PyObject* root = base.get() == Py_None ? v : base.get();
  for (auto& [key, ex] : r.roots) {
    if (key.get() != root) continue;
    if (root == v) return ex;  // the op returned its input itself
    PyRef args = checked(PyTuple_Pack(
        3, attr(v, "shape").get(), checked(PyObject_CallMethod(v, "stride", nullptr)).get(),
        checked(PyObject_CallMethod(v, "storage_offset", nullptr)).get()));
    return checked(PyObject_Call(attr(ex.get(), "as_strided").get(), args.get(), nullptr));
  }
  PyRef ex = fresh_example(r, v);
  PyRef offset = checked(PyObject_CallMethod(v, "storage_offset", nullptr));
  if (root == v && PyLong_AsLongLong(offset.get()) == 0) r.roots.emplace_back(PyRef::borrow(v), ex);
  return ex;
}

void set_example(const FxReader& r, Node* node, PyObject* example, const std::string& what) {
  node->meta = meta_of(r, example, what);
  node->example = node->meta ? example_tensor(r, example) : PyRef::borrow(example);
}

bool holds_node(const FxReader& r, PyObject* v) {
  if (is_instance(v, r.node_type.get())) return true;
  if (PySlice_Check(v)) {
    for (const char* part : {"start", "stop", "step"})
      if (holds_node(r, attr(v, part).get())) return true;
    return false;
  }
  if (PyTuple_Check(v) || PyList_Check(v)) {
    for (const PyRef& item : items_of(v))
      if (holds_node(r, item.get())) return true;
  }
  if (PyDict_Check(v)) {
    PyObject *k, *item;
    Py_ssize_t pos = 0;
    while (PyDict_Next(v, &pos, &k, &item))
      if (holds_node(r, k) || holds_node(r, item)) return true;
  }
  return false;
}

Arg to_arg(const FxReader& r, PyObject* v) {
  if (is_instance(v, r.node_type.get())) {
    auto it = r.values.find(v);
    if (it == r.values.end())
      TL_THROW(Unsupported) << "fx graph: node " << str_of(v) << " is used before it is defined";
    return it->second;
  }
  // NOTE: exact tuples only: a namedtuple or torch.Size rebuilt as a plain
  // tuple would change the type the op sees.
  if (PyTuple_CheckExact(v) || PyList_Check(v)) {
    std::vector<Arg> items;
    for (const PyRef& item : items_of(v)) items.push_back(to_arg(r, item.get()));
    return PyTuple_Check(v) ? Arg::tuple(std::move(items)) : Arg::list(std::move(items));
  }
  if (PyDict_Check(v)) {
    std::vector<PyRef> keys;
    std::vector<Arg> items;
    PyObject *k, *item;
    Py_ssize_t pos = 0;
    while (PyDict_Next(v, &pos, &k, &item)) {
      if (holds_node(r, k)) TL_THROW(Unsupported) << "fx graph: a dict key is a graph value";
      keys.push_back(PyRef::borrow(k));
      items.push_back(to_arg(r, item));
    }
    return Arg::dict(std::move(keys), std::move(items));
  }
  if (holds_node(r, v))
    TL_THROW(Unsupported) << "fx graph: a " << Py_TYPE(v)->tp_name
                          << " argument holds graph values";
  return Arg::constant(PyRef::borrow(v));
}

std::pair<std::vector<Arg>, std::vector<std::pair<std::string, Arg>>> call_args(const FxReader& r,
                                                                                PyObject* fx_node) {
  std::vector<Arg> args;
  for (const PyRef& a : items_of(attr(fx_node, "args").get())) args.push_back(to_arg(r, a.get()));
  std::vector<std::pair<std::string, Arg>> kwargs;
  PyRef kw = attr(fx_node, "kwargs");
  if (!PyDict_Check(kw.get())) TL_THROW(Unsupported) << "fx graph: node kwargs are not a dict";
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(kw.get(), &pos, &k, &v)) kwargs.emplace_back(utf8(k), to_arg(r, v));
  return {std::move(args), std::move(kwargs)};
}

PyRef example_of(PyObject* fx_node) {
  PyRef meta = attr(fx_node, "meta");
  // Dynamo writes "example_value"; AOT/export graphs write "val".
  for (const char* key : {"example_value", "val"}) {
    PyRef k = checked(PyUnicode_FromString(key));
    PyObject* v = PyDict_Check(meta.get()) ? PyDict_GetItemWithError(meta.get(), k.get()) : nullptr;
    if (v) return PyRef::borrow(v);
    if (PyErr_Occurred()) throw PythonError();
  }
  return PyRef::borrow(Py_None);
}

void flatten_output(const FxReader& r, PyObject* v, std::vector<Arg>& out) {
  if (PyTuple_CheckExact(v) || PyList_Check(v)) {
    for (const PyRef& item : items_of(v)) flatten_output(r, item.get(), out);
    return;
  }
  if (PyDict_Check(v)) TL_THROW(Unsupported) << "fx graph: the output holds a dict";
  out.push_back(to_arg(r, v));
}

PyRef get_attr(const FxReader& r, const std::string& target) {
  PyRef v = r.gm;
  size_t start = 0;
  while (true) {
    size_t dot = target.find('.', start);
    v = attr(v.get(), target.substr(start, dot - start).c_str());
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// Every node but the placeholders, which are read first.
void read_node(FxReader& r, PyObject* n, const std::string& op, const std::string& name) {
  Graph& graph = *r.out.graph;
  PyRef target = attr(n, "target");
  PyRef example = example_of(n);
  Node* node = nullptr;
  if (op == "get_attr") {
    std::string path = utf8(target.get());
    PyRef v = get_attr(r, path);
    if (!is_instance(v.get(), r.tensor_type.get())) {
      r.values[n] = Arg::constant(v);
      return;
    }
    // A tensor attribute is one more graph input, so kernels can read it.
    node = graph.add_placeholder(name, Source::held(v, "get_attr " + path));
    r.out.extra_inputs.push_back(v);
    example = v;
  } else if (op == "output") {
    std::vector<Arg> outs;
    PyRef args = attr(n, "args");
    if (PyTuple_Check(args.get()) && PyTuple_GET_SIZE(args.get()) > 0)
      flatten_output(r, PyTuple_GET_ITEM(args.get(), 0), outs);
    graph.set_output(std::move(outs));
    return;
  } else {
    auto [args, kwargs] = call_args(r, n);
    if (op == "call_method") {
      node = graph.add_call_method(utf8(target.get()), std::move(args), std::move(kwargs));
    } else if (op == "call_module") {
      PyRef mod = checked(PyObject_CallMethod(r.gm.get(), "get_submodule", "O", target.get()));
      node = graph.add_call_function(mod, std::move(args), std::move(kwargs));
      node->target_name = "self." + utf8(target.get());  // extern: no rule has this name
    } else if (op == "call_function") {
      node = graph.add_call_function(target, std::move(args), std::move(kwargs));
    } else {
      TL_THROW(Unsupported) << "fx graph: node " << name << " has op " << op;
    }
  }
  set_example(r, node, example.get(), "node " + name);
  r.values[n] = Arg::of_node(node);
}

}  // namespace

FxImport graph_from_fx(PyObject* gm, PyObject* device) {
  FxReader r;
  r.gm = PyRef::borrow(gm);
  if (device && device != Py_None) r.device = PyRef::borrow(device);
  r.torch = checked(PyImport_ImportModule("torch"));
  r.tensor_type = attr(r.torch.get(), "Tensor");
  r.node_type = import_attr("torch.fx", "Node");
  std::vector<PyRef> fx_nodes = items_of(attr(attr(gm, "graph").get(), "nodes").get());
  int index = 0;
  for (const PyRef& n : fx_nodes) {
    if (str_attr(n.get(), "op") != "placeholder") continue;
    std::string name = str_attr(n.get(), "name");
    Node* node = r.out.graph->add_placeholder(name, Source::local(index++, name));
    set_example(r, node, example_of(n.get()).get(), "input " + name);
    r.values[n.get()] = Arg::of_node(node);
  }
  for (const PyRef& n : fx_nodes) {
    std::string op = str_attr(n.get(), "op");
    if (op != "placeholder") read_node(r, n.get(), op, str_attr(n.get(), "name"));
  }
  if (!r.out.graph->output()) TL_THROW(Unsupported) << "fx graph: no output node";
  r.out.graph->lint();
  return std::move(r.out);
}

}  // namespace tl::ir
