#include "runtime/node_call.h"

#include "core/errors.h"
#include "core/py_import.h"

namespace tl::runtime {

namespace {
ArgPlan plan_arg(const ir::Arg& a, const SlotMap& slots) {
  ArgPlan p;
  p.kind = a.kind;
  switch (a.kind) {
    case ir::Arg::Kind::Node:
      p.slot = slots.at(a.node);
      break;
    case ir::Arg::Kind::Const:
      p.constant = a.value;
      break;
    default:
      for (auto& it : a.items) p.items.push_back(plan_arg(it, slots));
      p.keys = a.keys;
  }
  return p;
}

void collect_slots(const ArgPlan& p, std::vector<int>& out) {
  if (p.slot >= 0) out.push_back(p.slot);
  for (auto& it : p.items) collect_slots(it, out);
}

// Returns a new reference.
PyObject* materialize(const ArgPlan& p, const std::vector<PyRef>& values) {
  switch (p.kind) {
    case ir::Arg::Kind::Node: {
      PyObject* v = values[p.slot].get();
      Py_XINCREF(v);
      return v;
    }
    case ir::Arg::Kind::Const:
      return Py_NewRef(p.constant.get());
    case ir::Arg::Kind::Tuple:
    case ir::Arg::Kind::List: {
      bool tuple = p.kind == ir::Arg::Kind::Tuple;
      PyObject* out = tuple ? PyTuple_New(p.items.size()) : PyList_New(p.items.size());
      if (!out) return nullptr;
      for (size_t i = 0; i < p.items.size(); ++i) {
        PyObject* item = materialize(p.items[i], values);
        if (!item) {
          Py_DECREF(out);
          return nullptr;
        }
        if (tuple)
          PyTuple_SET_ITEM(out, i, item);
        else
          PyList_SET_ITEM(out, i, item);
      }
      return out;
    }
    case ir::Arg::Kind::Dict: {
      PyObject* out = PyDict_New();
      for (size_t i = 0; out && i < p.items.size(); ++i) {
        PyRef item = PyRef::steal(materialize(p.items[i], values));
        if (!item || PyDict_SetItem(out, p.keys[i].get(), item.get()) < 0) {
          Py_DECREF(out);
          return nullptr;
        }
      }
      return out;
    }
  }
  return nullptr;
}
}  // namespace

NodeCall::NodeCall(const ir::Node& n, const SlotMap& slots) : node_(&n) {
  if (n.op == ir::OpKind::CallFunction) {
    callable_ = n.target;
  } else {
    method_ = PyRef::steal(PyUnicode_InternFromString(n.target_name.c_str()));
  }
  for (auto& a : n.args) args_.push_back(plan_arg(a, slots));
  if (!n.kwargs.empty()) {
    kwnames_ = PyRef::steal(PyTuple_New(n.kwargs.size()));
    for (size_t i = 0; i < n.kwargs.size(); ++i) {
      PyTuple_SET_ITEM(kwnames_.get(), i, PyUnicode_InternFromString(n.kwargs[i].first.c_str()));
      args_.push_back(plan_arg(n.kwargs[i].second, slots));
    }
  }
  for (auto& a : args_) collect_slots(a, used_);
}

NodeCall NodeCall::as_strided(const ir::Node& node, int slot, const std::vector<int64_t>& sizes,
                              const std::vector<int64_t>& strides, int64_t offset) {
  NodeCall c;
  c.node_ = &node;
  c.callable_ = import_attr("torch", "as_strided");
  auto ints = [](const std::vector<int64_t>& v) {
    PyRef t = PyRef::steal(PyTuple_New(v.size()));
    for (size_t i = 0; t && i < v.size(); ++i) {
      PyObject* item = PyLong_FromLongLong(v[i]);
      if (!item) throw PythonError();
      PyTuple_SET_ITEM(t.get(), i, item);
    }
    if (!t) throw PythonError();
    return t;
  };
  ArgPlan input;
  input.kind = ir::Arg::Kind::Node;
  input.slot = slot;
  c.args_.push_back(std::move(input));
  for (PyRef v : {ints(sizes), ints(strides), PyRef::steal(PyLong_FromLongLong(offset))}) {
    if (!v) throw PythonError();
    ArgPlan a;
    a.constant = std::move(v);
    c.args_.push_back(std::move(a));
  }
  c.used_ = {slot};
  return c;
}

bool NodeCall::changes_grad_mode() const {
  return node_->target_name == "torch._C._set_grad_enabled";
}

PyObject* NodeCall::call(const std::vector<PyRef>& values) const {
  constexpr size_t kInline = 12;
  size_t total = args_.size() + 1;
  PyObject* inline_buf[kInline];
  std::vector<PyObject*> heap_buf;
  PyObject** argv = inline_buf;
  if (total > kInline) {
    heap_buf.resize(total);
    argv = heap_buf.data();
  }
  // argv[0] is scratch so PY_VECTORCALL_ARGUMENTS_OFFSET can be used.
  size_t made = 0;
  bool ok = true;
  for (size_t i = 0; i < args_.size(); ++i, ++made) {
    PyObject* a = materialize(args_[i], values);
    if (!a) {
      ok = false;
      break;
    }
    argv[1 + i] = a;
  }
  PyObject* result = nullptr;
  if (ok) {
    size_t nkw = kwnames_ ? PyTuple_GET_SIZE(kwnames_.get()) : 0;
    size_t npos = args_.size() - nkw;
    if (method_) {
      result = PyObject_VectorcallMethod(method_.get(), argv + 1,
                                         npos | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames_.get());
    } else {
      result = PyObject_Vectorcall(callable_.get(), argv + 1, npos | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                   kwnames_.get());
    }
  }
  for (size_t i = 0; i < made; ++i) Py_DECREF(argv[1 + i]);
  return result;
}

int grad_enabled() {
  PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
  PyRef r =
      torch ? PyRef::steal(PyObject_CallMethod(torch.get(), "is_grad_enabled", nullptr)) : PyRef();
  int v = r ? PyObject_IsTrue(r.get()) : -1;
  if (v < 0) PyErr_Clear();
  return v;
}

void restore_grad_mode(int before) {
  if (before < 0) return;
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
  PyRef r = torch ? PyRef::steal(PyObject_CallMethod(torch.get(), "set_grad_enabled", "O",
                                                     before ? Py_True : Py_False))
                  : PyRef();
  PyErr_Clear();
  PyErr_Restore(t, v, tb);
}

}  // namespace tl::runtime
