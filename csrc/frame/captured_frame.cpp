#include "frame/captured_frame.h"

#include "capture/data_dependent_assert.h"
#include "capture/effect_order.h"
#include "capture/index_bounds.h"
#include "core/errors.h"
#include "core/python_helpers.h"
#include "frame/frame_access.h"
#include "guards/fetch.h"
#include "ir/effects.h"

namespace tl::frame {
namespace {
int line_of(const std::string& location) {
  auto colon = location.rfind(':');
  return colon == std::string::npos ? -1 : std::atoi(location.c_str() + colon + 1);
}

// torchlite's own InternalError or Unsupported (module _C) is pending: from a kernel, a bug
// to show, not one to hide behind an eager run.
bool torchlite_error_pending() {
  PyObject* t = PyErr_Occurred();  // borrowed
  return t && PyType_Check(t) &&
         std::string(reinterpret_cast<PyTypeObject*>(t)->tp_name).rfind("torchlite.", 0) == 0;
}

// True when `failed` (a node of the graph as compiled, maybe a rewritten copy of `graph`) can
// have raised before anything visible ran: no node of `graph` has a visible effect, except
// the failing op itself (an in-place op checks its operands before it writes).
bool failed_before_any_effect(const ir::Graph& graph, const ir::Node* failed) {
  if (!failed) return false;
  int effects = 0;
  bool failed_is_it = false;
  for (const auto& n : graph.nodes()) {
    if (!ir::visible_effect(*n)) continue;
    ++effects;
    failed_is_it = n->target_name == failed->target_name && n->location == failed->location &&
                   n->target_name.find("rand") == std::string::npos;
  }
  return effects == 0 || (effects == 1 && failed_is_it);
}
// The CUDA devices of `graph`'s random draws (a tuple of torch.device; the CPU generator is
// always saved) when an op that checks its operands' values follows an undoable effect
// (ir::undoable_effect), else null.
PyRef rerun_devices(const ir::Graph& graph) {
  bool undoable = false, checks = false;
  PyRef devices = PyRef::steal(PyList_New(0));
  if (!devices) throw PythonError();
  for (const auto& n : graph.nodes()) {
    if (undoable && capture::checks_values(*n)) checks = true;
    if (!ir::undoable_effect(*n)) continue;
    undoable = true;
    if (!n->meta || !n->meta->device) continue;
    PyRef type = PyRef::steal(PyObject_GetAttrString(n->meta->device.get(), "type"));
    if (!type) throw PythonError();
    if (PyUnicode_CompareWithASCIIString(type.get(), "cuda") == 0 &&
        PyList_Append(devices.get(), n->meta->device.get()) < 0)
      throw PythonError();
  }
  if (!checks) return PyRef();
  return PyRef::steal(PyList_AsTuple(devices.get()));
}
}  // namespace

CapturedFrame::CapturedFrame(std::shared_ptr<const ir::Graph> graph, ir::Residual result,
                             std::vector<ir::SideEffect> side_effects, ir::MadeClosures closures,
                             std::unique_ptr<runtime::Executable> executable, std::string func_name,
                             std::string filename)
    : graph_(std::move(graph)),
      result_(std::move(result)),
      side_effects_(std::move(side_effects)),
      closures_(std::move(closures)),
      executable_(std::move(executable)),
      func_name_(std::move(func_name)),
      filename_(std::move(filename)) {
  for (ir::Node* p : graph_->placeholders()) {
    input_sources_.push_back(p->source);
    input_fetchers_.emplace_back(*p->source);
  }
  rerun_devices_ = rerun_devices(*graph_);
  for (const auto& n : graph_->nodes()) any_undoable_ = any_undoable_ || ir::undoable_effect(*n);
}

CapturedFrame::Made CapturedFrame::make_closures(const std::vector<PyRef>& outputs,
                                                 const ir::FrameView& frame) {
  Made m;
  if (closures_.empty()) return m;
  using K = ir::MadeClosures::CellRef::Kind;
  for (size_t i = 0; i < closures_.cells.size(); ++i) {
    m.cells.push_back(PyRef::steal(PyCell_New(nullptr)));
    if (!m.cells.back()) throw PythonError();
  }
  // NOTE: functions first, empty cells in their closures; then their defaults and the cells'
  // contents, which may name any function (a recursive local function is in its own cell).
  for (const ir::MadeClosures::Function& f : closures_.functions) {
    PyRef fn = PyRef::steal(PyFunction_New(f.code.get(), f.globals.get()));
    if (!fn) throw PythonError();
    if (!f.closure.empty()) {
      PyRef cells = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(f.closure.size())));
      if (!cells) throw PythonError();
      for (size_t i = 0; i < f.closure.size(); ++i) {
        const ir::MadeClosures::CellRef& c = f.closure[i];
        PyObject* cell = nullptr;
        PyRef fetched;
        if (c.kind == K::Made) {
          cell = m.cells.at(c.index).get();
        } else if (c.kind == K::FrameFree) {
          TL_CHECK(frame.closure && c.index < PyTuple_GET_SIZE(frame.closure))
              << "free variable " << c.index << " out of the frame's closure";
          cell = PyTuple_GET_ITEM(frame.closure, c.index);
        } else if (c.kind == K::Fetched) {
          fetched = guards::fetch(*c.source, frame);
          if (!fetched || !PyCell_Check(fetched.get()))
            TL_THROW(Runtime) << "torchlite: the cell " << c.source->str()
                              << " vanished while running";
          cell = fetched.get();
        } else {
          cell = c.object.get();
        }
        PyTuple_SET_ITEM(cells.get(), static_cast<Py_ssize_t>(i), Py_NewRef(cell));
      }
      if (PyFunction_SetClosure(fn.get(), cells.get()) < 0) throw PythonError();
    }
    m.functions.push_back(std::move(fn));
  }
  auto is_none = [](const ir::Residual& r) {
    return r.kind == ir::Residual::Kind::Const && r.value.get() == Py_None;
  };
  for (size_t i = 0; i < closures_.functions.size(); ++i) {
    const ir::MadeClosures::Function& f = closures_.functions[i];
    if (!is_none(f.defaults) &&
        PyFunction_SetDefaults(m.functions[i].get(), rebuild(f.defaults, outputs, frame, m).get()) <
            0)
      throw PythonError();
    if (!is_none(f.kwdefaults) &&
        PyFunction_SetKwDefaults(m.functions[i].get(),
                                 rebuild(f.kwdefaults, outputs, frame, m).get()) < 0)
      throw PythonError();
  }
  for (size_t i = 0; i < closures_.cells.size(); ++i)
    if (closures_.cells[i].bound &&
        PyCell_Set(m.cells[i].get(),
                   rebuild(closures_.cells[i].contents, outputs, frame, m).get()) < 0)
      throw PythonError();
  return m;
}

PyRef CapturedFrame::rebuild(const ir::Residual& r, const std::vector<PyRef>& outputs,
                             const ir::FrameView& frame, const Made& made) {
  using K = ir::Residual::Kind;
  switch (r.kind) {
    case K::GraphOutput:
      return outputs.at(r.index);
    case K::Const:
      return r.value;
    case K::Source: {
      PyRef v = guards::fetch(*r.source, frame);
      if (!v) TL_THROW(Runtime) << "torchlite: " << r.source->str() << " vanished while running";
      return v;
    }
    case K::Tuple:
    case K::NamedTuple:
    case K::List: {
      bool list = r.kind == K::List;
      PyRef out = PyRef::steal(list ? PyList_New(r.items.size()) : PyTuple_New(r.items.size()));
      if (!out) throw PythonError();
      for (size_t i = 0; i < r.items.size(); ++i) {
        PyObject* item = rebuild(r.items[i], outputs, frame, made).release();
        if (list)
          PyList_SET_ITEM(out.get(), i, item);
        else
          PyTuple_SET_ITEM(out.get(), i, item);
      }
      if (r.kind == K::NamedTuple) {
        // namedtuples take fields positionally; structseqs and torch.Size a sequence.
        PyRef fields = PyRef::steal(PyObject_GetAttrString(r.value.get(), "_make"));
        PyRef made =
            fields ? PyRef::steal(PyObject_CallOneArg(fields.get(), out.get()))
                   : (PyErr_Clear(), PyRef::steal(PyObject_CallOneArg(r.value.get(), out.get())));
        if (!made) throw PythonError();
        return made;
      }
      return out;
    }
    case K::Deque: {
      static PyObject* deque = [] {
        PyRef m = PyRef::steal(PyImport_ImportModule("collections"));
        PyObject* t = m ? PyObject_GetAttrString(m.get(), "deque") : nullptr;
        if (!t) throw PythonError();
        return t;  // NOTE: kept for the process lifetime, like the collections module
      }();
      PyRef items = PyRef::steal(PyList_New(r.items.size()));
      if (!items) throw PythonError();
      for (size_t i = 0; i < r.items.size(); ++i)
        PyList_SET_ITEM(items.get(), i, rebuild(r.items[i], outputs, frame, made).release());
      PyRef q =
          PyRef::steal(PyObject_CallFunctionObjArgs(deque, items.get(), r.value.get(), nullptr));
      if (!q) throw PythonError();
      return q;
    }
    case K::Dict: {
      PyRef d = PyRef::steal(PyDict_New());
      for (size_t i = 0; i < r.items.size(); ++i)
        if (PyDict_SetItem(d.get(), r.keys[i].get(),
                           rebuild(r.items[i], outputs, frame, made).get()) < 0)
          throw PythonError();
      return d;
    }
    case K::Slice: {
      PyRef s = PyRef::steal(PySlice_New(rebuild(r.items[0], outputs, frame, made).get(),
                                         rebuild(r.items[1], outputs, frame, made).get(),
                                         rebuild(r.items[2], outputs, frame, made).get()));
      if (!s) throw PythonError();
      return s;
    }
    case K::Iterator: {
      std::vector<PyRef> args;
      iterator_args(r, outputs, frame, made, args);
      size_t next = 0;
      return make_iterator(r, args, next);
    }
    case K::Function:
      TL_CHECK(r.index >= 0 && r.index < static_cast<int>(made.functions.size()))
          << "made function " << r.index << " out of range";
      return made.functions[r.index];
    case K::SymSize: {
      // NOTE: read from the frame's own tensors (each is a graph input or guarded): the number
      // eager computes at this call, whatever sizes the entry serves.
      std::vector<int64_t> values(r.sym_dims.size(), 0);
      for (size_t k = 0; k < r.sym_dims.size(); ++k) {
        const auto& [src, dim] = r.sym_dims[k];
        if (!src) continue;
        PyRef t = guards::fetch(*src, frame);
        if (!t) TL_THROW(Runtime) << "torchlite: " << src->str() << " vanished while running";
        PyRef shape = PyRef::steal(PyObject_GetAttrString(t.get(), "shape"));
        if (!shape) throw PythonError();
        if (!PyTuple_Check(shape.get()) || dim >= PyTuple_GET_SIZE(shape.get()))
          TL_THROW(Runtime) << "torchlite: " << src->str() << " has no size " << dim;
        values[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.get(), dim));
        if (values[k] == -1 && PyErr_Occurred()) throw PythonError();
      }
      PyRef n = PyRef::steal(PyLong_FromLongLong(r.sym->eval(values)));
      if (!n) throw PythonError();
      return n;
    }
    case K::ResumeLocal:
      TL_CHECK(false) << "a resume function's local outside its loop iterator";
  }
  TL_CHECK(false) << "unknown residual kind";
}

void CapturedFrame::iterator_args(const ir::Residual& r, const std::vector<PyRef>& outputs,
                                  const ir::FrameView& frame, const Made& made,
                                  std::vector<PyRef>& args, const std::vector<PyRef>* locals) {
  for (const ir::Residual& a : r.items) {
    if (a.kind == ir::Residual::Kind::Iterator) {
      iterator_args(a, outputs, frame, made, args, locals);
    } else if (a.kind == ir::Residual::Kind::ResumeLocal) {
      TL_CHECK(locals && a.index >= 0 && a.index < static_cast<int>(locals->size()))
          << "resume local " << a.index << " out of range";
      args.push_back((*locals)[a.index]);
    } else {
      args.push_back(rebuild(a, outputs, frame, made));
    }
  }
}

PyRef CapturedFrame::make_iterator(const ir::Residual& r, const std::vector<PyRef>& args,
                                   size_t& next) {
  std::vector<PyRef> call_args;
  for (const ir::Residual& a : r.items)
    call_args.push_back(a.kind == ir::Residual::Kind::Iterator ? make_iterator(a, args, next)
                                                               : args.at(next++));
  PyRef made;
  if (r.value) {
    static_assert(sizeof(PyRef) == sizeof(PyObject*), "PyRef must be a bare pointer");
    made = PyRef::steal(PyObject_Vectorcall(r.value.get(),
                                            reinterpret_cast<PyObject* const*>(call_args.data()),
                                            call_args.size(), nullptr));
  } else {
    TL_CHECK(call_args.size() == 1) << "iterator residual without a factory takes one argument";
    made = call_args[0];
  }
  if (!made) throw PythonError();
  PyRef it = PyRef::steal(PyObject_GetIter(made.get()));
  if (!it) throw PythonError();
  for (int i = 0; i < r.index; ++i) {
    PyRef item = PyRef::steal(PyIter_Next(it.get()));
    if (item) continue;
    if (PyErr_Occurred()) throw PythonError();
    break;
  }
  return it;
}

void CapturedFrame::replay_side_effects(const std::vector<PyRef>& outputs,
                                        const ir::FrameView& frame, const Made& made) {
  using K = ir::SideEffect::Kind;
  // Every value and target first, then every effect: one effect must not change what
  // another one's sources name.
  std::vector<PyRef> values, targets;
  for (const ir::SideEffect& e : side_effects_) {
    values.push_back(e.kind == K::DelAttr || e.kind == K::DeleteCell
                         ? PyRef()
                         : rebuild(e.value, outputs, frame, made));
    if (e.kind == K::SetGlobal || e.kind == K::SetCell || e.kind == K::DeleteCell) {
      targets.emplace_back();
      continue;
    }
    targets.push_back(guards::fetch(*e.target, frame));
    if (!targets.back())
      TL_THROW(Runtime) << "torchlite: " << e.target->str() << " vanished while running";
  }
  for (size_t i = 0; i < side_effects_.size(); ++i) {
    const ir::SideEffect& e = side_effects_[i];
    PyObject* target = targets[i].get();
    PyObject* value = values[i].get();
    switch (e.kind) {
      case K::SetGlobal:
        if (PyDict_SetItemString(frame.globals, e.name.c_str(), value) < 0) throw PythonError();
        break;
      case K::SetAttr:
        if (PyObject_SetAttrString(target, e.name.c_str(), value) < 0) throw PythonError();
        break;
      case K::DelAttr:
        if (PyObject_DelAttrString(target, e.name.c_str()) < 0) throw PythonError();
        break;
      case K::ReplaceList:
        if (PyList_SetSlice(target, 0, PY_SSIZE_T_MAX, value) < 0) throw PythonError();
        break;
      case K::ReplaceDict:
        PyDict_Clear(target);
        if (PyDict_Update(target, value) < 0) throw PythonError();
        break;
      case K::ReplaceDeque: {
        // NOTE: in place (the caller's deque keeps its identity); `value` is a list.
        PyRef cleared = PyRef::steal(PyObject_CallMethod(target, "clear", nullptr));
        PyRef extended =
            cleared ? PyRef::steal(PyObject_CallMethod(target, "extend", "O", value)) : PyRef();
        if (!extended) throw PythonError();
        break;
      }
      case K::BaseSetItem: {
        // NOTE: the C base's own slot (dict's or OrderedDict's, which keeps its order list),
        // never the subclass's __setitem__: what the traced super().__setitem__ did.
        PyTypeObject* base = Py_TYPE(target);
        while (base && (base->tp_flags & Py_TPFLAGS_HEAPTYPE)) base = base->tp_base;
        TL_CHECK(base && base->tp_as_mapping && base->tp_as_mapping->mp_ass_subscript)
            << "a dict subclass without a C item slot";
        if (base->tp_as_mapping->mp_ass_subscript(target, e.key.get(), value) < 0)
          throw PythonError();
        break;
      }
      case K::SetCell:
      case K::DeleteCell:
        TL_CHECK(frame.closure && e.index >= 0 && e.index < PyTuple_GET_SIZE(frame.closure))
            << "free variable " << e.index << " out of the frame's closure";
        if (PyCell_Set(PyTuple_GET_ITEM(frame.closure, e.index), value) < 0) throw PythonError();
        break;
      default:
        break;
    }
  }
}

PyObject* CapturedFrame::run(const ir::FrameView& frame, Served* served) {
  try {
    std::vector<PyRef> outputs = run_graph(frame, served);
    Made made = make_closures(outputs, frame);
    PyRef result = rebuild(result_, outputs, frame, made);
    replay_side_effects(outputs, frame, made);
    return result.release();
  } catch (const RunEagerly&) {
    return nullptr;
  } catch (const std::exception& e) {
    set_python_error(e);
    return nullptr;
  }
}

bool CapturedFrame::serves(const ir::FrameView& frame, Served* keep) {
  if (!sizes_ || !executable_->compiled() || !sizes_->may_refuse()) return true;
  try {
    std::vector<PyRef> inputs = fetch_inputs(frame, keep ? &keep->inputs : nullptr, true);
    if (inputs.empty() && !input_fetchers_.empty()) return true;  // NOTE: run() reports it
    std::shared_ptr<runtime::CompiledGraph> graph;
    if (!sizes_->serves(reinterpret_cast<PyObject* const*>(inputs.data()), inputs.size(),
                        executable_->shared_compiled(), graph))
      return false;
    if (keep) {
      keep->inputs = std::move(inputs);
      keep->chosen = true;
      keep->graph = std::move(graph);
    }
    return true;
  } catch (const std::exception&) {
    // NOTE: a compile failure at these sizes: run() compiles again and reports it.
    PyErr_Clear();
    return true;
  }
}

std::vector<PyRef> CapturedFrame::fetch_inputs(const ir::FrameView& frame,
                                               std::vector<PyRef>* given, bool missing_ok) {
  std::vector<PyRef> inputs;
  if (given && given->size() == input_fetchers_.size())
    inputs = std::move(*given);
  else
    inputs.resize(input_fetchers_.size());
  for (size_t i = 0; i < input_fetchers_.size(); ++i) {
    if (inputs[i]) continue;
    inputs[i] = input_fetchers_[i](frame);
    if (inputs[i]) continue;
    if (missing_ok) return {};
    TL_THROW(Runtime) << "torchlite: input " << input_sources_[i]->str()
                      << " vanished while running";
  }
  return inputs;
}

std::vector<PyRef> CapturedFrame::run_graph(const ir::FrameView& frame, Served* served) {
  {
    bool chosen = served && served->chosen && served->inputs.size() == input_fetchers_.size();
    // NOTE: serves() or the guards fetched them for this call
    std::vector<PyRef> inputs = fetch_inputs(frame, served ? &served->inputs : nullptr, false);
    std::vector<PyRef> outputs;
    static_assert(sizeof(PyRef) == sizeof(PyObject*), "PyRef must be a bare pointer");
    auto* raw = reinterpret_cast<PyObject* const*>(inputs.data());
    // NOTE: a size-generic entry runs the instance compiled for these inputs' sizes.
    std::shared_ptr<runtime::CompiledGraph> instance;
    if (sizes_ && executable_->compiled()) {
      instance = chosen ? std::static_pointer_cast<runtime::CompiledGraph>(served->graph)
                        : sizes_->get(raw, inputs.size(), executable_->shared_compiled());
      if (!instance) throw RunEagerly{};  // NOTE: before anything ran
      if (instance.get() == executable_->compiled()) instance.reset();
    }
    const ir::Graph& graph = instance ? instance->graph() : *graph_;
    // NOTE: what the graph's draws and grad-mode switches change, for an eager rerun.
    PyRef saved;
    if (rerun_devices_) {
      saved = PyRef::steal(
          PyObject_CallOneArg(python_helper("rerun_state.save").get(), rerun_devices_.get()));
      if (!saved) throw PythonError();
    }
    try {
      outputs = instance ? instance->run(raw, inputs.size()) : executable_->run(raw, inputs.size());
    } catch (const PythonError&) {
      // NOTE: null for a backend's callable
      const ir::Node* n = instance ? instance->failed_node() : executable_->failed_node();
      // NOTE: side effects are replayed after the graph, so the ones eager makes before the
      // failing op would be lost (`ks.append(1); x.add_(x[1])`): run eagerly instead when
      // that is still possible.
      // (Not for a torchlite bug: that must be seen, not hidden by an eager run.)
      // A bounds check placed before the graph's first effect (capture/index_bounds.h) that
      // failed where the steps ran it, before any effect: eager raises the op's own error.
      // So does the check of an assert on a tensor's value (capture/data_dependent_assert.h).
      bool check_first =
          n && (capture::is_index_bounds_check(*n) || capture::is_assertion_check(*n)) &&
          (instance ? instance->failed_before_effects() : executable_->failed_before_effects());
      const bool plain = !fatal_python_error_pending() && !torchlite_error_pending();
      if (plain && (check_first || failed_before_any_effect(graph, n))) {
        PyErr_Clear();
        throw RunEagerly{};
      }
      // NOTE: a graph without draws or grad-mode switches that failed before its first lasting
      // write left no trace either, also where the failing node is not known (a training
      // graph's forward run op by op without LLVM writes batch norm's running statistics after
      // its last op, where eager's batch norm writes them before a later op raises): eager's
      // rerun then raises the op's error with eager's state.
      if (plain && !any_undoable_) {
        // NOTE: with the run's error fetched: a training callable's mark is an attribute read.
        PyObject *type, *value, *trace;
        PyErr_Fetch(&type, &value, &trace);
        PyRef error_type = PyRef::steal(type), error = PyRef::steal(value),
              error_trace = PyRef::steal(trace);
        if (instance ? instance->failed_before_lasting_effects()
                     : executable_->failed_before_lasting_effects())
          throw RunEagerly{};  // NOTE: the user's error is dropped: eager raises it
        PyErr_Restore(error_type.release(), error.release(), error_trace.release());
      }
      // Raised after random draws or grad-mode switches but before anything lasting: with the
      // generators and the grad mode put back, the graph has left no trace (capture lets an op
      // that checks values follow such effects: capture/effect_order.h).
      if (plain && saved) {
        PyObject *type, *value, *trace;
        PyErr_Fetch(&type, &value, &trace);
        PyRef error_type = PyRef::steal(type), error = PyRef::steal(value),
              error_trace = PyRef::steal(trace);
        bool undo = instance ? instance->failed_before_lasting_effects()
                             : executable_->failed_before_lasting_effects();
        if (undo) {
          PyRef restored = PyRef::steal(
              PyObject_CallOneArg(python_helper("rerun_state.restore").get(), saved.get()));
          if (restored) throw RunEagerly{};  // NOTE: the user's error is dropped: eager raises it
          PyErr_Clear();
        }
        PyErr_Restore(error_type.release(), error.release(), error_trace.release());
      }
      // Point the traceback at the user's line that created the failing op.
      if (n) {
        int line = line_of(n->location);
        std::string file = n->location.substr(0, n->location.rfind(':'));
        tl_traceback_add(func_name_.c_str(), file.empty() ? filename_.c_str() : file.c_str(), line);
      }
      throw;
    }
    return outputs;
  }
}

}  // namespace tl::frame
