#pragma once
// What running a graph node does beyond computing its result: the effects the
// caller can see, and whether the op checks its operands' values when it runs.
#include <string>
#include <vector>

#include "ir/graph.h"

namespace tl::ir {

// A node whose run is visible after the graph: an in-place op (`add_`, `x[i] = v`, `out=`,
// `inplace=True`), a random draw (it advances the generator) or one that runs hooks.
// `inplace=False`, `out=None` and an eval-mode dropout are not.
bool visible_effect(const Node& n);

// The position of the `inplace` flag of the torch.nn.functional activations and dropouts that
// take one (F.hardswish(input, inplace): 1), or -1. torch's modules pass it positionally as
// often as by keyword (nn.Hardswish, nn.LeakyReLU, nn.ELU, nn.Hardtanh, nn.ReLU6).
int functional_inplace_position(const std::string& target_name);

// A true `inplace` flag, by keyword or at its position (nn.ReLU(inplace=False) spells out the
// default; a flag that is not a constant bool counts as true).
bool inplace_flag(const Node& n);

// True when the target's name says it writes its first operand: a trailing underscore
// (`add_`, `torch.relu_`, `copy_`), except Python's `operator.and_`, `or_`, `not_`, `is_`,
// whose underscore only steps around a keyword (`a & b` is not in place; `a &= b` is iand).
bool in_place_name(const std::string& target_name);

// F.dropout(x, p, training, inplace) and its variants (dropout1d/2d/3d, alpha_dropout,
// feature_alpha_dropout, torch.dropout(x, p, train)) with training a constant False: the
// identity, the call every nn.Dropout makes in eval mode (no random draw).
bool is_eval_dropout(const Node& n);

// True when the node writes one of its operands: in place by name (`add_`), an augmented
// assignment (`operator.iadd`), `inplace=True`, a setitem, or `out=`.
bool writes_operand(const Node& n);

// A visible effect that putting state back undoes, so the frame can run again from its start
// after a later op raised: a random draw into a tensor the graph made (it only advances a
// generator, whose state the frame saves and restores: frame/captured_frame.cpp) or a
// grad-mode switch (the frame's grad mode is restored). Draws into inputs, `out=`, seeds,
// hooks and everything else are lasting.
bool undoable_effect(const Node& n);
// A visible effect that is not undoable.
bool lasting_effect(const Node& n);

// True unless `written`, the tensor an in-place op writes, is known to be one the graph made
// (followed back through views and in-place ops to an op with a fresh result, or on a storage
// an op of the graph allocated): writing it is invisible after the graph.
bool outside_tensor(const Node* written);

// True if some node of `graph` has a visible effect.
bool any_visible_effect(const Graph& graph);

// The graph inputs the graph's visible effects write: the placeholder each in-place write
// reaches back through views and in-place ops. `unknown` when some effect may write a tensor
// this cannot name (a write reached through an op with other tensor operands, a hook, a
// backward): a caller then treats every input as written. Random draws and grad-mode
// switches write nothing.
struct InputWrites {
  std::vector<const Node*> placeholders;
  bool unknown = false;
};
InputWrites written_inputs(const Graph& graph);

}  // namespace tl::ir
