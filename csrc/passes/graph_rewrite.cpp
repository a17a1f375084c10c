#include "passes/graph_rewrite.h"

#include <algorithm>
#include <atomic>

#include "core/errors.h"

namespace tl::passes {
namespace {

// Grad mode off for meta runs: in-place ops on leaves that require grad would
// raise, and the metadata passes need does not depend on it.
class NoGrad {
 public:
  NoGrad() {
    PyRef is_on = PyRef::steal(PyObject_CallNoArgs(torch_fn("is_grad_enabled").get()));
    if (!is_on) throw PythonError();
    was_on_ = is_on.get() == Py_True;
    if (was_on_) set(false);
  }
  ~NoGrad() {
    if (!was_on_) return;
    PyObject *t, *v, *tb;  // NOTE: keep an error a failed meta run may have set
    PyErr_Fetch(&t, &v, &tb);
    set(true);
    PyErr_Restore(t, v, tb);
  }

 private:
  static void set(bool on) {
    PyRef c = torch_fn("_C");
    PyRef r = PyRef::steal(
        PyObject_CallMethod(c.get(), "_set_grad_enabled", "O", on ? Py_True : Py_False));
    if (!r) PyErr_Clear();
  }
  bool was_on_ = false;
};

void replace_in(ir::Arg& a, const ir::Node* from, ir::Node* to) {
  if (a.kind == ir::Arg::Kind::Node && a.node == from) a.node = to;
  for (auto& item : a.items) replace_in(item, from, to);
}

// Returns a new reference; null with a Python error set.
PyObject* example_of(const ir::Arg& a, const Examples& overrides, bool device_kwarg) {
  switch (a.kind) {
    case ir::Arg::Kind::Node: {
      auto it = overrides.find(a.node);
      PyObject* v = it != overrides.end() ? it->second.get() : a.node->example.get();
      if (!v) PyErr_Format(PyExc_ValueError, "%%%s has no example value", a.node->name.c_str());
      return Py_XNewRef(v);
    }
    case ir::Arg::Kind::Const:
      if (device_kwarg && a.value.get() != Py_None)
        return PyObject_CallFunction(torch_fn("device").get(), "s", "meta");
      return Py_NewRef(a.value.get());
    case ir::Arg::Kind::Tuple:
    case ir::Arg::Kind::List: {
      bool tuple = a.kind == ir::Arg::Kind::Tuple;
      PyRef out = PyRef::steal(tuple ? PyTuple_New(a.items.size()) : PyList_New(a.items.size()));
      for (size_t i = 0; out && i < a.items.size(); ++i) {
        PyObject* item = example_of(a.items[i], overrides, false);
        if (!item) return nullptr;
        if (tuple)
          PyTuple_SET_ITEM(out.get(), i, item);
        else
          PyList_SET_ITEM(out.get(), i, item);
      }
      return out.release();
    }
    case ir::Arg::Kind::Dict: {
      PyRef d = PyRef::steal(PyDict_New());
      for (size_t i = 0; d && i < a.items.size(); ++i) {
        PyRef v = PyRef::steal(example_of(a.items[i], overrides, false));
        if (!v || PyDict_SetItem(d.get(), a.keys[i].get(), v.get()) < 0) return nullptr;
      }
      return d.release();
    }
  }
  return nullptr;
}

PyRef run_call(const ir::Node& n, const Examples& overrides);

std::atomic<MetaCallFn> g_meta_call{nullptr};

// run_call through g_meta_call when set.
PyRef meta_result(const ir::Node& n) {
  MetaCallFn fn = g_meta_call.load();
  if (!fn) return run_call(n, {});
  const bool method = n.op == ir::OpKind::CallMethod;
  const size_t first = method ? 1 : 0;
  if (n.args.size() < first) return {};
  PyRef self;
  if (method) {
    self = PyRef::steal(example_of(n.args[0], {}, false));
    if (!self) return {};
  }
  PyRef pos = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(n.args.size() - first)));
  if (!pos) return {};
  for (size_t i = first; i < n.args.size(); ++i) {
    PyObject* v = example_of(n.args[i], {}, false);
    if (!v) return {};
    PyTuple_SET_ITEM(pos.get(), static_cast<Py_ssize_t>(i - first), v);
  }
  PyRef kw;
  if (!n.kwargs.empty()) {
    kw = PyRef::steal(PyDict_New());
    if (!kw) return {};
    for (const auto& [k, a] : n.kwargs) {
      PyRef v = PyRef::steal(example_of(a, {}, k == "device"));
      if (!v || PyDict_SetItemString(kw.get(), k.c_str(), v.get()) < 0) return {};
    }
  }
  NoGrad no_grad;
  return fn(method ? nullptr : n.target.get(), method ? n.target_name : std::string(), self.get(),
            pos.get(), kw.get());
}
PyRef run_call(const ir::Node& n, const Examples& overrides) {
  size_t first = n.op == ir::OpKind::CallMethod ? 1 : 0;
  if (n.args.size() < first) return {};
  PyRef fn;
  if (first) {
    PyRef self = PyRef::steal(example_of(n.args[0], overrides, false));
    if (!self) return {};
    fn = PyRef::steal(PyObject_GetAttrString(self.get(), n.target_name.c_str()));
  } else {
    fn = n.target;
  }
  PyRef pos = PyRef::steal(PyTuple_New(n.args.size() - first));
  if (!fn || !pos) return {};
  for (size_t i = first; i < n.args.size(); ++i) {
    PyObject* v = example_of(n.args[i], overrides, false);
    if (!v) return {};
    PyTuple_SET_ITEM(pos.get(), i - first, v);
  }
  PyRef kw = PyRef::steal(PyDict_New());
  if (!kw) return {};
  for (const auto& [k, a] : n.kwargs) {
    PyRef v = PyRef::steal(example_of(a, overrides, k == "device"));
    if (!v || PyDict_SetItemString(kw.get(), k.c_str(), v.get()) < 0) return {};
  }
  NoGrad no_grad;
  return PyRef::steal(PyObject_Call(fn.get(), pos.get(), n.kwargs.empty() ? nullptr : kw.get()));
}

std::vector<int64_t> int_seq(PyObject* seq) {
  std::vector<int64_t> out;
  PyRef fast = PyRef::steal(PySequence_Fast(seq, "expected a sequence"));
  if (!fast) throw PythonError();
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.get()); ++i) {
    out.push_back(PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast.get(), i)));
    if (PyErr_Occurred()) throw PythonError();
  }
  return out;
}

}  // namespace

PyRef torch_fn(const char* name) {
  static PyObject* torch = PyImport_ImportModule("torch");  // NOTE: kept for the process
  if (!torch) throw PythonError();
  PyRef fn = PyRef::steal(PyObject_GetAttrString(torch, name));
  if (!fn) throw PythonError();
  return fn;
}

std::string device_type(PyObject* device) {
  PyRef type = device ? PyRef::steal(PyObject_GetAttrString(device, "type")) : PyRef();
  const char* s = type ? PyUnicode_AsUTF8(type.get()) : nullptr;
  if (!s) {
    PyErr_Clear();
    return "";
  }
  return s;
}

ir::Arg* find_arg(ir::Node& n, size_t pos, const char* name) {
  if (pos < n.args.size()) return &n.args[pos];
  for (auto& [k, v] : n.kwargs)
    if (name && k == name) return &v;
  return nullptr;
}

const ir::Arg* find_arg(const ir::Node& n, size_t pos, const char* name) {
  return find_arg(const_cast<ir::Node&>(n), pos, name);
}

const ir::Node* tensor_arg(const ir::Node& n, size_t pos, const char* name) {
  const ir::Arg* a = find_arg(n, pos, name);
  return a && a->kind == ir::Arg::Kind::Node && a->node->meta ? a->node : nullptr;
}

bool number_arg(const ir::Node& n, size_t pos, const char* name, double* out) {
  const ir::Arg* a = find_arg(n, pos, name);
  if (!a || a->kind != ir::Arg::Kind::Const) return false;
  PyObject* v = a->value.get();
  if (!PyFloat_Check(v) && !PyLong_Check(v)) return false;  // bool is an int
  *out = PyFloat_AsDouble(v);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

std::vector<ir::Node*> readers_of(const ir::Graph& g, const ir::Node* n) {
  std::vector<ir::Node*> out;
  auto refers = [&](const ir::Arg& a, auto& self) -> bool {
    if (a.kind == ir::Arg::Kind::Node) return a.node == n;
    for (const ir::Arg& i : a.items)
      if (self(i, self)) return true;
    return false;
  };
  for (auto& u : g.nodes()) {
    bool uses = false;
    for (const ir::Arg& a : u->args) uses = uses || refers(a, refers);
    for (const auto& kv : u->kwargs) uses = uses || refers(kv.second, refers);
    if (uses) out.push_back(u.get());
  }
  return out;
}

void replace_uses(const std::vector<ir::Node*>& users, const ir::Node* from, ir::Node* to) {
  for (ir::Node* u : users) {
    for (auto& a : u->args) replace_in(a, from, to);
    for (auto& kw : u->kwargs) replace_in(kw.second, from, to);
  }
}

void set_meta_call(MetaCallFn fn) { g_meta_call.store(fn); }

PyRef run_on_examples(const ir::Node& n, const Examples& overrides) {
  if (n.op != ir::OpKind::CallFunction && n.op != ir::OpKind::CallMethod) return {};
  PyRef r = run_call(n, overrides);
  if (!r) PyErr_Clear();
  return r;
}

std::vector<int64_t> strides_of(PyObject* t) {
  PyRef s = PyRef::steal(PyObject_CallMethod(t, "stride", nullptr));
  if (!s || !PyTuple_Check(s.get())) {
    PyErr_Clear();
    return {};
  }
  return int_seq(s.get());
}

ir::TensorMeta meta_of(PyObject* t, const PyRef& device, bool requires_grad) {
  ir::TensorMeta m;
  PyRef shape = PyRef::steal(PyObject_GetAttrString(t, "shape"));
  if (!shape) throw PythonError();
  m.sizes = int_seq(shape.get());
  m.strides = strides_of(t);
  m.dtype = PyRef::steal(PyObject_GetAttrString(t, "dtype"));
  if (!m.dtype) throw PythonError();
  m.device = device;
  m.requires_grad = requires_grad;
  return m;
}

ir::Node* insert_call(ir::Graph& g, const ir::Node* pos, PyRef target, const std::string& method,
                      std::vector<ir::Arg> args,
                      std::vector<std::pair<std::string, ir::Arg>> kwargs, const PyRef& device) {
  ir::Node* n = method.empty()
                    ? g.add_call_function(std::move(target), std::move(args), std::move(kwargs))
                    : g.add_call_method(method, std::move(args), std::move(kwargs));
  g.move_before(n, pos);
  n->location = pos->location;
  PyRef ex = meta_result(*n);
  if (!ex) {
    std::string err = "?";
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyRef msg = PyRef::steal(v ? PyObject_Str(v) : nullptr);
    if (msg && PyUnicode_AsUTF8(msg.get())) err = PyUnicode_AsUTF8(msg.get());
    Py_XDECREF(t), Py_XDECREF(v), Py_XDECREF(tb);
    PyErr_Clear();
    TL_CHECK(false) << "a rewrite built %" << n->name << ", which raises on meta tensors: " << err
                    << "\n"
                    << g.str();
  }
  n->meta = meta_of(ex.get(), device, false);
  n->example = std::move(ex);
  return n;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size());
  int64_t step = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = step;
    step *= std::max<int64_t>(sizes[i], 1);
  }
  return st;
}

std::vector<int64_t> channels_last_strides(const std::vector<int64_t>& sizes) {
  TL_CHECK(sizes.size() == 4) << "channels_last strides of a " << sizes.size() << "-d shape";
  auto m = [&](int d) { return std::max<int64_t>(sizes[d], 1); };
  return {m(1) * m(2) * m(3), 1, m(1) * m(3), m(1)};
}

}  // namespace tl::passes
