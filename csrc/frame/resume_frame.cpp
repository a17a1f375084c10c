#include "frame/resume_frame.h"

#include "capture/torch_api.h"
#include "core/errors.h"
#include "frame/eval_hook.h"

namespace tl::frame {
namespace {

PyRef checked(PyObject* p) {  // steals p
  if (!p) throw PythonError();
  return PyRef::steal(p);
}

// A function running `code` (borrowed) with the frame's globals, and as closure `cells` (the
// frame's cell variables) then the frame's own closure; new reference.
PyRef function_of(PyObject* code, const ir::FrameView& frame, const std::vector<PyRef>& cells) {
  PyRef fn = checked(PyFunction_New(code, frame.globals));
  if (cells.empty()) {
    if (frame.closure && PyFunction_SetClosure(fn.get(), frame.closure) < 0) throw PythonError();
    return fn;
  }
  const Py_ssize_t nfree = frame.closure ? PyTuple_GET_SIZE(frame.closure) : 0;
  const auto ncells = static_cast<Py_ssize_t>(cells.size());
  PyRef closure = checked(PyTuple_New(ncells + nfree));
  for (Py_ssize_t i = 0; i < ncells; ++i)
    PyTuple_SET_ITEM(closure.get(), i, Py_NewRef(cells[i].get()));
  for (Py_ssize_t i = 0; i < nfree; ++i)
    PyTuple_SET_ITEM(closure.get(), ncells + i, Py_NewRef(PyTuple_GET_ITEM(frame.closure, i)));
  if (PyFunction_SetClosure(fn.get(), closure.get()) < 0) throw PythonError();
  return fn;
}

// A function running an inlined call's level `code` (borrowed): the function's globals and
// closure.
PyRef level_function(PyObject* code, const capture::ResumePlan::Level& level) {
  PyRef fn = checked(PyFunction_New(code, level.globals.get()));
  if (level.closure && PyFunction_SetClosure(fn.get(), level.closure.get()) < 0)
    throw PythonError();
  return fn;
}

PyObject* partial_type() {
  static PyObject* partial = [] {
    PyRef m = checked(PyImport_ImportModule("functools"));
    return checked(PyObject_GetAttrString(m.get(), "partial")).release();  // NOTE: kept
  }();
  return partial;
}

void set_grad_mode(bool enabled) {
  checked(PyObject_CallOneArg(capture::torch_api().set_grad_enabled_fn.get(),
                              enabled ? Py_True : Py_False));
}

bool is_exit(char c) {
  return c == static_cast<char>(bytecode::Slot::ExitTrue) ||
         c == static_cast<char>(bytecode::Slot::ExitFalse);
}

// The code a traceback entry ran (borrowed; kept alive by the entry's frame).
PyCodeObject* code_of(PyTracebackObject* tb) {
  PyRef code = PyRef::steal(reinterpret_cast<PyObject*>(PyFrame_GetCode(tb->tb_frame)));
  return reinterpret_cast<PyCodeObject*>(code.get());
}

// An exception leaving the bridge through the code after the break (a resume function or loop
// body, captured or not) carries two entries for the user's one frame: the bridge's, at the
// line of the break, then the resumed code's, at the line that raised. Like CPython hiding its
// import machinery, the bridge's entry is dropped, so the traceback reads as eager's (same
// functions, same lines). An exception raised by the breaking instruction itself keeps the
// bridge's entry: that line is the one eager shows. `chain`: the bridge, then (a break inside
// inlined calls, ResumePlan::nested) each level's, whose entry stays where the next level's
// follows it (the level's call line, as eager shows its frame).
void hide_bridge_entry(const std::vector<PyCodeObject*>& chain) {
#if PY_VERSION_HEX >= 0x030C0000
  PyRef exc = PyRef::steal(PyErr_GetRaisedException());
  if (!exc) return;
  PyRef tb = PyRef::steal(PyException_GetTraceback(exc.get()));
#else
  PyObject *type = nullptr, *value = nullptr, *raw_tb = nullptr;
  PyErr_Fetch(&type, &value, &raw_tb);
  PyRef tb = PyRef::steal(raw_tb);
#endif
  // True for the entry of chain[k] followed by its own frame's resumed code.
  auto hidden = [&](PyTracebackObject* e, size_t k) {
    if (!e || !e->tb_next || code_of(e) != chain[k]) return false;
    PyCodeObject* next = code_of(e->tb_next);
    if (k + 1 < chain.size() && next == chain[k + 1]) return false;
    return bytecode::user_code_of(next) == bytecode::user_code_of(chain[k]);
  };
  auto* head = reinterpret_cast<PyTracebackObject*>(tb.get());
  if (head && PyTraceBack_Check(tb.get()) && hidden(head, 0))
    tb = PyRef::borrow(reinterpret_cast<PyObject*>(head->tb_next));
  // NOTE: the levels' entries follow one another (a partial in between adds none).
  size_t k = 1;
  for (auto* at = reinterpret_cast<PyTracebackObject*>(tb.get()); at && k < chain.size();) {
    PyTracebackObject* next = at->tb_next;
    if (!next) break;
    if (code_of(next) != chain[k]) {
      at = next;
      continue;
    }
    if (hidden(next, k)) {
      // NOTE: unlinked as traceback.tb_next's setter does (a new reference to what follows).
      at->tb_next = reinterpret_cast<PyTracebackObject*>(
          Py_NewRef(reinterpret_cast<PyObject*>(next->tb_next)));
      Py_DECREF(reinterpret_cast<PyObject*>(next));
    } else {
      at = next;
    }
    ++k;
  }
#if PY_VERSION_HEX >= 0x030C0000
  PyException_SetTraceback(exc.get(), tb ? tb.get() : Py_None);
  PyErr_SetRaisedException(exc.release());
#else
  PyErr_Restore(type, value, tb.release());
#endif
}

}  // namespace

ResumeFrame::ResumeFrame(std::shared_ptr<const ir::Graph> graph,
                         std::vector<ir::SideEffect> side_effects, ir::MadeClosures closures,
                         std::unique_ptr<runtime::Executable> executable, std::string func_name,
                         std::string filename, capture::ResumePlan plan,
                         const bytecode::BridgeCode& codes,
                         std::shared_ptr<const CompileConfig> config)
    : CapturedFrame(std::move(graph), ir::Residual{}, std::move(side_effects), std::move(closures),
                    std::move(executable), std::move(func_name), std::move(filename)),
      plan_(std::move(plan)),
      codes_(codes),
      config_(std::move(config)) {
  bridge_chain_.push_back(reinterpret_cast<PyCodeObject*>(codes_.bridge.get()));
  const auto& levels = plan_.nested;
  for (size_t k = 0; k < levels.size(); ++k) {
    auto* code = reinterpret_cast<PyCodeObject*>(levels[k].code.get());
    level_codes_.push_back(k + 1 < levels.size()
                               ? &bytecode::call_through_bridge(
                                     code, levels[k].index, levels[k].stack, levels[k].local_slots)
                               : &bytecode::bridge_for({code, levels[k].index, false,
                                                        levels[k].stack, levels[k].local_slots}));
    bridge_chain_.push_back(reinterpret_cast<PyCodeObject*>(level_codes_.back()->bridge.get()));
  }
}

PyRef ResumeFrame::nested_call(const std::vector<PyRef>& outputs, const ir::FrameView& frame,
                               const Made& made) {
  PyRef inner;
  for (size_t k = plan_.nested.size(); k-- > 0;) {
    const auto& level = plan_.nested[k];
    PyRef args = checked(PyTuple_New(static_cast<Py_ssize_t>(
        1 + level.locals.size() + level.stack_values.size() + (inner ? 1 : 0))));
    Py_ssize_t i = 0;
    PyTuple_SET_ITEM(args.get(), i++,
                     level_function(level_codes_[k]->bridge.get(), level).release());
    for (const auto& v : level.locals)
      PyTuple_SET_ITEM(args.get(), i++, value(v, outputs, frame, made).release());
    for (const auto& v : level.stack_values)
      PyTuple_SET_ITEM(args.get(), i++, value(v, outputs, frame, made).release());
    if (inner) PyTuple_SET_ITEM(args.get(), i++, inner.release());
    inner = checked(PyObject_Call(partial_type(), args.get(), nullptr));
  }
  return inner;
}

PyRef ResumeFrame::value(const capture::ResumeValue& v, const std::vector<PyRef>& outputs,
                         const ir::FrameView& frame, const Made& made) {
  PyRef base = rebuild(v.value, outputs, frame, made);
  if (v.func) return checked(PyMethod_New(v.func.get(), base.get()));
  if (!v.attr.empty()) return checked(PyObject_GetAttrString(base.get(), v.attr.c_str()));
  return base;
}

// Grad-mode with-blocks open at the break are entered again, innermost
// last, each with a torch.set_grad_enabled whose __exit__ restores the mode
// outside it; the bridge's (and the resume function's) own exception table
// calls that __exit__ as the original with-block would.
void ResumeFrame::push_stack(std::vector<PyRef>& args, const std::vector<PyRef>& outputs,
                             const ir::FrameView& frame, const Made& made,
                             std::vector<PendingIterator>& iterators) {
  const std::string& s = plan_.stack;
  std::vector<bool> restores;
  for (char c : s)
    if (is_exit(c)) restores.push_back(c == static_cast<char>(bytecode::Slot::ExitTrue));
  set_grad_mode(restores.empty() ? plan_.grad_mode : restores[0]);
  size_t j = 0, k = 0;
  for (char c : s) {
    if (c == static_cast<char>(bytecode::Slot::Null)) continue;
    if (is_exit(c)) {
      ++k;
      bool inner = k < restores.size() ? restores[k] : plan_.grad_mode;
      PyRef mgr = checked(PyObject_CallOneArg(capture::torch_api().set_grad_enabled_cls.get(),
                                              inner ? Py_True : Py_False));
      args.push_back(checked(PyObject_GetAttrString(mgr.get(), "__exit__")));
    } else if (plan_.stack_values[j].value.kind == ir::Residual::Kind::Iterator) {
      const ir::Residual& r = plan_.stack_values[j].value;
      iterators.push_back({args.size(), &r, {}});
      iterator_args(r, outputs, frame, made, iterators.back().args, &args);
      args.emplace_back();
    } else {
      args.push_back(value(plan_.stack_values[j], outputs, frame, made));
    }
    ++j;
  }
}

PyObject* ResumeFrame::run(const ir::FrameView& frame, Served* served) {
  try {
    std::vector<PyRef> outputs = run_graph(frame, served);
    Made made = make_closures(outputs, frame);
    std::vector<PyRef> args;
    for (const auto& v : plan_.locals) args.push_back(value(v, outputs, frame, made));
    std::vector<PendingIterator> iterators;
    push_stack(args, outputs, frame, made, iterators);
    if (!plan_.nested.empty()) args.push_back(nested_call(outputs, frame, made));
    replay_side_effects(outputs, frame, made);
    for (PendingIterator& p : iterators) {
      size_t next = 0;
      args[p.slot] = make_iterator(*p.residual, p.args, next);
    }
    outputs.clear();  // NOTE: the graph's outputs live on only where CPython holds them
    TL_CHECK(static_cast<int>(made.cells.size()) >= plan_.frame_cells)
        << "fewer cells than the frame has";
    PyRef bridge =
        function_of(codes_.bridge.get(), frame,
                    std::vector<PyRef>(made.cells.begin(), made.cells.begin() + plan_.frame_cells));
    static_assert(sizeof(PyRef) == sizeof(PyObject*), "PyRef must be a bare pointer");
    ActiveConfigScope scope(&config_);
    PyObject* result = PyObject_Vectorcall(
        bridge.get(), reinterpret_cast<PyObject* const*>(args.data()), args.size(), nullptr);
    if (!result) hide_bridge_entry(bridge_chain_);
    return result;
  } catch (const RunEagerly&) {
    return nullptr;
  } catch (const std::exception& e) {
    set_python_error(e);
    return nullptr;
  }
}

}  // namespace tl::frame
