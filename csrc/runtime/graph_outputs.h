#pragma once
// What a graph run returns, shared by GraphRunner and CompiledGraph: per output,
// the value slot it is read from, or a constant.
#include <functional>
#include <vector>

#include "core/py_ref.h"
#include "ir/graph.h"

namespace tl::runtime {

class GraphOutputs {
 public:
  // Records the graph's outputs; `slot_of` maps an output node to its slot.
  void set(const ir::Graph& graph, const std::function<int(const ir::Node*)>& slot_of);
  // The graph's outputs from the slot values of a finished run.
  std::vector<PyRef> outputs(const std::vector<PyRef>& values) const;

 private:
  std::vector<int> slots_;  // -1: the next constant
  std::vector<PyRef> consts_;
};

}  // namespace tl::runtime
