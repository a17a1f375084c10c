#include "bytecode/decode.h"
#include "capture/break_kinds.h"
#include "capture/fast_meta.h"
#include "capture/meta_cache.h"
#include "core/errors.h"
#include "passes/graph_rewrite.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace tl::python {

namespace {

PyCodeObject* as_code(const py::object& obj) {  // borrows obj
  if (!PyCode_Check(obj.ptr())) {
    throw py::type_error("expected a code object, got " + std::string(Py_TYPE(obj.ptr())->tp_name));
  }
  return reinterpret_cast<PyCodeObject*>(obj.ptr());
}

}  // namespace

void bind_capture(py::module_& m) {
  // NOTE: the passes' new nodes take their meta results as capture's replay does (C++ shape
  // rules, the result cache): passes/graph_rewrite.h.
  passes::set_meta_call([](PyObject* target, const std::string& method, PyObject* self,
                           PyObject* pos, PyObject* kwargs) {
    try {
      return capture::meta_call(target, method, self, pos, kwargs, true);
    } catch (const PythonError&) {
      return PyRef();  // the Python error stays set
    }
  });
  m.def(
      "break_kinds",
      [] {
        py::list out;
        for (const auto& k : capture::break_kinds()) out.append(py::make_tuple(k.name, k.hint));
        return out;
      },
      "Every graph-break kind as (name, hint): the hint a break of that kind carries when its "
      "site gives none (docs/graph_breaks.md lists the same).");
  m.def(
      "fast_meta",
      [](const py::object& target, const std::string& method, const py::object& self,
         const py::tuple& args, const py::object& kwargs) -> py::object {
        PyRef r =
            capture::fast_meta_call(target.ptr(), method, self.is_none() ? nullptr : self.ptr(),
                                    args.ptr(), kwargs.is_none() ? nullptr : kwargs.ptr());
        if (!r) return py::none();
        return py::reinterpret_steal<py::object>(r.release());
      },
      py::arg("target"), py::arg("method"), py::arg("self"), py::arg("args"), py::arg("kwargs"),
      "The meta result capture infers in C++ for target(*args, **kwargs) (or "
      "self.<method>(*args, **kwargs) when method is not empty), or None when it leaves the "
      "call to torch's meta kernel.");
  m.def(
      "check_fast_meta",
      [](const std::string& op, const py::object& fast, const py::object& real) {
        capture::check_fast_meta(op, fast.ptr(), real.ptr());
      },
      py::arg("op"), py::arg("fast"), py::arg("real"),
      "Raises InternalError when the two meta results differ as TORCHLITE_CHECK_META checks.");
  m.def(
      "disassemble",
      [](const py::object& code) {
        PyCodeObject* co = as_code(code);
        return bytecode::disassemble(bytecode::decode(co), co);
      },
      py::arg("code"), "dis-like listing of a code object, as torchlite decodes it.");
  m.def(
      "decode",
      [](const py::object& code) {
        bytecode::Bytecode bc = bytecode::decode(as_code(code));
        py::list out;
        for (const bytecode::Instruction& inst : bc.insts) {
          out.append(
              py::make_tuple(inst.opname, inst.arg, inst.offset, inst.jump_target, inst.line));
        }
        return out;
      },
      py::arg("code"),
      "[(opname, arg, offset, jump_target_index, line)] per instruction; EXTENDED_ARG is "
      "folded into the instruction it extends, whose offset is that of its first prefix; "
      "jump_target_index and line are -1 when absent.");
}

}  // namespace tl::python
