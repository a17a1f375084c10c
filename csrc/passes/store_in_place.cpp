#include "passes/store_in_place.h"

#include <algorithm>
#include <unordered_set>

namespace tl::passes {
namespace {

using ir::Node;

// `dst.copy_(src)` with no other arguments, as a method or torch.Tensor.copy_.
bool is_plain_copy(const Node& n) {
  bool method = n.op == ir::OpKind::CallMethod && n.target_name == "copy_";
  bool function = n.op == ir::OpKind::CallFunction && n.target_name == "torch.Tensor.copy_";
  return (method || function) && n.args.size() == 2 && n.kwargs.empty() &&
         n.args[0].kind == ir::Arg::Kind::Node && n.args[1].kind == ir::Arg::Kind::Node;
}

// Same sizes, dtype and device, and strides that step over every element
// once: the kernel's store of `src` then covers `dst` exactly.
bool same_dense_layout(const ir::TensorMeta& dst, const ir::TensorMeta& src) {
  if (dst.sizes != src.sizes || dst.dtype.get() != src.dtype.get()) return false;
  int eq = PyObject_RichCompareBool(dst.device.get(), src.device.get(), Py_EQ);
  if (eq != 1) {
    if (eq < 0) PyErr_Clear();
    return false;
  }
  for (size_t d = 0; d < dst.sizes.size(); ++d) {
    if (dst.sizes[d] <= 1) continue;
    if (dst.strides[d] != src.strides[d] || dst.strides[d] == 0) return false;
  }
  return true;
}

// True when every read of `input` in group `g` is a load at the point the
// kernel stores `out` to: each element is read before it is overwritten.
bool reads_in_step(const Node* input, const Node* out, const Group& g, const Fusion& f) {
  if (g.nred != 0) return false;
  for (const Node* m : g.members) {
    auto l = f.lowerings.find(m);
    if (l == f.lowerings.end()) return false;
    const OpLowering& low = l->second;
    auto it = std::find(low.inputs.begin(), low.inputs.end(), input);
    if (it == low.inputs.end()) continue;
    if (low.kind != OpLowering::Kind::Pointwise || gathers(low, input)) return false;
    if (g.more_maps.count(m)) return false;  // read at other points too
    auto map = operand_map(low, it - low.inputs.begin(), m->meta->sizes, g.maps.at(m));
    if (!map || *map != g.maps.at(out)) return false;
  }
  return true;
}

// True for a reduction kernel that reads `input` only as a value per row, at the element its
// output `o` stores (no stride along the reduction axes), and only for values stored once per
// row: batch norm's running mean, updated from the batch mean in the statistics' kernel. Both
// code generators evaluate and store a row's values after its reductions, by one lane per row
// (codegen/cuda/reduce_text.cpp, codegen/cpu/reduce_emitter.cpp), so each element is read
// before it is written and by nothing else.
bool reads_per_row(const Node* input, size_t o, const FusedKernel& fk) {
  const ir::Kernel& k = fk.kernel;
  if (k.reduction_axes == 0 || o >= k.outputs.size()) return false;
  const size_t outer = k.shape.size() - static_cast<size_t>(k.reduction_axes);
  auto per_row = [&](const ir::BufferView& v) {
    for (size_t d = outer; d < k.shape.size() && d < v.strides.size(); ++d)
      if (v.strides[d] != 0 && k.shape[d] > 1) return false;
    return true;
  };
  const ir::BufferView& stored = k.outputs[o].view;
  if (!per_row(stored)) return false;
  std::vector<char> reads(k.exprs.size(), 0), varies(k.exprs.size(), 0);
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const ir::Expr& e = k.exprs[i];
    const bool of_input = e.buffer >= 0 && static_cast<size_t>(e.buffer) < fk.inputs.size() &&
                          fk.inputs[e.buffer] == input;
    if (e.op == ir::ExprOp::Gather && of_input) return false;
    if (e.op == ir::ExprOp::Load) {
      const ir::BufferView& v = k.inputs.at(e.buffer);
      varies[i] = !per_row(v);
      if (of_input) {
        if (v.strides != stored.strides || v.offset != stored.offset) return false;
        reads[i] = 1;
      }
    } else if (e.op == ir::ExprOp::Index) {
      varies[i] = static_cast<size_t>(e.ivalue) >= outer;
    } else if (e.op == ir::ExprOp::Gather) {
      varies[i] = 1;
    } else if (!ir::is_reduction(e.op)) {
      for (int a : e.operands) reads[i] |= reads[a], varies[i] |= varies[a];
    } else {
      for (int a : e.operands)
        if (reads[a]) return false;  // read at every point of the row
    }
    if (reads[i] && varies[i]) return false;
  }
  for (const auto& out : k.outputs)
    if (reads.at(out.expr) && !per_row(out.view)) return false;
  return true;
}

}  // namespace

int store_in_place(const ir::Graph& graph, const GraphInfo& info, const Fusion& fusion,
                   Partition& p) {
  std::unordered_set<const Node*> absorbed, targets;
  for (const auto& up : graph.nodes()) {
    const Node* c = up.get();
    if (!is_plain_copy(*c) || !info.users_of(c).empty()) continue;
    const Node* dst = c->args[0].node;
    const Node* src = c->args[1].node;
    if (dst->op != ir::OpKind::Placeholder || !dst->meta || !src->meta) continue;
    auto gi = fusion.group_of.find(src);
    if (gi == fusion.group_of.end() || targets.count(dst)) continue;
    FusedKernel& k = p.kernels[gi->second];
    auto out = std::find(k.outputs.begin(), k.outputs.end(), src);
    if (out == k.outputs.end() || !same_dense_layout(*dst->meta, *src->meta)) continue;
    size_t o = out - k.outputs.begin();
    if (!k.store_into.empty() && k.store_into[o]) continue;
    // Nothing outside the kernel may read the old value of dst or the new value
    // of src (which would be dst itself).
    auto only_kernel_or = [&](const Node* n) {
      for (const Node* u : info.users_of(n)) {
        auto g = fusion.group_of.find(u);
        if (u != c && (g == fusion.group_of.end() || g->second != gi->second)) return false;
      }
      return true;
    };
    if (!only_kernel_or(dst) || !only_kernel_or(src)) continue;
    if (!reads_in_step(dst, src, fusion.groups[gi->second], fusion) && !reads_per_row(dst, o, k))
      continue;
    k.store_into.resize(k.outputs.size(), nullptr);
    k.store_into[o] = dst;
    k.kernel.aliased_io = true;
    targets.insert(dst);
    absorbed.insert(c);
  }
  if (absorbed.empty()) return 0;
  std::erase_if(p.order, [&](const PlanItem& it) { return absorbed.count(it.extern_node) > 0; });
  return static_cast<int>(absorbed.size());
}

}  // namespace tl::passes
