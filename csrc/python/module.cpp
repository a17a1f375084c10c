#include "core/errors.h"
#include "python/bindings.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "torchlite's C++ core";
  static py::exception<tl::Error> internal_error(m, "InternalError", PyExc_RuntimeError);
  tl::set_internal_error_type(internal_error.ptr());
  static py::exception<tl::Error> unsupported(m, "Unsupported", PyExc_RuntimeError);
  tl::set_unsupported_error_type(unsupported.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tl::PythonError&) {
      throw py::error_already_set();
    } catch (const tl::Error& e) {
      tl::set_python_error(e);
    }
  });
  tl::python::bind_core(m);
  tl::python::bind_ir(m);
  tl::python::bind_capture(m);
  tl::python::bind_frame(m);
  tl::python::bind_compile(m);
  tl::python::bind_passes(m);
  tl::python::bind_fx(m);
  tl::python::bind_cuda(m);
  tl::python::bind_cuda_runtime(m);
  tl::python::bind_settings(m);
  tl::python::bind_cache(m);
  tl::python::bind_training(m);
}
