#include "capture/effect_order.h"

#include <algorithm>
#include <unordered_set>

#include "capture/graph_break.h"
#include "capture/index_bounds.h"
#include "capture/py_helpers.h"
#include "ir/effects.h"

namespace tl::capture {
namespace {

// torch functions and Tensor methods that raise on their operands' values (indices out of
// range, invalid class ids or probabilities, singular matrices).
const std::unordered_set<std::string>& value_checking_ops() {
  static const std::unordered_set<std::string> names = {
      "index_select",
      "gather",
      "take",
      "take_along_dim",
      "scatter",
      "scatter_",
      "scatter_add",
      "scatter_add_",
      "scatter_reduce",
      "scatter_reduce_",
      "index_add",
      "index_add_",
      "index_copy",
      "index_copy_",
      "index_fill",
      "index_fill_",
      "index_put",
      "index_put_",
      "index_reduce",
      "index_reduce_",
      "put",
      "put_",
      "embedding",
      "embedding_bag",
      "one_hot",
      "multinomial",
      "nll_loss",
      "nll_loss_nd",
      "nll_loss2d",
      "cross_entropy",
      "cross_entropy_loss",
      "multi_margin_loss",
      "multilabel_margin_loss",
      "ctc_loss",
      "repeat_interleave",
      "masked_scatter",
      "masked_scatter_",
      "cholesky",
      "cholesky_inverse",
      "inverse",
      "linalg_cholesky",
      "linalg_inv",
      "linalg_solve",
      "_assert_async",
  };
  return names;
}

// An index that is not only ints and slices: advanced indexing checks bounds when it runs.
bool advanced_index(const ValuePtr& idx) {
  if (!idx) return false;
  if (idx->is_tensor() || idx->kind == VKind::List) return true;
  if (idx->kind == VKind::Tuple)
    return std::any_of(idx->items.begin(), idx->items.end(), advanced_index);
  return false;
}

bool checks_values(const std::string& op, const std::vector<ValuePtr>& args) {
  if (op == "getitem" || op == "setitem" || op == "__getitem__" || op == "__setitem__")
    return args.size() > 1 && advanced_index(args[1]);
  return value_checking_ops().count(op) > 0;
}

// Ops whose CUDA kernels check their indices only with device-side asserts (CUDA_KERNEL_ASSERT),
// as torchlite's generated kernels do (tl_check_index): eager raises nothing where the op runs;
// the assert surfaces at a later synchronisation and leaves the CUDA context unusable, so there
// is no state at the op for a graph break to keep (and a check before the first effect would
// synchronise every call).
const std::unordered_set<std::string>& device_assert_ops() {
  static const std::unordered_set<std::string> names = {
      "index_select", "gather",      "scatter",     "scatter_",      "scatter_add",
      "scatter_add_", "index_add",   "index_add_",  "index_copy",    "index_copy_",
      "index_fill",   "index_fill_", "embedding",   "nll_loss",      "nll_loss_nd",
      "nll_loss2d",   "getitem",     "__getitem__", "cross_entropy", "cross_entropy_loss"};
  return names;
}

bool asserts_on_device(const std::string& op, const std::vector<ValuePtr>& args,
                       const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  if (!device_assert_ops().count(op)) return false;
  std::vector<ValuePtr> operands(args);
  for (const auto& kv : kwargs) operands.push_back(kv.second);
  // NOTE: an index tuple's tensors are operands too; a list index is made a tensor by torch's
  // indexing code on the host: left to the break.
  if (operands.size() > 1 && operands[1] && operands[1]->kind == VKind::Tuple) {
    std::vector<ValuePtr> items = operands[1]->items;
    operands.insert(operands.end(), items.begin(), items.end());
  }
  bool any_tensor = false;
  for (const ValuePtr& v : operands) {
    if (!v) continue;
    if (v->kind == VKind::List) return false;
    if (!v->is_tensor()) continue;
    if (detail::attr_str(v->device.get(), "type") != "cuda") return false;
    any_tensor = true;
  }
  return any_tensor;
}

// The first Python side effect the graph's replay would make ("self.x = ...", "a mutated
// L['kwargs']"), empty when there is none.
std::string first_python_effect(const CaptureContext& ctx) {
  for (const PendingEffect& e : ctx.effects) {
    std::string target = e.target ? e.target->str() : "";
    switch (e.kind) {
      case ir::SideEffect::Kind::SetAttr:
        return target + "." + e.name + " = ...";
      case ir::SideEffect::Kind::SetGlobal:
        return "global " + e.name + " = ...";
      case ir::SideEffect::Kind::DelAttr:
        return "del " + target + "." + e.name;
      default:
        return "an update of " + target;
    }
  }
  for (const ValuePtr& c : ctx.sourced_containers)
    if (c->mutated) return "an update of " + (c->source ? c->source->str() : "a container");
  return "";
}

// An advanced index in a graph node's arguments (a tensor, a list, or a tuple holding one).
bool advanced_index_arg(const ir::Arg& a) {
  if (a.kind == ir::Arg::Kind::Node) return true;
  if (a.kind == ir::Arg::Kind::Const) return false;
  return std::any_of(a.items.begin(), a.items.end(), advanced_index_arg) ||
         a.kind == ir::Arg::Kind::List;
}

// True when no node of `graph` has a lasting effect (ir::lasting_effect): its visible effects,
// if any, are random draws into its own tensors and grad-mode switches, which the frame undoes
// before it runs eagerly after a failure (frame/captured_frame.cpp).
bool only_undoable_effects(const ir::Graph& graph) {
  for (const auto& n : graph.nodes())
    if (ir::lasting_effect(*n)) return false;
  return true;
}

// The first node of `graph` with a visible effect, null if none.
const ir::Node* first_visible_effect(const ir::Graph& graph) {
  for (const auto& n : graph.nodes())
    if (ir::visible_effect(*n)) return n.get();
  return nullptr;
}

}  // namespace

bool checks_values(const ir::Node& n) {
  if (n.op != ir::OpKind::CallFunction && n.op != ir::OpKind::CallMethod) return false;
  const std::string& t = n.target_name;
  const std::string op = t.substr(t.rfind('.') + 1);
  bool checks = op == "getitem" || op == "__getitem__" || op == "setitem" || op == "__setitem__"
                    ? n.args.size() > 1 && advanced_index_arg(n.args[1])
                    : value_checking_ops().count(op) > 0;
  // NOTE: as asserts_on_device: a CUDA index op raises nothing where it runs.
  if (checks && device_assert_ops().count(op) && n.meta && n.meta->device)
    return detail::attr_str(n.meta->device.get(), "type") != "cuda";
  return checks;
}

void check_effect_order(CaptureContext& ctx, const std::string& op,
                        const std::vector<ValuePtr>& args,
                        const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  if (!checks_values(op, args) || asserts_on_device(op, args, kwargs)) return;
  std::string python_effect = first_python_effect(ctx);
  if (python_effect.empty()) return;
  const ir::Node* effect = first_visible_effect(ctx.graph());
  if (!effect) return;
  // NOTE: training-mode dropout draws (it advances the generator) and a no_grad block switches
  // the grad mode; a rerun would draw again and see the switched mode. The frame saves both
  // before such a graph and, when it raises before any lasting effect, puts them back and runs
  // eagerly from the start: eager's error, eager's Python effects, the generator advanced once.
  // An op that writes an operand itself (`buf.index_copy_(0, pos, k)`, `x[idx] = v`, `out=`)
  // would be the first lasting effect when it raises: its indices are checked first instead.
  // NOTE: not `inv = torch.empty_like(p); inv[p] = ...` (a tensor the graph made).
  bool writes_itself = ir::in_place_name(op) || op == "setitem" || op == "__setitem__";
  if (writes_itself && !args.empty() && args[0] && args[0]->is_tensor() && args[0]->node)
    writes_itself = ir::outside_tensor(args[0]->node);
  for (const auto& kv : kwargs) writes_itself = writes_itself || kv.first == "out";
  if (!writes_itself && only_undoable_effects(ctx.graph())) return;
  if (check_indices_first(ctx, op, args, kwargs, *effect)) return;
  // NOTE: the reason names the in-place op and the Python effect, so the user (and a
  // benchmark's break table) sees which one to move.
  graph_break("effect_order",
              op + " checks its operands' values when it runs, after an in-place op (" +
                  effect->target_name + " at " + effect->location + ") and Python side effects (" +
                  python_effect +
                  "): it runs in CPython so that, if it raises, both happened first as in eager",
              "Move the in-place update or the list/dict/attribute update after this op, or "
              "validate the indices before the compiled call.");
}

}  // namespace tl::capture
