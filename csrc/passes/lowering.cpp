#include "passes/lowering.h"

#include "core/errors.h"
#include "passes/dtype.h"

namespace tl::passes {

using ir::Expr;
using ir::ExprOp;
using ir::ScalarType;

namespace {

const RuleTable& rules() {
  static const RuleTable table = [] {
    RuleTable t;
    add_pointwise_rules(t);
    add_activation_rules(t);
    add_reduction_rules(t);
    add_view_rules(t);
    add_data_movement_rules(t);
    add_factory_rules(t);
    return t;
  }();
  return table;
}

int64_t numel(const ir::TensorMeta& m) {
  int64_t n = 1;
  for (int64_t s : m.sizes) n *= s;
  return n;
}

bool same_device(PyObject* a, PyObject* b) {
  if (a == b) return true;
  int eq = PyObject_RichCompareBool(a, b, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1;
}

}  // namespace

std::string op_base_name(const ir::Node& n) {
  if (n.op == ir::OpKind::CallMethod) return n.target_name;
  static const char* kPrefixes[] = {"torch.nn.functional.", "torch._C._nn.", "torch.special.",
                                    "torch._C._special.",   "torch.Tensor.", "operator.",
                                    "torch.functional.",    "torch."};
  for (const char* p : kPrefixes) {
    std::string prefix = p;
    if (n.target_name.rfind(prefix, 0) != 0) continue;
    std::string rest = n.target_name.substr(prefix.size());
    return rest.find('.') == std::string::npos ? rest : "";
  }
  return "";
}

RuleCtx::RuleCtx(const ir::Node& n, const GraphInfo& i, OpLowering& o)
    : node(n), info(i), out(o), kw_read_(n.kwargs.size(), false) {}

const ir::Arg* RuleCtx::arg(size_t pos, const char* name) {
  if (pos < node.args.size()) return &node.args[pos];
  if (!name) return nullptr;
  for (size_t i = 0; i < node.kwargs.size(); ++i)
    if (node.kwargs[i].first == name) {
      kw_read_[i] = true;
      return &node.kwargs[i].second;
    }
  return nullptr;
}

bool RuleCtx::is_tensor(const ir::Arg* a) const {
  if (!a || a->kind != ir::Arg::Kind::Node || !a->node->meta) return false;
  const ir::TensorMeta& m = *a->node->meta;
  return scalar_type_of(m.dtype.get()) && numel(m) > 0 &&
         same_device(m.device.get(), node.meta->device.get());
}

std::optional<double> RuleCtx::number(const ir::Arg* a) const {
  if (!a || a->kind != ir::Arg::Kind::Const) return std::nullopt;
  PyObject* v = a->value.get();
  if (PyBool_Check(v)) return v == Py_True ? 1.0 : 0.0;
  if (PyLong_Check(v)) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return std::nullopt;
    }
    // NOTE: past 2**53 a double rounds the int, and eager converts the exact value to the op's
    // dtype (`int32_tensor == 2**53 + 1` compares with 1, its low 32 bits): left to torch.
    const long long kExactInDouble = 1LL << 53;
    if (x > kExactInDouble || x < -kExactInDouble) return std::nullopt;
    return static_cast<double>(x);
  }
  if (PyFloat_Check(v)) return PyFloat_AS_DOUBLE(v);
  return std::nullopt;
}

std::optional<std::vector<int64_t>> RuleCtx::ints(const ir::Arg* a) const {
  if (!a) return std::nullopt;
  std::vector<int64_t> out;
  if (a->kind == ir::Arg::Kind::Tuple || a->kind == ir::Arg::Kind::List) {
    for (const auto& it : a->items) {
      if (it.kind != ir::Arg::Kind::Const || !PyLong_Check(it.value.get())) return std::nullopt;
      out.push_back(PyLong_AsLongLong(it.value.get()));
    }
    return out;
  }
  PyObject* v = a->kind == ir::Arg::Kind::Const ? a->value.get() : nullptr;
  if (v && (PyTuple_Check(v) || PyList_Check(v))) {  // a constant torch.Size or tuple
    PyRef seq = PyRef::steal(PySequence_Fast(v, "ints"));
    for (Py_ssize_t i = 0; seq && i < PySequence_Fast_GET_SIZE(seq.get()); ++i) {
      PyObject* it = PySequence_Fast_GET_ITEM(seq.get(), i);
      if (!PyLong_Check(it) || PyBool_Check(it)) return std::nullopt;
      out.push_back(PyLong_AsLongLong(it));
    }
    return out;
  }
  if (a->kind == ir::Arg::Kind::Const && PyLong_Check(a->value.get()) &&
      !PyBool_Check(a->value.get()))
    return std::vector<int64_t>{PyLong_AsLongLong(a->value.get())};
  return std::nullopt;
}

std::optional<std::string> RuleCtx::str(const ir::Arg* a) const {
  if (!a || a->kind != ir::Arg::Kind::Const || !PyUnicode_Check(a->value.get()))
    return std::nullopt;
  const char* s = PyUnicode_AsUTF8(a->value.get());
  if (!s) {
    PyErr_Clear();
    return std::nullopt;
  }
  return std::string(s);
}

bool RuleCtx::all_kwargs_read() const {
  for (bool r : kw_read_)
    if (!r) return false;
  return true;
}

ScalarType RuleCtx::out_type() const { return *scalar_type_of(node.meta->dtype.get()); }

ScalarType RuleCtx::type_of(const ir::Arg* a) const {
  if (is_tensor(a)) return *scalar_type_of(a->node->meta->dtype.get());
  PyObject* v = a->value.get();
  return PyBool_Check(v) ? ScalarType::Bool : PyLong_Check(v) ? ScalarType::I64 : ScalarType::F64;
}

int RuleCtx::push(Expr e) {
  out.body.push_back(std::move(e));
  return static_cast<int>(out.body.size()) - 1;
}

int RuleCtx::value(const ir::Arg* a, ScalarType t) {
  if (!is_tensor(a)) {
    std::optional<double> v = number(a);
    failed_ = failed_ || !v;
    return constant(v.value_or(0), t);
  }
  int idx = 0;
  while (idx < static_cast<int>(out.inputs.size()) && out.inputs[idx] != a->node) ++idx;
  if (idx == static_cast<int>(out.inputs.size())) out.inputs.push_back(a->node);
  Expr e;
  e.op = ExprOp::Load;
  e.buffer = idx;
  e.type = compute_type(*scalar_type_of(a->node->meta->dtype.get()));
  return cast(push(e), t);
}

int RuleCtx::constant(double v, ScalarType t) {
  Expr e;
  e.op = ExprOp::Constant;
  e.type = t;
  if (ir::is_floating(t))
    e.value = v;
  else
    e.ivalue = t == ScalarType::Bool ? (v != 0) : static_cast<int64_t>(v);
  return push(e);
}

int RuleCtx::count(int64_t n, ScalarType t) {
  if (n < 2 || !ir::is_floating(t)) return constant(static_cast<double>(n), t);
  Expr e;
  e.op = ExprOp::Constant;
  e.type = ScalarType::I64;
  e.ivalue = n;
  return cast(push(e), t);
}

int RuleCtx::unary(ExprOp op, int a) {
  bool pred =
      op == ExprOp::IsNan || op == ExprOp::IsInf || op == ExprOp::IsFinite || op == ExprOp::Not;
  return push(Expr{op, pred ? ScalarType::Bool : type(a), {a}});
}

int RuleCtx::binary(ExprOp op, int a, int b) {
  bool pred = ir::is_comparison(op) || op == ExprOp::And || op == ExprOp::Or || op == ExprOp::Xor;
  return push(Expr{op, pred ? ScalarType::Bool : type(a), {a, b}});
}

int RuleCtx::where(int c, int a, int b) { return push(Expr{ExprOp::Where, type(a), {c, a, b}}); }

int RuleCtx::cast(int a, ScalarType t) {
  return type(a) == t ? a : push(Expr{ExprOp::Cast, t, {a}});
}

int RuleCtx::reduce(ExprOp op, int a) { return push(Expr{op, type(a), {a}}); }

int RuleCtx::index(int axis) {
  Expr e{ExprOp::Index, ScalarType::I64};
  e.ivalue = axis;
  return push(e);
}

int RuleCtx::gather(const ir::Node* n, std::vector<int> axes, int extra) {
  // NOTE: always a new input slot, so its axes never apply to a Load of n.
  out.inputs.push_back(n);
  out.input_axes.resize(out.inputs.size());
  out.input_axes.back() = std::move(axes);
  Expr e{ExprOp::Gather, compute_type(*scalar_type_of(n->meta->dtype.get())), {extra}};
  e.buffer = static_cast<int>(out.inputs.size()) - 1;
  return push(e);
}

bool gathers(const OpLowering& l, const ir::Node* n) {
  for (const Expr& e : l.body)
    if (e.op == ExprOp::Gather && l.inputs[e.buffer] == n) return true;
  return false;
}

bool RuleCtx::finish(int result) {
  out.result = result;
  return !failed_ && all_kwargs_read();
}

std::optional<OpLowering> lower_node(const ir::Node& n, const GraphInfo& info) {
  if (n.op != ir::OpKind::CallFunction && n.op != ir::OpKind::CallMethod) return std::nullopt;
  if (!n.meta || !scalar_type_of(n.meta->dtype.get()) || numel(*n.meta) == 0) return std::nullopt;
  if (is_barrier(n)) return std::nullopt;
  if (info.off_device.count(&n)) return std::nullopt;
  for (const ir::Node* in : node_inputs(n))
    if (info.off_device.count(in)) return std::nullopt;
  auto it = rules().find(op_base_name(n));
  if (it == rules().end()) return std::nullopt;
  OpLowering out;
  RuleCtx ctx(n, info, out);
  if (!it->second(ctx)) return std::nullopt;
  // A Python error left by an argument probe means the rule saw garbage: extern.
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return std::nullopt;
  }
  return out;
}

}  // namespace tl::passes
