// Reductions with two results: max/min(x, dim) -> (values, indices), aminmax -> (min, max),
// var_mean/std_mean -> (var or std, mean). The tuple node has no TensorMeta and is never
// lowered itself: capture reads its parts through getitem nodes, and each getitem is lowered
// as the part it selects, computed from the tuple op's own input, absorbing the tuple node
// (it is never run). fuse.cpp places all getitems of one tuple in one kernel, so both parts
// come out of one pass over the input and share their loads (and var_mean its mean).
#include <cmath>

#include "passes/dtype.h"
#include "passes/lower_reduction.h"

namespace tl::passes {
namespace {

using ir::ExprOp;
using ir::ScalarType;
using namespace reduction;

// Part `i` (0 or 1) of the tuple op read by `c` (its node: the tuple op with the part's meta).
using PartRule = bool (*)(RuleCtx& c, int i);

// max/min(input, dim, keepdim=False): the extreme and the index of its first occurrence
// (a NaN is the extreme and its first index is returned, as eager).
template <ExprOp Value, ExprOp Index>
bool max_min(RuleCtx& c, int i) {
  const ir::Arg* x = c.arg(0, "input");
  auto dim = c.ints(c.arg(1, "dim"));
  c.arg(2, "keepdim");
  if (!dim || dim->size() != 1 || !setup(c, x, dim)) return false;
  return c.finish(extreme(c, x, i == 0 ? Value : Index));
}

// aminmax(input, *, dim=None, keepdim=False) -> (min, max).
bool aminmax(RuleCtx& c, int i) {
  bool ok = true;
  const ir::Arg* x = c.arg(0, "input");
  auto dims = dims_arg(c, kKeywordOnly, "dim", &ok);
  c.arg(kKeywordOnly, "keepdim");
  if (!ok || (dims && dims->size() != 1) || !setup(c, x, dims)) return false;
  return c.finish(extreme(c, x, i == 0 ? ExprOp::ReduceMin : ExprOp::ReduceMax));
}

// var_mean/std_mean: var's argument forms; the mean is the variance's corrected mean.
template <bool Std>
bool var_mean(RuleCtx& c, int i) {
  const ir::Arg* x = c.arg(0, "input");
  std::optional<std::vector<int64_t>> dims;
  double correction = 1;
  ScalarType t = compute_type(c.out_type());
  if (!var_args(c, &dims, &correction) || !ir::is_floating(t) || !setup(c, x, dims)) return false;
  Moments m = moments(c, c.value(x, t), correction, t);
  if (i == 1) return c.finish(m.mean);
  int r = m.var;
  return c.finish(Std ? c.unary(ExprOp::Sqrt, r) : r);
}

using PartTable = std::unordered_map<std::string, PartRule>;

const PartTable& parts() {
  static const PartTable table = [] {
    PartTable t;
    t["max"] = max_min<ExprOp::ReduceMax, ExprOp::ReduceArgMax>;
    t["min"] = max_min<ExprOp::ReduceMin, ExprOp::ReduceArgMin>;
    t["aminmax"] = aminmax;
    t["var_mean"] = var_mean<false>, t["std_mean"] = var_mean<true>;
    return t;
  }();
  return table;
}

// The part getitem `u` reads (0 or 1), or -1 if u is not getitem(m, constant index).
int part_index(const ir::Node& u, const ir::Node& m) {
  if (op_base_name(u) != "getitem" || u.args.size() != 2 || !u.kwargs.empty()) return -1;
  const ir::Arg &t = u.args[0], &i = u.args[1];
  if (t.kind != ir::Arg::Kind::Node || t.node != &m || i.kind != ir::Arg::Kind::Const) return -1;
  PyObject* v = i.value.get();
  if (!PyLong_Check(v) || PyBool_Check(v)) return -1;
  long idx = PyLong_AsLong(v);
  if (idx == -1 && PyErr_Occurred()) PyErr_Clear();
  idx = idx < 0 ? idx + 2 : idx;
  return idx == 0 || idx == 1 ? static_cast<int>(idx) : -1;
}

// getitem(tuple op, 0 or 1). The tuple node is absorbed only when nothing but getitems
// reads it (fuse.cpp also drops the parts unless every getitem is lowered).
bool getitem_part(RuleCtx& c) {
  const ir::Arg* tup = c.arg(0);
  if (!tup || tup->kind != ir::Arg::Kind::Node || tup->node->meta) return false;
  const ir::Node& m = *tup->node;
  if (m.op != ir::OpKind::CallFunction && m.op != ir::OpKind::CallMethod) return false;
  auto rule = parts().find(op_base_name(m));
  int i = part_index(c.node, m);
  if (rule == parts().end() || i < 0) return false;
  for (const ir::Node* u : c.info.users_of(&m))
    if (part_index(*u, m) < 0) return false;
  ir::Node as_part = m;  // the tuple op seen with this part's meta (dtype, device, shape)
  as_part.meta = c.node.meta;
  RuleCtx pc(as_part, c.info, c.out);
  if (!rule->second(pc, i)) return false;
  c.out.absorbed = &m;
  return true;
}

}  // namespace

void add_tuple_rules(RuleTable& t) {
  t["getitem"] = getitem_part;
  // Tuple-valued (their nodes are never lowered; their getitems are, above): registered
  // under their own names so the OpInfo parity suite covers them.
  for (const char* n : {"aminmax", "var_mean", "std_mean"}) t[n] = getitem_part;
}

}  // namespace tl::passes
