#include <pybind11/stl.h>

#include "core/counters.h"
#include "core/log.h"
#include "core/python_helpers.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace tl::python {

void bind_core(py::module_& m) {
  m.def(
      "counters",
      [] {
        py::dict d;
        for (auto& [k, v] : counters().snapshot()) d[py::str(k)] = v;
        return d;
      },
      "A snapshot of torchlite's event counters.");
  m.def("reset_counters", [] { counters().reset(); });
#ifdef TORCHLITE_HAVE_LLVM
  m.attr("has_llvm") = true;  // the CPU code generator was built
#else
  m.attr("has_llvm") = false;
#endif
  m.def("set_log_sink", [](py::object fn) { set_log_sink(fn.is_none() ? nullptr : fn.ptr()); });
  m.def("set_log_channels", [](const std::string& csv) { set_log_channels(csv); });
  m.def(
      "register_python_helper",
      [](const std::string& name, py::object fn) {
        register_python_helper(name, fn.is_none() ? nullptr : fn.ptr());
      },
      "Registers a Python function the C++ core calls by `name` (torchlite/_install.py);\n"
      "None unregisters it.");
  m.def("log_enabled", [](const std::string& ch) { return log_enabled(ch.c_str()); });
}

}  // namespace tl::python
