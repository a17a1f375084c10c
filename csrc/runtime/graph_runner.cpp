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
  std::unordered_map<int, int> last_use;  // slot -> step index
  for (auto& n : graph_->nodes()) {
    if (n->op != ir::OpKind::CallFunction && n->op != ir::OpKind::CallMethod) continue;
    Step s{NodeCall(*n, slots)};
    if (s.call.changes_grad_mode()) changes_grad_mode_ = true;
    s.out_slot = static_cast<int>(n_values_++);
    slots[n.get()] = s.out_slot;
    int idx = static_cast<int>(steps_.size());
    for (int slot : s.call.used_slots()) last_use[slot] = idx;
    steps_.push_back(std::move(s));
  }
  TL_CHECK(graph_->output()) << "graph without output";
  for (auto& a : graph_->output()->args) {
    if (a.kind == ir::Arg::Kind::Node) {
      int slot = slots.at(a.node);
      output_slots_.push_back(slot);
      last_use[slot] = static_cast<int>(steps_.size());  // kept to the end
    } else {
      output_slots_.push_back(-1);
      output_consts_.push_back(a.value);
    }
  }
  for (auto& [slot, step] : last_use)
    if (step < static_cast<int>(steps_.size()) && slot >= static_cast<int>(n_inputs_))
      steps_[step].release_after.push_back(slot);
  // Values never used are released right after they are produced.
  for (auto& s : steps_)
    if (!last_use.count(s.out_slot)) s.release_after.push_back(s.out_slot);
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
  std::vector<PyRef> out;
  out.reserve(output_slots_.size());
  size_t c = 0;
  for (int slot : output_slots_) out.push_back(slot >= 0 ? values[slot] : output_consts_[c++]);
  return out;
}

}  // namespace tl::runtime
