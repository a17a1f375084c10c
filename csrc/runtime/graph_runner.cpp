#include "runtime/graph_runner.h"

#include <unordered_map>

#include "core/errors.h"
#include "runtime/node_call.h"

namespace tl::runtime {

struct GraphRunner::Step {
  NodeCall call;
  int out_slot = -1;
  std::vector<int> release_after;  // slots whose last use is this step
};

GraphRunner::GraphRunner(std::shared_ptr<const ir::Graph> graph) : graph_(std::move(graph)) {
  std::unordered_map<const ir::Node*, int> slots;
  for (auto& n : graph_->nodes()) {
    if (n->op == ir::OpKind::Placeholder) slots[n.get()] = static_cast<int>(n_inputs_++);
  }
  n_values_ = n_inputs_;
  for (auto& n : graph_->nodes()) {
    if (n->op != ir::OpKind::CallFunction && n->op != ir::OpKind::CallMethod) continue;
    Step s{NodeCall(*n, slots)};
    if (s.call.changes_grad_mode()) changes_grad_mode_ = true;
    s.out_slot = static_cast<int>(n_values_++);
    slots[n.get()] = s.out_slot;
    int idx = static_cast<int>(steps_.size());
    for (int slot : s.call.used_slots()) values_.use(slot, idx);
    steps_.push_back(std::move(s));
  }
  values_.set_outputs(
      *graph_, [&](const ir::Node* n) { return slots.at(n); }, static_cast<int>(steps_.size()));
  std::vector<std::vector<int>> produced;
  for (auto& s : steps_) produced.push_back({s.out_slot});
  auto release = values_.release_lists(produced, static_cast<int>(n_inputs_));
  for (size_t i = 0; i < steps_.size(); ++i) steps_[i].release_after = std::move(release[i]);
}

GraphRunner::~GraphRunner() = default;

std::vector<PyRef> GraphRunner::run(PyObject* const* inputs, size_t n_inputs) {
  TL_CHECK(n_inputs == n_inputs_) << "graph expects " << n_inputs_ << " inputs, got " << n_inputs;
  failed_node_ = nullptr;
  std::vector<PyRef> values(n_values_);
  for (size_t i = 0; i < n_inputs; ++i) values[i] = PyRef::borrow(inputs[i]);
  int grad_before = changes_grad_mode_ ? grad_enabled() : -1;
  for (auto& s : steps_) {
    PyObject* result = s.call.call(values);
    if (!result) {
      failed_node_ = s.call.node();
      restore_grad_mode(grad_before);
      throw PythonError();
    }
    values[s.out_slot] = PyRef::steal(result);
    for (int slot : s.release_after) values[slot] = PyRef();
  }
  return values_.outputs(values);
}

}  // namespace tl::runtime
