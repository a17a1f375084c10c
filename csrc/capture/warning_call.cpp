// warnings.warn in traced code. A warning the user would see cannot be put in a graph, and
// replaying it later would report the wrong file and line, so it breaks and the call runs in
// CPython at the user's own instruction (the bridge keeps the frame's file, line and globals,
// so `__warningregistry__`, "once"/"default" actions and pytest.warns behave as eager). A
// warning the filters ignore has no effect at all: it is skipped.
//
// The decision replays CPython's filter walk (Python/_warnings.c, get_filter): the first entry
// of warnings.filters whose message regex, category, module regex and line all match gives the
// action, else warnings.defaultaction. Only the entries walked are guarded (each field, and the
// list by identity since catch_warnings swaps it), so simplefilter/filterwarnings/catch_warnings
// recompile. Where the walk cannot be decided at trace time (a non-constant message, a module
// or line filter with stacklevel > 1, whose frame is not known here), it breaks: breaking is
// never wrong.
#include "capture/warning_call.h"

#include "capture/graph_break.h"
#include "capture/py_helpers.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

namespace {

PyObject* warnings_module() {  // borrowed, kept for the process lifetime
  static PyObject* m = [] {
    PyObject* r = PyImport_ImportModule("warnings");
    if (!r) throw PythonError();
    return r;
  }();
  return m;
}

[[noreturn]] void shown(const std::string& category, const std::string& why) {
  graph_break("warning_call", "warnings.warn(...) of a " + category + " " + why +
                                  "; it runs eagerly so the warning shows at this line");
}

// Positional-or-keyword argument `i` / `name` of the call, or null.
ValuePtr arg_of(const std::vector<ValuePtr>& args, const KwArgs& kwargs, size_t i,
                const char* name) {
  if (i < args.size()) return args[i];
  for (auto& [k, v] : kwargs)
    if (k == name) return v;
  return nullptr;
}

// A filter's message or module field (borrowed) against `text` (CPython's check_matched):
// None matches everything, a str (the built-in default filters) only itself, else a compiled
// pattern's match().
bool field_matches(PyObject* field, PyObject* text) {
  if (field == Py_None) return true;
  if (PyUnicode_CheckExact(field)) return PyUnicode_Compare(field, text) == 0;
  PyRef m = PyRef::steal(PyObject_CallMethod(field, "match", "O", text));
  if (!m) throw PythonError();
  int ok = PyObject_IsTrue(m.get());
  if (ok < 0) throw PythonError();
  return ok;
}

class FilterWalk {
 public:
  FilterWalk(CaptureContext& ctx, PyObject* filters)
      : ctx_(ctx), filters_(filters), list_src_(ir::Source::attr(warnings_src(), "filters")) {
    ctx_.guards().add_id_match(list_src_, filters);
  }

  // Guards entry i field by field: action and line by value, patterns and category by
  // identity (re.compile caches patterns, so an unchanged filter keeps its objects).
  void guard_entry(Py_ssize_t i, PyObject* entry) {
    ir::SourcePtr e = ir::Source::item(list_src_, PyRef::steal(PyLong_FromSsize_t(i)));
    ctx_.guards().add_type_match(e, reinterpret_cast<PyObject*>(Py_TYPE(entry)));
    ctx_.guards().add_length_match(e, 5);
    for (Py_ssize_t f = 0; f < 5; ++f) {
      ir::SourcePtr s = ir::Source::item(e, PyRef::steal(PyLong_FromSsize_t(f)));
      PyObject* v = PyTuple_GET_ITEM(entry, f);
      if (f == 0 || f == 4 || v == Py_None || PyUnicode_CheckExact(v))
        ctx_.guards().add_equals_match(s, v);
      else
        ctx_.guards().add_id_match(s, v);
    }
  }

  void guard_all_walked(Py_ssize_t n) { ctx_.guards().add_length_match(list_src_, n); }

  PyRef default_action() {
    PyRef a = PyRef::steal(PyObject_GetAttrString(warnings_module(), "defaultaction"));
    if (!a) throw PythonError();
    if (!PyUnicode_CheckExact(a.get())) graph_break("warning_call", "warnings.defaultaction");
    ctx_.guards().add_equals_match(ir::Source::attr(warnings_src(), "defaultaction"), a.get());
    return a;
  }

 private:
  static ir::SourcePtr warnings_src() {
    return ir::Source::held(PyRef::borrow(warnings_module()), "warnings");
  }

  CaptureContext& ctx_;
  PyObject* filters_;
  ir::SourcePtr list_src_;
};

}  // namespace

bool is_warnings_warn(PyObject* fn) {
  static PyObject* warn = [] {
    PyObject* w = PyObject_GetAttrString(warnings_module(), "warn");  // kept, like the module
    if (!w) throw PythonError();
    return w;
  }();
  return fn == warn;
}

ValuePtr warning_call(CaptureContext& ctx, PyObject* globals, const std::vector<ValuePtr>& args,
                      const KwArgs& kwargs) {
  ValuePtr message = arg_of(args, kwargs, 0, "message");
  ValuePtr category = arg_of(args, kwargs, 1, "category");
  ValuePtr stacklevel = arg_of(args, kwargs, 2, "stacklevel");
  if (!message || !message->is_const() || (category && !category->is_const()) ||
      (stacklevel && !stacklevel->is_const()))
    shown("warning", "with a message or category computed by traced code");
  // The category and text as warn() derives them (Python/_warnings.c, get_category).
  PyObject* msg = message->obj.get();
  PyObject* cat = PyExc_UserWarning;
  if (PyObject_IsInstance(msg, PyExc_Warning) == 1)
    cat = reinterpret_cast<PyObject*>(Py_TYPE(msg));
  else if (category && category->obj.get() != Py_None)
    cat = category->obj.get();
  clear_expected_error();
  if (!PyType_Check(cat) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cat),
                                              reinterpret_cast<PyTypeObject*>(PyExc_Warning)))
    shown("warning", "with an invalid category (it raises TypeError)");
  std::string cat_name = reinterpret_cast<PyTypeObject*>(cat)->tp_name;
  long level = 1;
  if (stacklevel) {
    level = PyLong_Check(stacklevel->obj.get()) ? PyLong_AsLong(stacklevel->obj.get()) : -1;
    if (level == -1 && PyErr_Occurred()) clear_expected_error();
  }
  PyRef text = PyRef::steal(PyObject_Str(msg));
  if (!text) throw PythonError();
  PyObject* module = globals ? PyDict_GetItemString(globals, "__name__") : nullptr;  // borrowed

  PyRef filters = PyRef::steal(PyObject_GetAttrString(warnings_module(), "filters"));
  if (!filters) throw PythonError();
  if (!PyList_CheckExact(filters.get())) shown(cat_name, "(warnings.filters is not a list)");
  FilterWalk walk(ctx, filters.get());
  Py_ssize_t n = PyList_GET_SIZE(filters.get());
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* entry = PyList_GET_ITEM(filters.get(), i);
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 5)
      shown(cat_name, "(a malformed entry in warnings.filters)");
    walk.guard_entry(i, entry);
    PyObject* action = PyTuple_GET_ITEM(entry, 0);
    PyObject* f_msg = PyTuple_GET_ITEM(entry, 1);
    PyObject* f_cat = PyTuple_GET_ITEM(entry, 2);
    PyObject* f_mod = PyTuple_GET_ITEM(entry, 3);
    PyObject* f_line = PyTuple_GET_ITEM(entry, 4);
    int sub = PyObject_IsSubclass(cat, f_cat);
    if (sub < 0) throw PythonError();
    if (!sub || !field_matches(f_msg, text.get())) continue;
    bool line_any = PyLong_Check(f_line) && PyLong_AsLong(f_line) == 0;
    if ((f_mod != Py_None || !line_any) && (level != 1 || !module))
      shown(cat_name, "under a module/line filter that depends on the caller at stacklevel " +
                          std::to_string(level));
    if (!field_matches(f_mod, module)) continue;
    if (!line_any && PyLong_AsLong(f_line) != ctx.lineno) continue;
    if (PyUnicode_CompareWithASCIIString(action, "ignore") == 0) return none();
    shown(cat_name, "that the filters show (action '" + utf8(action) + "')");
  }
  walk.guard_all_walked(n);
  PyRef action = walk.default_action();
  if (PyUnicode_CompareWithASCIIString(action.get(), "ignore") == 0) return none();
  shown(cat_name, "that the filters show (default action '" + utf8(action.get()) + "')");
}

}  // namespace tl::capture
