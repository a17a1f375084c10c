// Instantiates a group's lowerings into one loop-IR kernel: each member's body
// is emitted at the axis map it is read through (memoised, so a value shared
// by several consumers is computed once), loads compose views and broadcasts
// into per-kernel-axis strides, and identical exprs are shared.
#include <cstring>
#include <map>
#include <sstream>
#include <tuple>

#include "core/errors.h"
#include "passes/dtype.h"
#include "passes/fuse.h"

namespace tl::passes {
namespace {

using ir::Expr;
using ir::ExprOp;
using ir::Node;
using ir::ScalarType;

ScalarType dtype(const Node* n) { return *scalar_type_of(n->meta->dtype.get()); }

class Emitter {
 public:
  Emitter(const Group& g, const Fusion& f, FusedKernel& out) : g_(g), f_(f), out_(out) {
    out_.kernel.shape = g.shape;
    out_.kernel.reduction_axes = g.nred;
  }

  int value(const Node* n, const AxisMap& map) {
    auto key = std::make_pair(n, map);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    int v = compute(n, map);
    memo_[key] = v;
    return v;
  }

  int cast(int v, ScalarType t) { return expr(v).type == t ? v : push(Expr{ExprOp::Cast, t, {v}}); }

  // A node's value as eager holds it: a float16/bfloat16 op computes in float32
  // and rounds its result, so a fused intermediate is rounded too (exp of a
  // half overflows to inf there, and x.half() * y differs from x * y).
  int as_stored(int v, const Node* n) {
    auto t = n->meta && n->meta->dtype ? scalar_type_of(n->meta->dtype.get()) : std::nullopt;
    if (!t || !(*t == ScalarType::F16 || *t == ScalarType::BF16) || expr(v).type != ScalarType::F32)
      return v;
    return cast(cast(v, *t), ScalarType::F32);
  }

  // The value to store as `t`: a value already rounded to `t` is stored as it is.
  int for_store(int v, ScalarType t) {
    const Expr& e = expr(v);
    if (e.op == ExprOp::Cast && e.type == ScalarType::F32 && expr(e.operands[0]).type == t)
      return e.operands[0];
    return cast(v, t);
  }

  // Axes shifted with a clamp (AxisMap::shift) are left out: shift_offset() adds them. A shift
  // that never clamps here (a slice's start) is a constant offset.
  ir::BufferView view(const Node* n, const std::vector<int64_t>& strides, const AxisMap& map) {
    ir::BufferView v{dtype(n), std::vector<int64_t>(g_.shape.size(), 0), 0};
    for (size_t j = 0; j < map.size(); ++j) {
      if (map[j] < 0 || clamps(map, j)) continue;
      v.strides[map[j]] += strides[j];
      v.offset += map.shift_of(j).offset * strides[j];
    }
    return v;
  }

 private:
  const Expr& expr(int i) const { return out_.kernel.exprs[i]; }

  int compute(const Node* n, const AxisMap& map) {
    auto git = f_.group_of.find(n);
    auto lit = f_.lowerings.find(n);
    bool inside = git != f_.group_of.end() && &f_.groups[git->second] == &g_;
    if (!inside || lit == f_.lowerings.end()) return load(n, n, map);
    const OpLowering& l = lit->second;
    std::vector<int> ids;
    switch (l.kind) {
      case OpLowering::Kind::StridedView:
        return load(l.inputs[0], n, map, l.view_offset);
      case OpLowering::Kind::View:
        return value(l.inputs[0], view_base_map(l, l.inputs[0]->meta->sizes, map));
      case OpLowering::Kind::Pointwise: {
        std::vector<bool> loaded(l.inputs.size(), false);
        for (const Expr& e : l.body)
          if (e.op == ExprOp::Load) loaded[e.buffer] = true;
        for (size_t i = 0; i < l.inputs.size(); ++i)
          ids.push_back(loaded[i] ? value(l.inputs[i], *operand_map(l, i, n->meta->sizes, map))
                                  : -1);
        return as_stored(instantiate(l, ids, false, n, map), n);
      }
      case OpLowering::Kind::Reduction: {
        const AxisMap& sm = g_.space_maps.at(n);
        bool trivial = true;
        for (int d : l.reduce_dims) trivial = trivial && l.space[d] == 1;
        for (size_t i = 0; i < l.inputs.size(); ++i)
          ids.push_back(value(l.inputs[i], *operand_map(l, i, l.space, sm)));
        return as_stored(instantiate(l, ids, trivial), n);
      }
    }
    TL_CHECK(false) << "unknown lowering kind";
  }

  // Reads `buffer`'s memory as laid out by `layout`'s TensorMeta (the buffer
  // itself, or a strided view of it), in the compute type.
  // A shifted map reads through a Gather at the clamped coordinates.
  int load(const Node* buffer, const Node* layout, const AxisMap& map, int64_t offset = 0) {
    int idx = input(buffer, layout, map, offset);
    int extra = shift_offset(layout->meta->strides, map);
    Expr e{extra < 0 ? ExprOp::Load : ExprOp::Gather, out_.kernel.inputs[idx].type};
    if (extra >= 0) e.operands = {extra};
    e.buffer = idx;
    return cast(push(e), compute_type(e.type));
  }

  int i64(int64_t v) {
    Expr e{ExprOp::Constant, ScalarType::I64};
    e.ivalue = v;
    return push(e);
  }
  int binary(ExprOp op, int a, int b) { return push(Expr{op, ScalarType::I64, {a, b}}); }

  // True when node axis j's shift under `map` clamps some point of the kernel's axis: its
  // coordinate is then computed (a Gather), else it is the index plus a constant.
  bool clamps(const AxisMap& map, size_t j) const {
    AxisShift s = map.shift_of(j);
    if (map[j] < 0 || s.bound == 0) return false;
    return s.offset < 0 || g_.shape[map[j]] - 1 + s.offset > s.bound - 1;
  }

  // Node axis j's coordinate under `map`: the kernel index (0 for a size-1
  // axis), shifted and clamped into [0, bound) where the map shifts it.
  int coordinate(const AxisMap& map, size_t j) {
    int a = map[j];
    if (a < 0) return i64(0);
    Expr e{ExprOp::Index, ScalarType::I64};
    e.ivalue = a;
    int v = push(e);
    AxisShift s = map.shift_of(j);
    if (s.bound == 0) return v;
    if (s.offset != 0) v = binary(ExprOp::Add, v, i64(s.offset));
    if (s.offset < 0) v = binary(ExprOp::Maximum, v, i64(0));
    if (g_.shape[a] - 1 + s.offset > s.bound - 1) v = binary(ExprOp::Minimum, v, i64(s.bound - 1));
    return v;
  }

  // The element offset of the shifted axes of `map` (strides: the layout's),
  // or -1 if none is shifted.
  int shift_offset(const std::vector<int64_t>& strides, const AxisMap& map) {
    int off = -1;
    for (size_t j = 0; j < map.size(); ++j) {
      if (!clamps(map, j) || strides[j] == 0) continue;
      int t = coordinate(map, j);
      if (strides[j] != 1) t = binary(ExprOp::Mul, t, i64(strides[j]));
      off = off < 0 ? t : binary(ExprOp::Add, off, t);
    }
    return off;
  }

  // The kernel input reading `buffer` through `layout`'s strides (+ `offset`).
  int input(const Node* buffer, const Node* layout, const AxisMap& map, int64_t offset) {
    ir::BufferView v = view(layout, layout->meta->strides, map);
    v.offset += offset;
    auto key = std::make_tuple(buffer, v.strides, v.offset);
    auto it = inputs_.find(key);
    int idx;
    if (it != inputs_.end()) {
      idx = it->second;
    } else {
      idx = static_cast<int>(out_.inputs.size());
      inputs_[key] = idx;
      out_.inputs.push_back(buffer);
      out_.kernel.inputs.push_back(v);
    }
    return idx;
  }

  // `n`/`map`: the Pointwise node and its result map (for Index and Gather).
  int instantiate(const OpLowering& l, const std::vector<int>& ids, bool trivial_reduce,
                  const Node* n = nullptr, const AxisMap& map = {}) {
    std::vector<int> local(l.body.size(), -1);
    for (size_t i = 0; i < l.body.size(); ++i) {
      Expr e = l.body[i];
      if (e.op == ExprOp::Load) {
        local[i] = ids[e.buffer];
        continue;
      }
      TL_CHECK(n || (e.op != ExprOp::Index && e.op != ExprOp::Gather))
          << "index/gather outside a pointwise lowering";
      if (e.op == ExprOp::Index) {
        local[i] = coordinate(map, static_cast<size_t>(e.ivalue));
        continue;
      }
      if (e.op == ExprOp::Gather) {
        const Node* src = l.inputs[e.buffer];
        auto m = operand_map(l, e.buffer, n->meta->sizes, map);
        TL_CHECK(m) << "gather of " << src->name << " has no axis map";
        int by = local[e.operands[0]], shift = shift_offset(src->meta->strides, *m);
        Expr g{ExprOp::Gather, dtype(src), {shift < 0 ? by : binary(ExprOp::Add, by, shift)}};
        g.buffer = input(src, src, *m, 0);
        local[i] = cast(push(g), e.type);
        continue;
      }
      for (int& o : e.operands) o = local[o];
      local[i] = trivial_reduce && ir::is_reduction(e.op) ? e.operands[0] : push(std::move(e));
    }
    return local[l.result];
  }

  // Appends an expr, or returns an identical earlier one.
  int push(Expr e) {
    uint64_t bits;
    std::memcpy(&bits, &e.value, sizeof bits);
    auto key = std::make_tuple(int(e.op), int(e.type), e.operands, e.buffer, bits, e.ivalue);
    auto it = cse_.find(key);
    if (it != cse_.end()) return it->second;
    out_.kernel.exprs.push_back(std::move(e));
    int id = static_cast<int>(out_.kernel.exprs.size()) - 1;
    cse_[key] = id;
    return id;
  }

  const Group& g_;
  const Fusion& f_;
  FusedKernel& out_;
  std::map<std::pair<const Node*, AxisMap>, int> memo_;
  std::map<std::tuple<const Node*, std::vector<int64_t>, int64_t>, int> inputs_;
  std::map<std::tuple<int, int, std::vector<int>, int, uint64_t, int64_t>, int> cse_;
};

bool used_outside(const Node* n, const Group& g, const Fusion& f, const GraphInfo& info) {
  for (const Node* u : info.users_of(n)) {
    auto it = f.group_of.find(u);
    if (it == f.group_of.end() || &f.groups[it->second] != &g) return true;
  }
  return false;
}

}  // namespace

FusedKernel build_kernel(const Group& g, const Fusion& f, const GraphInfo& info, int index) {
  FusedKernel out;
  out.members = g.members;
  Emitter em(g, f, out);
  for (const Node* m : g.members) {
    if (!f.lowerings.count(m) || !used_outside(m, g, f, info)) continue;
    const AxisMap& map = g.maps.at(m);
    int v = em.for_store(em.value(m, map), dtype(m));
    out.kernel.outputs.push_back({v, em.view(m, m->meta->strides, map)});
    out.outputs.push_back(m);
  }
  std::ostringstream name;  // NOTE: not string operator+, which trips GCC 12's -Wrestrict
  name << "k" << index << "_" << (out.outputs.empty() ? "empty" : out.outputs[0]->name);
  out.kernel.name = name.str();
  return out;
}

}  // namespace tl::passes
