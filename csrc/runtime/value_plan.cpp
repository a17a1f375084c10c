#include "runtime/value_plan.h"

#include "core/errors.h"

namespace tl::runtime {

void ValuePlan::set_outputs(const ir::Graph& graph,
                            const std::function<int(const ir::Node*)>& slot_of, int n_steps) {
  TL_CHECK(graph.output()) << "graph without output";
  for (auto& a : graph.output()->args) {
    if (a.kind == ir::Arg::Kind::Node) {
      output_slots_.push_back(slot_of(a.node));
      last_use_[output_slots_.back()] = n_steps;  // kept to the end
    } else {
      output_slots_.push_back(-1);
      output_consts_.push_back(a.value);
    }
  }
}

std::vector<std::vector<int>> ValuePlan::release_lists(
    const std::vector<std::vector<int>>& produced, int n_inputs) const {
  int n_steps = static_cast<int>(produced.size());
  std::vector<std::vector<int>> release(n_steps);
  for (auto& [slot, step] : last_use_)
    if (step < n_steps && slot >= n_inputs) release[step].push_back(slot);
  for (int step = 0; step < n_steps; ++step)
    for (int slot : produced[step])
      if (!last_use_.count(slot)) release[step].push_back(slot);
  return release;
}

std::vector<PyRef> ValuePlan::outputs(const std::vector<PyRef>& values) const {
  std::vector<PyRef> out;
  out.reserve(output_slots_.size());
  size_t c = 0;
  for (int slot : output_slots_) out.push_back(slot >= 0 ? values[slot] : output_consts_[c++]);
  return out;
}

bool ValuePlan::is_output(int slot) const {
  for (int s : output_slots_)
    if (s == slot) return true;
  return false;
}

}  // namespace tl::runtime
