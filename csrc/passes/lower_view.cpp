// View rules: index remaps that cost nothing inside a kernel. Each records,
// per axis of the base, which axis of the view indexes it (-1: always 0).
// Views are never stored (fuse.cpp keeps them extern when their value is
// needed outside one kernel), so aliasing stays torch's.
#include <algorithm>

#include "ir/effects.h"
#include "passes/alias.h"
#include "passes/lower_data.h"

namespace tl::passes {
namespace {

// The view as the base with size-1 axes inserted or dropped, in order: per
// base axis, the view axis indexing it (-1: size 1). nullopt for any other view.
std::optional<std::vector<int>> size_one_remap(const std::vector<int64_t>& bs,
                                               const std::vector<int64_t>& ns) {
  std::vector<int> node_axes, base_axes;
  for (size_t i = 0; i < ns.size(); ++i)
    if (ns[i] != 1) node_axes.push_back(static_cast<int>(i));
  size_t k = 0;
  for (size_t j = 0; j < bs.size(); ++j) {
    if (bs[j] == 1) {
      base_axes.push_back(-1);
    } else if (k < node_axes.size() && ns[node_axes[k]] == bs[j]) {
      base_axes.push_back(node_axes[k++]);
    } else {
      return std::nullopt;
    }
  }
  if (k != node_axes.size()) return std::nullopt;
  return base_axes;
}

// When `view` is `base` at offset 0 with size-1 axes inserted or dropped and
// every other axis kept in order with its stride: the remap (size_one_remap).
std::optional<std::vector<int>> size_one_view_axes(const ir::Node& view, const ir::Node& base) {
  auto off = alias_offset(view, base);
  auto axes = size_one_remap(base.meta->sizes, view.meta->sizes);
  if (!off || *off != 0 || !axes) return std::nullopt;
  for (size_t j = 0; j < axes->size(); ++j)
    if ((*axes)[j] >= 0 && view.meta->strides[(*axes)[j]] != base.meta->strides[j])
      return std::nullopt;
  return axes;
}

// When `view` is `base` sliced (x[..., a:b], narrow, split's and chunk's pieces): the same
// rank, sizes no larger, the base's strides, and an offset that is a start per smaller axis.
// Per base axis the view axis indexing it, and the shifts (a start > 0) of the sliced axes.
// NOTE: a sliced axis of size 1 (x[:, 3:4]) is not one: its coordinate is never an index.
bool slice_view(RuleCtx& c, const ir::Node& base) {
  const ir::TensorMeta &v = *c.node.meta, &b = *base.meta;
  auto off = alias_offset(c.node, base);
  if (!off || v.sizes.size() != b.sizes.size()) return false;
  std::vector<size_t> sliced;
  for (size_t j = 0; j < v.sizes.size(); ++j) {
    if (v.sizes[j] > b.sizes[j]) return false;
    if (v.sizes[j] > 1 && v.strides[j] != b.strides[j]) return false;
    if (v.sizes[j] == b.sizes[j]) continue;
    if (v.sizes[j] < 2 || b.strides[j] <= 0) return false;
    sliced.push_back(j);
  }
  if (sliced.empty()) return false;
  std::sort(sliced.begin(), sliced.end(),
            [&](size_t x, size_t y) { return b.strides[x] > b.strides[y]; });
  std::vector<AxisShift> shifts(b.sizes.size());
  int64_t rest = *off;
  for (size_t j : sliced) {
    int64_t start = std::min(rest / b.strides[j], b.sizes[j] - v.sizes[j]);
    rest -= start * b.strides[j];
    if (start > 0) shifts[j] = AxisShift{start, start + v.sizes[j]};
  }
  if (rest != 0) return false;
  c.out.kind = OpLowering::Kind::View;
  c.out.inputs = {&base};
  c.out.base_axes.clear();
  for (size_t j = 0; j < b.sizes.size(); ++j)
    c.out.base_axes.push_back(b.sizes[j] == 1 ? -1 : static_cast<int>(j));
  c.out.base_shifts = std::move(shifts);
  return true;
}

// Reads the base through the view's own strides and offset (the base must be
// in memory; fuse.cpp never fuses it into the view's kernel).
bool strided_view(RuleCtx& c, const ir::Node* base) {
  auto off = alias_offset(c.node, *base);
  if (!off) return false;
  c.out.kind = OpLowering::Kind::StridedView;
  c.out.inputs = {base};
  c.out.base_axes.clear();
  c.out.view_offset = *off;
  return true;
}

// narrow, select, x[...] with ints/slices/None/Ellipsis, diagonal, and the
// pieces of split/chunk/unbind (getitem of the tuple node): whatever the
// arguments, torch's meta op said the result is a view of the base.
Rule prev_getitem = nullptr;  // getitem's earlier rule (max/min values or indices)

bool alias_view(RuleCtx& c) {
  const ir::Arg* x = c.node.args.empty() ? c.arg(0, "input") : &c.node.args[0];
  const ir::Node* base = nullptr;
  if (x && x->kind == ir::Arg::Kind::Node && !x->node->meta && !x->node->args.empty()) {
    const ir::Arg& inner = x->node->args[0];  // a tuple of views (split) of its first input
    if (inner.kind == ir::Arg::Kind::Node) base = inner.node;
  } else if (x && x->kind == ir::Arg::Kind::Node) {
    base = x->node;
  }
  ir::Arg base_arg = ir::Arg::of_node(const_cast<ir::Node*>(base));
  bool ok = base && c.is_tensor(&base_arg) && c.type_of(&base_arg) == c.out_type();
  // NOTE: x[:, None] and the like are a remap, so a producer computed from its
  // coordinates (an arange) fuses through them instead of being stored first.
  if (auto axes = ok ? size_one_view_axes(c.node, *base) : std::nullopt) {
    c.out.kind = OpLowering::Kind::View;
    c.out.inputs = {base};
    c.out.base_axes = std::move(*axes);
    return true;
  }
  if (ok && slice_view(c, *base)) return true;
  ok = ok && strided_view(c, base);
  if (!ok && op_base_name(c.node) == "getitem" && !c.node.args.empty() &&
      c.node.args[0].kind == ir::Arg::Kind::Node && c.node.args[0].node->meta && tensor_index(c))
    return true;
  if (!ok && prev_getitem && op_base_name(c.node) == "getitem") return prev_getitem(c);
  return ok;
}

const ir::Node* base_of(RuleCtx& c) {
  const ir::Arg* x = c.arg(0, "input");
  if (!c.is_tensor(x) || c.type_of(x) != c.out_type()) return nullptr;
  c.out.kind = OpLowering::Kind::View;
  c.out.inputs = {x->node};
  return x->node;
}

// Dims given as varargs (x.permute(1, 0)) or one sequence (x.permute([1, 0])).
std::optional<std::vector<int64_t>> dims_from(RuleCtx& c, size_t first, const char* kw) {
  if (c.node.args.size() <= first + 1) return c.ints(c.arg(first, kw));
  std::vector<int64_t> out;
  for (size_t i = first; i < c.node.args.size(); ++i) {
    auto v = c.ints(&c.node.args[i]);
    if (!v || v->size() != 1) return std::nullopt;
    out.push_back((*v)[0]);
  }
  return out;
}

bool permute(RuleCtx& c) {
  const ir::Node* b = base_of(c);
  auto dims = dims_from(c, 1, "dims");
  size_t rank = c.node.meta->sizes.size();
  if (!b || !dims || dims->size() != rank) return false;
  c.out.base_axes.assign(rank, -2);
  for (size_t i = 0; i < rank; ++i) {
    int64_t d = (*dims)[i] < 0 ? (*dims)[i] + int64_t(rank) : (*dims)[i];
    if (d < 0 || d >= int64_t(rank) || c.out.base_axes[d] != -2) return false;
    c.out.base_axes[d] = static_cast<int>(i);
  }
  return c.all_kwargs_read();
}

bool transpose(RuleCtx& c) {
  const ir::Node* b = base_of(c);
  int64_t rank = static_cast<int64_t>(c.node.meta->sizes.size());
  if (!b) return false;
  int64_t d0 = 0, d1 = 1;
  if (op_base_name(c.node) != "t") {
    auto a0 = c.ints(c.arg(1, "dim0")), a1 = c.ints(c.arg(2, "dim1"));
    if (!a0 || !a1 || a0->size() != 1 || a1->size() != 1) return false;
    d0 = (*a0)[0] < 0 ? (*a0)[0] + rank : (*a0)[0];
    d1 = (*a1)[0] < 0 ? (*a1)[0] + rank : (*a1)[0];
  } else if (rank < 2) {
    d1 = 0;
  }
  if (rank == 0)
    d0 = d1 = 0;
  else if (d0 < 0 || d1 < 0 || d0 >= rank || d1 >= rank)
    return false;
  for (int64_t i = 0; i < rank; ++i) c.out.base_axes.push_back(static_cast<int>(i));
  if (rank > 0) std::swap(c.out.base_axes[d0], c.out.base_axes[d1]);
  return c.all_kwargs_read();
}

bool expand(RuleCtx& c) {
  const ir::Node* b = base_of(c);
  if (!b) return false;
  for (const char* kw : {"size", "other", "implicit"}) c.arg(99, kw);
  const auto& bs = b->meta->sizes;
  const auto& ns = c.node.meta->sizes;
  if (bs.size() > ns.size()) return false;
  size_t off = ns.size() - bs.size();
  for (size_t j = 0; j < bs.size(); ++j) {
    if (bs[j] != 1 && bs[j] != ns[j + off]) return false;
    c.out.base_axes.push_back(bs[j] == 1 ? -1 : static_cast<int>(j + off));
  }
  return c.all_kwargs_read();
}

}  // namespace

bool contiguous(const ir::TensorMeta& m) {
  int64_t expected = 1;
  for (size_t i = m.sizes.size(); i-- > 0;) {
    if (m.sizes[i] != 1 && m.strides[i] != expected) return false;
    expected *= m.sizes[i];
  }
  return true;
}

namespace {

// squeeze/unsqueeze/view/reshape/flatten/unflatten: the result's sizes say it
// all. Inserting or dropping size-1 axes is a remap; other reshapes of a
// contiguous base read the base through the view's own strides.
bool reshape(RuleCtx& c) {
  const ir::Node* b = base_of(c);
  if (!b) return false;
  for (const char* kw : {"dim", "shape", "size", "start_dim", "end_dim", "sizes", "other"})
    c.arg(99, kw);
  if (auto axes = size_one_remap(b->meta->sizes, c.node.meta->sizes)) {
    c.out.base_axes = std::move(*axes);
    return c.all_kwargs_read();
  }
  std::string name = op_base_name(c.node);
  if (name == "squeeze" || name == "unsqueeze") return false;
  if (!c.all_kwargs_read()) return false;
  if (contiguous(*b->meta) && contiguous(*c.node.meta)) {
    c.out.kind = OpLowering::Kind::StridedView;
    c.out.base_axes.clear();
    return true;
  }
  if (strided_view(c, b)) return true;  // a view of a non-contiguous base
  // torch copied (reshape/flatten of a layout no view can express): so do we.
  return name != "view" && name != "view_as" && copy_by_linear_index(c, b);
}

// Dropout with training=False returns its input itself: an identity remap,
// so eval-mode models fuse across it (GPT-2's embedding sum and first norm).
bool eval_dropout(RuleCtx& c) {
  const ir::Node* b = base_of(c);
  if (!b) return false;
  for (const char* kw : {"p", "training", "train", "inplace"}) c.arg(99, kw);
  if (!ir::is_eval_dropout(c.node)) return false;
  for (size_t j = 0; j < b->meta->sizes.size(); ++j)
    c.out.base_axes.push_back(b->meta->sizes[j] == 1 ? -1 : static_cast<int>(j));
  return c.all_kwargs_read();
}

}  // namespace

void add_view_rules(RuleTable& t) {
  t["permute"] = permute;
  for (const char* n : {"transpose", "swapaxes", "swapdims", "t"}) t[n] = transpose;
  for (const char* n : {"expand", "expand_as", "broadcast_to"}) t[n] = expand;
  for (const char* n :
       {"squeeze", "unsqueeze", "view", "reshape", "flatten", "unflatten", "view_as", "reshape_as"})
    t[n] = reshape;
  auto it = t.find("getitem");
  if (it != t.end() && it->second != alias_view) prev_getitem = it->second;
  for (const char* n : {"getitem", "narrow", "select", "diagonal"}) t[n] = alias_view;
  for (const char* n :
       {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"})
    t[n] = eval_dropout;
  // Tuple-valued (their nodes are never lowered): the pieces are getitem nodes,
  // lowered above; registered so the OpInfo parity suite covers them.
  for (const char* n : {"split", "split_with_sizes", "chunk", "unbind", "tensor_split"})
    t[n] = alias_view;
}

}  // namespace tl::passes
