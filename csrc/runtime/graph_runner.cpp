#include "runtime/graph_runner.h"

#include <unordered_map>

#include "core/errors.h"
#include "ir/effects.h"
#include "runtime/node_call.h"

namespace tl::runtime {

struct GraphRunner::Step {
  NodeCall call;
  int out_slot = -1;
  std::vector<int> release_after;  // slots whose last use is this step
};

GraphRunner::GraphRunner(std::shared_ptr<const ir::Graph> graph, const ir::Schedule& schedule)
    : graph_(std::move(graph)) {
  TL_CHECK(schedule.kernels.empty() && schedule.memory.size() == schedule.order.size())
      << "an op-by-op run of a schedule with kernels or without a memory plan";
  std::unordered_map<const ir::Node*, int> slots;
  for (auto& n : graph_->nodes()) {
    if (n->op == ir::OpKind::Placeholder) slots[n.get()] = static_cast<int>(n_inputs_++);
  }
  n_values_ = n_inputs_;
  for (const ir::ScheduleStep& item : schedule.order) {
    TL_CHECK(item.extern_node) << "an op-by-op step without a node";
    if (first_effect_ < 0 && ir::visible_effect(*item.extern_node))
      first_effect_ = static_cast<int>(steps_.size());
    if (first_lasting_effect_ < 0 && ir::lasting_effect(*item.extern_node))
      first_lasting_effect_ = static_cast<int>(steps_.size());
    Step s{NodeCall(*item.extern_node, slots)};
    if (s.call.changes_grad_mode()) changes_grad_mode_ = true;
    s.out_slot = static_cast<int>(n_values_++);
    slots[item.extern_node] = s.out_slot;
    steps_.push_back(std::move(s));
  }
  if (first_effect_ < 0) first_effect_ = static_cast<int>(steps_.size());
  if (first_lasting_effect_ < 0) first_lasting_effect_ = static_cast<int>(steps_.size());
  outputs_.set(*graph_, [&](const ir::Node* n) { return slots.at(n); });
  for (size_t i = 0; i < steps_.size(); ++i)
    for (const ir::Node* n : schedule.memory[i].release_after)
      steps_[i].release_after.push_back(slots.at(n));
}

GraphRunner::~GraphRunner() = default;

std::vector<PyRef> GraphRunner::run(PyObject* const* inputs, size_t n_inputs) {
  TL_CHECK(n_inputs == n_inputs_) << "graph expects " << n_inputs_ << " inputs, got " << n_inputs;
  std::vector<PyRef> values(n_values_);
  for (size_t i = 0; i < n_inputs; ++i) values[i] = PyRef::borrow(inputs[i]);
  return run_values(values);
}

std::vector<PyRef> GraphRunner::run_owned(std::vector<PyRef> inputs) {
  TL_CHECK(inputs.size() == n_inputs_)
      << "graph expects " << n_inputs_ << " inputs, got " << inputs.size();
  inputs.resize(n_values_);
  return run_values(inputs);
}

std::vector<PyRef> GraphRunner::run_values(std::vector<PyRef>& values) {
  failed_node_ = nullptr;
  int grad_before = changes_grad_mode_ ? grad_enabled() : -1;
  failed_step_ = -1;
  for (auto& s : steps_) {
    PyObject* result = s.call.call(values);
    if (!result) {
      failed_node_ = s.call.node();
      failed_step_ = static_cast<int>(&s - steps_.data());
      restore_grad_mode(grad_before);
      throw PythonError();
    }
    values[s.out_slot] = PyRef::steal(result);
    for (int slot : s.release_after) values[slot] = PyRef();
  }
  return outputs_.outputs(values);
}

}  // namespace tl::runtime
