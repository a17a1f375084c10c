#pragma once
// Cache miss: capture the frame, compile its graph with the configured
// backend, and return the new cache entry. Ties capture, guards and runtime
// together (docs/internals/frame.md: frame/ is the only layer that sees all three).
#include "frame/compiled_frame.h"

namespace tl::frame {

// `code` and `func` are borrowed. A graph break yields an entry with
// compiled == nullptr and the guards seen up to the break. Throws tl::Error
// (fullgraph=True and a graph break, or a backend failure) or PythonError.
// `structural_modules`: see capture_frame.
CacheEntry compile_frame(PyCodeObject* code, PyObject* func, const ir::FrameView& frame,
                         const std::shared_ptr<const CompileConfig>& config,
                         bool structural_modules = false);

}  // namespace tl::frame

namespace tl::ir {
class Graph;
}

namespace tl::frame {

// Registered by csrc/python at import: wraps a graph as a `_C.Graph` Python
// object (new reference), so frame/ never includes pybind11.
using GraphWrapper = PyObject* (*)(std::shared_ptr<const ir::Graph> graph);
void set_graph_wrapper(GraphWrapper wrapper);
// The Python function that turns a graph into a backend's callable:
// bridge(graph, backend, example_inputs) -> callable. Borrowed, kept.
void set_backend_bridge(PyObject* bridge);

}  // namespace tl::frame
