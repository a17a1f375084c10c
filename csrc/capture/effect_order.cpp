#include "capture/effect_order.h"

#include <algorithm>
#include <unordered_set>

#include "capture/graph_break.h"
#include "capture/index_bounds.h"
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

bool python_effects_pending(const CaptureContext& ctx) {
  return !ctx.effects.empty() ||
         std::any_of(ctx.sourced_containers.begin(), ctx.sourced_containers.end(),
                     [](const ValuePtr& c) { return c->mutated; });
}

// The first node of `graph` with a visible effect, null if none.
const ir::Node* first_visible_effect(const ir::Graph& graph) {
  for (const auto& n : graph.nodes())
    if (ir::visible_effect(*n)) return n.get();
  return nullptr;
}

}  // namespace

void check_effect_order(CaptureContext& ctx, const std::string& op,
                        const std::vector<ValuePtr>& args, bool keywords) {
  if (!checks_values(op, args) || !python_effects_pending(ctx)) return;
  const ir::Node* effect = first_visible_effect(ctx.graph());
  if (!effect) return;
  if (!keywords && check_indices_first(ctx, op, args, *effect)) return;
  // NOTE: the reason names the in-place op, so the user (and a benchmark's break table) sees
  // which one to move.
  graph_break("effect_order",
              op + " checks its operands' values when it runs, after an in-place op (" +
                  effect->target_name + " at " + effect->location +
                  ") and Python side effects: it runs in CPython so that, if it raises, both "
                  "happened first as in eager",
              "Move the in-place update or the list/dict/attribute update after this op, or "
              "validate the indices before the compiled call.");
}

}  // namespace tl::capture
