#pragma once
// Value lifetimes of a graph run, shared by GraphRunner and CompiledGraph:
// which slots the graph returns, and after which step each intermediate slot
// can be released so peak memory matches eager.
#include <functional>
#include <unordered_map>
#include <vector>

#include "core/py_ref.h"
#include "ir/graph.h"

namespace tl::runtime {

class ValuePlan {
 public:
  // Step `step` reads `slot` (the slot lives to its latest reader).
  void use(int slot, int step) {
    auto [it, added] = last_use_.try_emplace(slot, step);
    if (!added && it->second < step) it->second = step;
  }
  // Records the graph's outputs (kept past the last of `n_steps` steps);
  // `slot_of` maps an output node to its slot.
  void set_outputs(const ir::Graph& graph, const std::function<int(const ir::Node*)>& slot_of,
                   int n_steps);
  // Per step, the slots to release after it: intermediates (slots >= n_inputs)
  // at their last use, and values never read right after `produced[step]` makes them.
  std::vector<std::vector<int>> release_lists(const std::vector<std::vector<int>>& produced,
                                              int n_inputs) const;
  bool is_output(int slot) const;
  // The graph's outputs from the slot values of a finished run.
  std::vector<PyRef> outputs(const std::vector<PyRef>& values) const;

 private:
  std::unordered_map<int, int> last_use_;  // slot -> step index
  std::vector<int> output_slots_;          // -1: the next constant
  std::vector<PyRef> output_consts_;
};

}  // namespace tl::runtime
