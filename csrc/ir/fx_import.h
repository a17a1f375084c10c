#pragma once
// A torch.fx.GraphModule (Dynamo's graph for torch.compile(backend="torchlite"),
// or a joint graph traced by torchlite/_training.py) read into an ir::Graph,
// so that it goes through the same compile_graph as torchlite's own captures.
#include <Python.h>

#include <memory>
#include <vector>

#include "core/py_ref.h"
#include "ir/graph.h"

namespace tl::ir {

struct FxImport {
  // Takes the module's inputs, then extra_inputs; returns its outputs flattened.
  std::shared_ptr<Graph> graph;
  std::vector<PyRef> extra_inputs;  // get_attr tensors, appended to the inputs on every call
};

// `gm` and `device` are borrowed. `device`: null or None, or the real device of
// values whose examples are on "meta" (a joint graph traced on meta). Throws
// Unsupported for symbolic shapes and values a Graph cannot represent.
FxImport graph_from_fx(PyObject* gm, PyObject* device);

}  // namespace tl::ir
