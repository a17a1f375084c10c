// torchlite._C settings and passes: the settings table (core/flags.h) as
// Python values, the process settings torchlite.config applies, and the pass
// list with a way for tests to add a pass written in Python.
#include <pybind11/stl.h>

#include "core/errors.h"
#include "pipeline/pass_registry.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace tl::python {
namespace {

py::object to_py(const SettingValue& v) {
  return std::visit(
      [](const auto& x) -> py::object {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::optional<bool>>)
          return x ? py::bool_(*x) : py::object(py::none());
        else
          return py::cast(x);
      },
      v);
}

// NOTE: exact types: True is an int in Python, but not a valid cpu_pool_mb.
SettingValue from_py(const SettingSpec& spec, py::handle v) {
  const char* type = setting_type_name(spec);
  auto wrong = [&]() -> SettingValue {
    throw Error(ErrorKind::Type, std::string("torchlite setting '") + spec.name + "' takes a " +
                                     type + ", got " + Py_TYPE(v.ptr())->tp_name);
  };
  switch (spec.field.index()) {
    case 0:
      return PyBool_Check(v.ptr()) ? SettingValue(v.cast<bool>()) : wrong();
    case 1:
      return PyLong_CheckExact(v.ptr()) ? SettingValue(v.cast<int64_t>()) : wrong();
    case 2:
      return PyUnicode_Check(v.ptr()) ? SettingValue(v.cast<std::string>()) : wrong();
    default:
      if (v.is_none()) return SettingValue(std::optional<bool>());
      return PyBool_Check(v.ptr()) ? SettingValue(std::optional<bool>(v.cast<bool>())) : wrong();
  }
}

py::dict to_dict(const Settings& s) {
  py::dict d;
  for (const SettingSpec& spec : setting_specs()) d[spec.name] = to_py(get_setting(s, spec));
  return d;
}

py::list table() {
  py::list out;
  for (const SettingSpec& spec : setting_specs()) {
    py::dict d;
    d["name"] = spec.name;
    d["type"] = setting_type_name(spec);
    d["scope"] = spec.scope == SettingScope::Compile ? "compile" : "process";
    d["env"] = spec.env ? py::object(py::str(spec.env)) : py::object(py::none());
    d["default"] = to_py(get_setting(Settings(), spec));
    d["default_text"] = spec.default_text;
    d["doc"] = spec.doc;
    out.append(d);
  }
  return out;
}

// A pass written in Python: fn(graph) may rewrite the graph (tests register
// faulty passes to check the verifier names them).
void register_test_pass(const std::string& name, py::function fn, const std::string& before) {
  pipeline::Pass p;
  p.name = name;
  p.run = [fn](ir::Graph&, pipeline::PassState& st) {
    py::gil_scoped_acquire gil;
    try {
      fn(st.graph);
    } catch (py::error_already_set& e) {
      e.restore();
      throw PythonError();
    }
  };
  pipeline::register_pass(std::move(p), before);
}

std::vector<std::string> pass_names() {
  std::vector<std::string> out;
  for (const pipeline::Pass& p : pipeline::registered_passes()) out.push_back(p.name);
  return out;
}

}  // namespace

Settings settings_from_dict(py::handle values) {
  Settings s = process_settings();
  if (values.is_none()) return s;
  for (auto [k, v] : py::reinterpret_borrow<py::dict>(values)) {
    std::string name = k.cast<std::string>();
    const SettingSpec* spec = find_setting(name);
    if (!spec) TL_THROW(Value) << "unknown torchlite setting '" << name << "'";
    set_setting(s, *spec, from_py(*spec, v));
  }
  return s;
}

void bind_settings(py::module_& m) {
  m.def("settings_table", &table,
        "The settings table: name, type, scope (compile/process), env, default, default_text, "
        "doc.");
  m.def(
      "settings_from_env", [] { return to_dict(settings_from_env()); },
      "{name: value}: the defaults overridden by the environment, read now.");
  m.def(
      "process_settings", [] { return to_dict(process_settings()); },
      "{name: value}: the settings the runtime reads.");
  m.def(
      "set_process_settings",
      [](py::dict values) { set_process_settings(settings_from_dict(values)); }, py::arg("values"),
      "Applies {name: value} (torchlite.config) over the process settings.");
  m.def("pass_names", &pass_names, "The registered compiler passes, in the order they run.");
  m.def("register_test_pass", &register_test_pass, py::arg("name"), py::arg("fn"),
        py::arg("before") = "torchlite.partition",
        "Tests: registers fn(graph) as a pass before the pass named `before`.");
  m.def("unregister_test_pass", &pipeline::unregister_pass, py::arg("name"));
}

}  // namespace tl::python
