#include "runtime/graph_runner.h"

#include <unordered_map>

#include "core/errors.h"

namespace tl::runtime {

namespace {
// An argument resolved for execution: a value slot, a constant, or a nested
// tuple/list/dict built per call.
struct ArgPlan {
  int slot = -1;   // >= 0: the value of an earlier node
  PyRef constant;  // slot < 0 and no items: this constant
  ir::Arg::Kind kind = ir::Arg::Kind::Const;
  std::vector<ArgPlan> items;
  std::vector<PyRef> keys;
};

ArgPlan plan_arg(const ir::Arg& a, const std::unordered_map<const ir::Node*, int>& slots) {
  ArgPlan p;
  p.kind = a.kind;
  switch (a.kind) {
    case ir::Arg::Kind::Node: p.slot = slots.at(a.node); break;
    case ir::Arg::Kind::Const: p.constant = a.value; break;
    default:
      for (auto& it : a.items) p.items.push_back(plan_arg(it, slots));
      p.keys = a.keys;
  }
  return p;
}

// Returns a new reference.
PyObject* materialize(const ArgPlan& p, const std::vector<PyRef>& values) {
  switch (p.kind) {
    case ir::Arg::Kind::Node: {
      PyObject* v = values[p.slot].get();
      Py_XINCREF(v);
      return v;
    }
    case ir::Arg::Kind::Const: return Py_NewRef(p.constant.get());
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
        if (tuple) PyTuple_SET_ITEM(out, i, item);
        else PyList_SET_ITEM(out, i, item);
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

struct GraphRunner::Step {
  const ir::Node* node = nullptr;
  PyRef callable;  // call_function
  PyRef method;    // call_method: interned name
  std::vector<ArgPlan> args;  // positional then keyword values
  size_t nargs = 0;           // positional count
  PyRef kwnames;              // tuple or null
  int out_slot = -1;
  std::vector<int> release_after;  // slots whose last use is this step
};

GraphRunner::GraphRunner(std::shared_ptr<const ir::Graph> graph) : graph_(std::move(graph)) {
  std::unordered_map<const ir::Node*, int> slots;
  for (auto& n : graph_->nodes()) {
    if (n->op == ir::OpKind::Placeholder) slots[n.get()] = static_cast<int>(n_inputs_++);
  }
  n_values_ = n_inputs_;
  std::unordered_map<int, int> last_use;  // slot -> step index
  auto note_uses = [&](const ArgPlan& p, int step, auto&& self) -> void {
    if (p.slot >= 0) last_use[p.slot] = step;
    for (auto& it : p.items) self(it, step, self);
  };
  for (auto& n : graph_->nodes()) {
    if (n->op != ir::OpKind::CallFunction && n->op != ir::OpKind::CallMethod) continue;
    Step s;
    s.node = n.get();
    if (n->op == ir::OpKind::CallFunction) {
      s.callable = n->target;
    } else {
      s.method = PyRef::steal(PyUnicode_InternFromString(n->target_name.c_str()));
    }
    for (auto& a : n->args) s.args.push_back(plan_arg(a, slots));
    s.nargs = s.args.size();
    if (!n->kwargs.empty()) {
      s.kwnames = PyRef::steal(PyTuple_New(n->kwargs.size()));
      for (size_t i = 0; i < n->kwargs.size(); ++i) {
        PyTuple_SET_ITEM(s.kwnames.get(), i, PyUnicode_InternFromString(n->kwargs[i].first.c_str()));
        s.args.push_back(plan_arg(n->kwargs[i].second, slots));
      }
    }
    if (n->target_name == "torch._C._set_grad_enabled") changes_grad_mode_ = true;
    s.out_slot = static_cast<int>(n_values_++);
    slots[n.get()] = s.out_slot;
    int idx = static_cast<int>(steps_.size());
    for (auto& a : s.args) note_uses(a, idx, note_uses);
    steps_.push_back(std::move(s));
  }
  TL_CHECK(graph_->output()) << "graph without output";
  for (auto& a : graph_->output()->args) {
    if (a.kind == ir::Arg::Kind::Node) {
      int slot = slots.at(a.node);
      output_slots_.push_back(slot);
      last_use[slot] = static_cast<int>(steps_.size());  // kept to the end
    } else {
      output_slots_.push_back(-1);
      output_consts_.push_back(a.value);
    }
  }
  for (auto& [slot, step] : last_use)
    if (step < static_cast<int>(steps_.size()) && slot >= static_cast<int>(n_inputs_))
      steps_[step].release_after.push_back(slot);
  // Values never used are released right after they are produced.
  for (auto& s : steps_)
    if (!last_use.count(s.out_slot)) s.release_after.push_back(s.out_slot);
}

GraphRunner::~GraphRunner() = default;

std::vector<PyRef> GraphRunner::run(PyObject* const* inputs, size_t n_inputs) {
  TL_CHECK(n_inputs == n_inputs_) << "graph expects " << n_inputs_ << " inputs, got " << n_inputs;
  failed_node_ = nullptr;
  std::vector<PyRef> values(n_values_);
  for (size_t i = 0; i < n_inputs; ++i) values[i] = PyRef::borrow(inputs[i]);
  int grad_before = -1;
  if (changes_grad_mode_) grad_before = PyObject_IsTrue(PyRef::steal(PyObject_CallMethod(
      PyRef::steal(PyImport_ImportModule("torch")).get(), "is_grad_enabled", nullptr)).get());

  constexpr size_t kInline = 12;
  for (auto& s : steps_) {
    size_t total = s.args.size() + 1;
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
    for (size_t i = 0; i < s.args.size(); ++i, ++made) {
      PyObject* a = materialize(s.args[i], values);
      if (!a) {
        ok = false;
        break;
      }
      argv[1 + i] = a;
    }
    PyObject* result = nullptr;
    if (ok) {
      size_t nkw = s.kwnames ? PyTuple_GET_SIZE(s.kwnames.get()) : 0;
      size_t npos = s.args.size() - nkw;
      if (s.method) {
        result = PyObject_VectorcallMethod(s.method.get(), argv + 1,
                                           npos | PY_VECTORCALL_ARGUMENTS_OFFSET, s.kwnames.get());
      } else {
        result = PyObject_Vectorcall(s.callable.get(), argv + 1,
                                     npos | PY_VECTORCALL_ARGUMENTS_OFFSET, s.kwnames.get());
      }
    }
    for (size_t i = 0; i < made; ++i) Py_DECREF(argv[1 + i]);
    if (!result) {
      failed_node_ = s.node;
      if (grad_before >= 0) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
        PyRef r = torch ? PyRef::steal(PyObject_CallMethod(torch.get(), "set_grad_enabled", "O",
                                                           grad_before ? Py_True : Py_False))
                        : PyRef();
        PyErr_Clear();
        PyErr_Restore(t, v, tb);
      }
      throw PythonError();
    }
    values[s.out_slot] = PyRef::steal(result);
    for (int slot : s.release_after) values[slot] = PyRef();
  }
  std::vector<PyRef> out;
  out.reserve(output_slots_.size());
  size_t c = 0;
  for (int slot : output_slots_) out.push_back(slot >= 0 ? values[slot] : output_consts_[c++]);
  return out;
}

}  // namespace tl::runtime
