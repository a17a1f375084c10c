#include "python/bindings.h"

namespace py = pybind11;

namespace tl::python {

void bind_frame(py::module_& m) {}

}  // namespace tl::python
