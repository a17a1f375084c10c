#pragma once
// Calling one graph node through torch: its arguments are resolved once into
// value slots and constants, rebuilt per call, and passed by vectorcall.
// Shared by GraphRunner (every node) and CompiledGraph (extern nodes).
#include <unordered_map>
#include <vector>

#include "core/py_ref.h"
#include "ir/graph.h"

namespace tl::runtime {

using SlotMap = std::unordered_map<const ir::Node*, int>;

// An argument resolved for execution: a value slot, a constant, or a nested
// tuple/list/dict built per call.
struct ArgPlan {
  int slot = -1;   // >= 0: the value of an earlier node
  PyRef constant;  // slot < 0 and no items: this constant
  ir::Arg::Kind kind = ir::Arg::Kind::Const;
  std::vector<ArgPlan> items;
  std::vector<PyRef> keys;
};

class NodeCall {
 public:
  // `slots` maps every node the arguments refer to onto its value slot.
  NodeCall(const ir::Node& node, const SlotMap& slots);
  // `torch.as_strided(<slot>, sizes, strides, offset)`, run for `node`: what a
  // chain of views ending in `node` computes, in one call.
  static NodeCall as_strided(const ir::Node& node, int slot, const std::vector<int64_t>& sizes,
                             const std::vector<int64_t>& strides, int64_t offset);
  // Calls the node's target on `values` (indexed by slot). Returns a new
  // reference, or null with the Python error set.
  PyObject* call(const std::vector<PyRef>& values) const;
  const ir::Node* node() const { return node_; }
  // Every value slot the arguments read (with repeats).
  const std::vector<int>& used_slots() const { return used_; }
  // True for torch._C._set_grad_enabled: the caller restores grad mode on error.
  bool changes_grad_mode() const;

 private:
  NodeCall() = default;
  const ir::Node* node_ = nullptr;
  PyRef callable_;             // call_function
  PyRef method_;               // call_method: interned name
  std::vector<ArgPlan> args_;  // positional then keyword values
  PyRef kwnames_;              // tuple or null
  std::vector<int> used_;
};

// torch.is_grad_enabled() as 0/1, or -1 (error cleared) if it cannot be read.
int grad_enabled();
// After a failed call: sets grad mode back to `before` (if >= 0) without
// disturbing the Python error that is set.
void restore_grad_mode(int before);

}  // namespace tl::runtime
