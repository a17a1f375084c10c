// Truth, iteration, operators and indexing over symbolic values.
#include <algorithm>
#include <unordered_map>

#include "capture/bool_list_index.h"
#include "capture/constant_fold.h"
#include "capture/graph_break.h"
#include "capture/py_helpers.h"
#include "capture/scalar_inputs.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "capture/user_exception.h"
#include "core/errors.h"

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

// ---------------------------------------------------------------- truth, iteration

Py_ssize_t detail::checked_len(const ValuePtr& r) {
  if (!r->is_const()) graph_break("custom_dunder", "__len__ returned a " + r->type_name());
  Py_ssize_t n = PyNumber_AsSsize_t(r->obj.get(), PyExc_OverflowError);
  if (n == -1 && PyErr_Occurred()) raise_current_error("__len__");
  if (n < 0) raise_user(PyExc_ValueError, "__len__() should return >= 0");
  return n;
}

bool Tracer::truth(const ValuePtr& v) {
  switch (v->kind) {
    case VKind::Const: {
      ctx_.specialise_scalars(v);  // NOTE: `s or 1.0` reads the number (JUMP_IF_TRUE_OR_POP)
      int r = PyObject_IsTrue(v->obj.get());
      if (r < 0) raise_current_error("truth test raised");
      return r;
    }
    case VKind::Tensor:
      if (auto r = folded_call(ctx_, v, "__bool__")) return (*r)->obj.get() == Py_True;
      graph_break("data_dependent_branch",
                  "branching on a tensor's value (if/while/and/or/not on a Tensor) depends on "
                  "data that is unknown while tracing");
    case VKind::Tuple:
    case VKind::List:
    case VKind::Dict:
    case VKind::Deque:
      return !v->items.empty();
    case VKind::Module: {
      int r = PyObject_IsTrue(v->obj.get());
      if (r < 0) throw PythonError();
      return r;
    }
    case VKind::Set:
      return PySet_GET_SIZE(v->obj.get()) > 0;
    case VKind::DictView:
      return !v->self->keys.empty();
    case VKind::Object: {
      if (auto r = call_dunder(v, "__bool__", {})) {
        if (!(*r)->is_const() || !PyBool_Check((*r)->obj.get()))
          raise_user(PyExc_TypeError, "__bool__ should return bool, returned " + (*r)->type_name());
        return (*r)->obj.get() == Py_True;
      }
      if (auto r = call_dunder(v, "__len__", {})) return checked_len(*r) != 0;
      if (v->mapping) return !v->mapping->items.empty();
      PyTypeObject* t = Py_TYPE(v->obj.get());
      if ((t->tp_as_number && t->tp_as_number->nb_bool) ||
          (t->tp_as_mapping && t->tp_as_mapping->mp_length) ||
          (t->tp_as_sequence && t->tp_as_sequence->sq_length))
        graph_break("custom_dunder", std::string("truth value of a ") + t->tp_name);
      return true;
    }
    default:
      return true;
  }
}

std::vector<ValuePtr> Tracer::iterate(const ValuePtr& v) {
  switch (v->kind) {
    case VKind::Tuple:
    case VKind::List:
    case VKind::Deque:
      return v->items;
    case VKind::Dict: {
      std::vector<ValuePtr> keys;
      for (auto& k : v->keys) keys.push_back(Value::constant(k));
      return keys;
    }
    case VKind::Iterator: {
      std::vector<ValuePtr> rest;
      while (ValuePtr item = iter_next(v)) rest.push_back(std::move(item));
      return rest;
    }
    case VKind::DictView:
      return dict_view_items(v);
    case VKind::Tensor: {
      ValuePtr parts = ctx_.call_op(nullptr, "unbind", {v}, {});
      return parts->items;
    }
    case VKind::Const: {
      PyObject* o = v->obj.get();
      if (!(PyTuple_Check(o) || PyList_Check(o) || PyRange_Check(o) || PyUnicode_Check(o) ||
            PyDict_Check(o) || PyFrozenSet_Check(o) || PyAnySet_Check(o) ||
            Py_TYPE(o) == &PyDictKeys_Type || Py_TYPE(o) == &PyDictValues_Type ||
            Py_TYPE(o) == &PyDictItems_Type || is_enum_class(o)))
        graph_break("unsupported_iteration", std::string("iteration over ") + Py_TYPE(o)->tp_name);
      PyRef list = PyRef::steal(PySequence_List(o));
      if (!list) throw PythonError();
      std::vector<ValuePtr> out;
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list.get()); ++i)
        out.push_back(ctx_.from_result(PyList_GET_ITEM(list.get(), i)));
      return out;
    }
    case VKind::Set: {
      if (v->flag) graph_break("set_of_objects", "iterating a set of modules or objects");
      PyRef list = PyRef::steal(PySequence_List(v->obj.get()));
      if (!list) throw PythonError();
      std::vector<ValuePtr> out;
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list.get()); ++i)
        out.push_back(ctx_.from_result(PyList_GET_ITEM(list.get(), i)));
      return out;
    }
    case VKind::Object: {
      ValuePtr it = object_iter(v);
      std::vector<ValuePtr> out;
      while (ValuePtr item = iter_next(it)) out.push_back(std::move(item));
      return out;
    }
    case VKind::Module: {
      if (ValuePtr children = sliced_children(v)) return children->items;
      PyObject* m = v->obj.get();
      PyRef modules = PyRef::steal(PyObject_GetAttrString(m, "_modules"));
      if (!modules) throw PythonError();
      if (v->source) ctx_.guard_module_registry(v, "_modules", modules.get());
      PyRef params = PyRef::steal(PyObject_GetAttrString(m, "_parameters"));
      if (!params || !PyDict_Check(params.get())) {
        clear_expected_error();
        params = PyRef();
      } else if (v->source) {
        ctx_.guard_module_registry(v, "_parameters", params.get());
      }
      PyRef list = PyRef::steal(PySequence_List(m));
      if (!list)
        graph_break("unsupported_iteration", "iteration over module raised: " + error_text());
      std::vector<ValuePtr> out;
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list.get()); ++i) {
        PyObject* item = PyList_GET_ITEM(list.get(), i);
        ir::SourcePtr src;
        PyObject *k, *val;
        Py_ssize_t pos = 0;
        while (v->source && PyDict_Next(modules.get(), &pos, &k, &val)) {
          if (val == item) {
            src = ir::Source::item(ir::Source::attr(v->source, "_modules"), PyRef::borrow(k));
            break;
          }
        }
        // A ParameterList's items are its parameters (registered under "0", "1", ...).
        if (v->source && !src && params) {
          pos = 0;
          while (PyDict_Next(params.get(), &pos, &k, &val)) {
            if (val == item) {
              src = ir::Source::item(ir::Source::attr(v->source, "_parameters"), PyRef::borrow(k));
              break;
            }
          }
        }
        out.push_back(ctx_.wrap(item, src, src != nullptr));
      }
      return out;
    }
    default:
      graph_break("unsupported_iteration", "iteration over a " + v->type_name());
  }
}

// ---------------------------------------------------------------- operators

namespace {

// 'l' for a list, 't' for a tuple (a namedtuple, a torch.Size), 0 for anything else: + and *
// on sequences keep to their family.
char sequence_family(const ValuePtr& v) {
  if (v->kind == VKind::List || (v->is_const() && PyList_Check(v->obj.get()))) return 'l';
  if (v->kind == VKind::Tuple || (v->is_const() && PyTuple_Check(v->obj.get()))) return 't';
  return 0;
}

bool is_torch_size(const ValuePtr& v) {
  PyObject* size = torch_api().size_type.get();
  return v->named_type.get() == size ||
         (v->is_const() && reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get())) == size);
}

// An int (or bool) a sequence can be repeated by.
bool plain_count(const ValuePtr& v) { return v->is_const() && PyLong_Check(v->obj.get()); }

}  // namespace

namespace {
// An object from outside that is an int or float subclass (an IntEnum member), pinned by
// identity, as the plain number it is; else null.
ValuePtr pinned_number(CaptureContext& ctx, const ValuePtr& v) {
  PyObject* o = v->obj.get();
  if (v->kind != VKind::Object || !o || v->attrs || !v->source || PyBool_Check(o) ||
      !(PyLong_Check(o) || PyFloat_Check(o)))
    return nullptr;
  // NOTE: a comparison of its own in Python would decide otherwise.
  if (Py_TYPE(o)->tp_richcompare !=
      (PyLong_Check(o) ? PyLong_Type.tp_richcompare : PyFloat_Type.tp_richcompare))
    return nullptr;
  ctx.guards().add_id_match(v->source, o);
  PyRef plain = PyLong_Check(o) ? PyRef::steal(PyNumber_Index(o))
                                : PyRef::steal(PyFloat_FromDouble(PyFloat_AsDouble(o)));
  if (!plain) throw PythonError();
  return Value::constant(plain);
}
}  // namespace

ValuePtr Tracer::binary_op(PyObject* op, const ValuePtr& a_in, const ValuePtr& b_in) {
  if (ValuePtr r = user_binary_op(op, a_in, b_in)) return r;
  ValuePtr a = a_in, b = b_in;
  if (a->is_tensor() || b->is_tensor()) {
    // An IntEnum/IntFlag member (an int subclass, pinned by identity) meets a tensor as the
    // plain number it is.
    for (ValuePtr* v : {&a, &b})
      if (ValuePtr n = pinned_number(ctx_, *v)) *v = n;
    if (!(a->is_tensor() || a->is_const() || a->is_sequence()) ||
        !(b->is_tensor() || b->is_const() || b->is_sequence()))
      graph_break("unsupported_operand",
                  "operator on a tensor and a " + (a->is_tensor() ? b : a)->type_name());
    return ctx_.call_op(op, "", {a, b}, {});
  }
  std::string name = attr_str(op, "__name__");
  if (a->is_const() && b->is_const()) {
    // NOTE: Python arithmetic on a scalar input reads its number (capture/scalar_inputs.h),
    // unless the graph can compute it as CPython does.
    if (ctx_.any_scalar)
      if (ValuePtr r = scalar_arith(op, {a, b})) return r;
    ctx_.specialise_scalars(a);
    ctx_.specialise_scalars(b);
    if (ValuePtr r = sym_arith(name, a, b)) return r;
    return call_pure(ctx_, op, {a, b}, {});
  }
  // NOTE: a constant tuple or list counts: `(-1,) + x.shape[1:]` keeps x's sizes symbolic.
  auto sequence = [](const ValuePtr& v) {
    return v->is_sequence() ||
           (v->is_const() && (PyTuple_Check(v->obj.get()) || PyList_Check(v->obj.get())));
  };
  if (!((name == "add" || name == "iadd") && sequence(a) && sequence(b))) {
    ctx_.specialise(a);
    ctx_.specialise(b);
  }
  if (a->kind == VKind::Set && name.size() > 1 && name[0] == 'i') {  // s |= t mutates s
    PyRef cb = const_tuple(b);
    if (!cb)
      graph_break("set_of_objects", "operator " + name + " on a set and a " + b->type_name());
    call_pure(ctx_, op, {Value::constant(a->obj), Value::constant(cb)}, {});
    return a;
  }
  if (a->kind == VKind::Dict && (name == "ior" || (name == "or_" && b->kind == VKind::Dict))) {
    // NOTE: `d |= other` updates d itself (every name of it sees the change) and takes what
    // dict.update takes; `d | other` is a new dict. Folding them on copies of constants lost
    // the update of a dict argument.
    ValuePtr target = a;
    if (name == "or_") {
      target = Value::of_kind(VKind::Dict);
      target->keys = a->keys;
      target->items = a->items;
    }
    std::vector<ValuePtr> args{b};
    KwArgs kwargs;
    call_method_on(target, "update", args, kwargs);
    return target;
  }
  std::vector<ValuePtr> ia, ib;
  const char fa = sequence_family(a), fb = sequence_family(b);
  // NOTE: `list += iterable` extends the list in place; other concatenations need two
  // sequences of one family (list + tuple raises TypeError, left to the constant path).
  const bool extends = name == "iadd" && fa == 'l' && fb;
  if ((name == "add" || name == "iadd") && fa && (fa == fb || extends) && as_items(a, ia) &&
      as_items(b, ib)) {
    if (name == "iadd" && fa == 'l') {
      if (a->kind != VKind::List)
        graph_break("unsupported_side_effect", "+= on a list constant (it changes in place)");
      a->items.insert(a->items.end(), ib.begin(), ib.end());
      mark_mutated(a);
      return a;
    }
    ia.insert(ia.end(), ib.begin(), ib.end());
    if (fa == 'l') return Value::list(std::move(ia));
    ValuePtr t = Value::tuple(std::move(ia));
    // NOTE: x.size()[:-1] + (h, d) and (n,) + x.shape are torch.Sizes.
    if (is_torch_size(a) || is_torch_size(b)) t->named_type = torch_api().size_type;
    return t;
  }
  if (name == "mul" || name == "imul") {
    // seq * n and n * seq; `list *= n` repeats the list in place.
    const bool seq_first = fa && plain_count(b);
    const ValuePtr* seq = seq_first ? &a : (name == "mul" && fb && plain_count(a)) ? &b : nullptr;
    if (seq && as_items(*seq, ia)) {
      long n = PyLong_AsLong((seq_first ? b : a)->obj.get());
      if (n == -1 && PyErr_Occurred()) throw PythonError();
      if (n > 0 && ia.size() * static_cast<size_t>(n) > (1u << 20))
        graph_break("unsupported_operand", "repeating a sequence to over a million items");
      std::vector<ValuePtr> out;
      for (long i = 0; i < n; ++i) out.insert(out.end(), ia.begin(), ia.end());
      if (sequence_family(*seq) == 'l') {
        if (name == "imul") {
          if (a->kind != VKind::List)
            graph_break("unsupported_side_effect", "*= on a list constant (it changes in place)");
          a->items = std::move(out);
          mark_mutated(a);
          return a;
        }
        return Value::list(std::move(out));
      }
      ValuePtr t = Value::tuple(std::move(out));
      if (is_torch_size(*seq)) t->named_type = torch_api().size_type;
      return t;
    }
  }
  PyRef ca = const_tuple(a), cb = const_tuple(b);
  if (ca && cb) return call_pure(ctx_, op, {Value::constant(ca), Value::constant(cb)}, {});
  graph_break("unsupported_operand",
              "operator " + name + " on " + a->type_name() + " and " + b->type_name());
}

namespace {

bool plain_int(const ValuePtr& v) {
  return v->is_const() && PyLong_Check(v->obj.get()) && !PyBool_Check(v->obj.get());
}

ir::SymExprPtr expr_of(const ValuePtr& v) {
  return v->sym ? v->sym : ir::sym_int(PyLong_AsLongLong(v->obj.get()));
}

}  // namespace

// `a op b` with a float result and at least one operand computed from sizes (`d ** -0.5`,
// `1 / math.sqrt(d)`, `t / 2`): the value CPython gives, carrying its float expression. Null
// for anything else.
ValuePtr float_sym_arith(const std::string& name, const ValuePtr& a, const ValuePtr& b) {
  if (!(a->sym || b->sym || a->fsym || b->fsym)) return nullptr;
  ir::SymFloatPtr fa = float_expr(a), fb = float_expr(b);
  if (!fa || !fb) return nullptr;
  static const std::pair<const char*, ir::FloatOp> ops[] = {{"add", ir::FloatOp::Add},
                                                            {"sub", ir::FloatOp::Sub},
                                                            {"mul", ir::FloatOp::Mul},
                                                            {"truediv", ir::FloatOp::Div},
                                                            {"pow", ir::FloatOp::Pow}};
  const ir::FloatOp* op = nullptr;
  for (const auto& [n, o] : ops)
    if (name == n) op = &o;
  if (!op) return nullptr;
  PyObject *x = a->obj.get(), *y = b->obj.get();
  PyRef r = PyRef::steal(*op == ir::FloatOp::Add   ? PyNumber_Add(x, y)
                         : *op == ir::FloatOp::Sub ? PyNumber_Subtract(x, y)
                         : *op == ir::FloatOp::Mul ? PyNumber_Multiply(x, y)
                         : *op == ir::FloatOp::Div ? PyNumber_TrueDivide(x, y)
                                                   : PyNumber_Power(x, y, Py_None));
  // NOTE: an error (1 / 0) is raised again by call_pure, as CPython raises it.
  if (!r) {
    PyErr_Clear();
    return nullptr;
  }
  // NOTE: only float results: int results are the int path's (`t * 2`, `t ** 2`), a complex
  // one (`(-t) ** 0.5`) is no float.
  if (!PyFloat_CheckExact(r.get())) return nullptr;
  ValuePtr v = Value::constant(r);
  v->fsym = ir::sym_float_binary(*op, fa, fb);
  return v;
}

ValuePtr Tracer::sym_arith(const std::string& op, const ValuePtr& a, const ValuePtr& b) {
  std::string name = op.size() > 1 && op[0] == 'i' && op != "invert" ? op.substr(1) : op;
  if (ValuePtr f = float_sym_arith(name, a, b)) return f;
  if (!(a->sym || b->sym) || !plain_int(a) || !plain_int(b)) return nullptr;
  ir::SymExprPtr ea = expr_of(a), eb = expr_of(b), e;
  PyRef r;
  if (name == "add") {
    e = ir::sym_add(ea, eb);
    r = PyRef::steal(PyNumber_Add(a->obj.get(), b->obj.get()));
  } else if (name == "sub") {
    e = ir::sym_add(ea, ir::sym_mul(ir::sym_int(-1), eb));
    r = PyRef::steal(PyNumber_Subtract(a->obj.get(), b->obj.get()));
  } else if (name == "mul") {
    e = ir::sym_mul(ea, eb);
    r = PyRef::steal(PyNumber_Multiply(a->obj.get(), b->obj.get()));
  } else if ((name == "floordiv" || name == "mod") && PyObject_IsTrue(b->obj.get())) {
    // NOTE: a divisor that is zero here raises below, in call_pure, as CPython does.
    e = name == "mod" ? ir::sym_mod(ea, eb) : ir::sym_floordiv(ea, eb);
    r = PyRef::steal(name == "mod" ? PyNumber_Remainder(a->obj.get(), b->obj.get())
                                   : PyNumber_FloorDivide(a->obj.get(), b->obj.get()));
  } else {
    return nullptr;
  }
  if (!r) throw PythonError();
  ValuePtr v = Value::constant(r);
  if (!e->constant()) v->sym = e;
  return v;
}

ValuePtr Tracer::unary_op(PyObject* op, const ValuePtr& a) {
  if (a->is_tensor()) return ctx_.call_op(op, "", {a}, {});
  if (a->sym && plain_int(a) && attr_str(op, "__name__") == "neg") {
    ValuePtr v = Value::constant(PyRef::steal(PyNumber_Negative(a->obj.get())));
    if (!v->obj) throw PythonError();
    v->sym = ir::sym_mul(ir::sym_int(-1), a->sym);
    return v;
  }
  if (a->is_const() && ctx_.any_scalar)
    if (ValuePtr r = scalar_arith(op, {a})) return r;  // `-s` (capture/scalar_inputs.h)
  if (a->is_const()) return call_pure(ctx_, op, {a}, {});
  graph_break("unsupported_operand", "unary operator on a " + a->type_name());
}

namespace {
// A Python function `type(v).<name>` (borrowed), or null (absent, or a C slot).
PyObject* python_dunder(const ValuePtr& v, const char* name) {
  if (v->kind != VKind::Object || !v->obj) return nullptr;
  PyRef n = PyRef::steal(PyUnicode_FromString(name));
  if (!n) throw PythonError();
  PyObject* fn = _PyType_Lookup(Py_TYPE(v->obj.get()), n.get());
  return fn && PyFunction_Check(fn) ? fn : nullptr;
}

bool not_implemented(const ValuePtr& r) {
  return r->is_const() && r->obj.get() == Py_NotImplemented;
}
}  // namespace

ValuePtr Tracer::compare(int op, const ValuePtr& a, const ValuePtr& b) {
  static const char* names[] = {"lt", "le", "eq", "ne", "gt", "ge"};
  TL_CHECK(op >= 0 && op < 6) << "bad comparison " << op;
  PyObject* fn = operator_fn(names[op]);
  if (a->is_tensor() || b->is_tensor()) {
    bool a_plain = a->is_tensor() || a->is_const(), b_plain = b->is_tensor() || b->is_const();
    if ((op == 2 || op == 3) && (!a_plain || !b_plain)) {
      // Tensor == module/object: Python falls back to identity.
      return const_bool(op == 3);
    }
    return ctx_.call_op(fn, "", {a, b}, {});
  }
  ctx_.specialise_scalars(a);  // NOTE: a decision in Python (capture/scalar_inputs.h)
  ctx_.specialise_scalars(b);
  if ((a->sym || b->sym) && plain_int(a) && plain_int(b)) {
    // NOTE: a decision on sizes: the entry holds where it comes out the same (`t > 16`).
    int r = PyObject_RichCompareBool(a->obj.get(), b->obj.get(), op);
    if (r < 0) throw PythonError();
    ctx_.relate(a, op, b, r == 1);
    return const_bool(r == 1);
  }
  ctx_.specialise(a);
  ctx_.specialise(b);
  PyRef ca = const_tuple(a), cb = const_tuple(b);
  if (ca && cb) return call_pure(ctx_, fn, {Value::constant(ca), Value::constant(cb)}, {});
  auto custom_eq = [](const ValuePtr& v) {
    return v->kind == VKind::Object &&
           Py_TYPE(v->obj.get())->tp_richcompare != PyBaseObject_Type.tp_richcompare;
  };
  if ((op == 2 || op == 3) && a->is_const() && custom_eq(b)) return custom_equality(op == 2, a, b);
  if ((op == 2 || op == 3) && a->is_const() && b->kind == VKind::Object &&
      (!PyType_HasFeature(Py_TYPE(a->obj.get()), Py_TPFLAGS_HEAPTYPE) ||
       Py_TYPE(a->obj.get())->tp_richcompare == PyBaseObject_Type.tp_richcompare)) {
    // Neither side compares otherwise (a builtin constant, an Enum member): identity decides.
    bool same = a->obj.get() == b->obj.get();
    return const_bool(op == 2 ? same : !same);
  }
  if ((op == 2 || op == 3) && (a->kind == VKind::Module || a->kind == VKind::Object) &&
      (b->kind == VKind::Module || b->kind == VKind::Object || b->is_const())) {
    bool same = a->obj.get() == b->obj.get();
    if (a->kind == VKind::Object &&
        Py_TYPE(a->obj.get())->tp_richcompare != PyBaseObject_Type.tp_richcompare)
      return custom_equality(op == 2, a, b);
    return const_bool(op == 2 ? same : !same);
  }
  if (op != 2 && op != 3) {
    // A class's own __lt__/__gt__/... in Python, then the other side's reflected one.
    static const char* forward[] = {"__lt__", "__le__", "", "", "__gt__", "__ge__"};
    static const char* reflected[] = {"__gt__", "__ge__", "", "", "__lt__", "__le__"};
    // NOTE: objects of two classes (a subclass's reflected method goes first) and C-level
    // comparisons of the other side are left to the break below.
    PyObject* fa = python_dunder(a, forward[op]);
    PyObject* fb = python_dunder(b, reflected[op]);
    auto declines = [](const ValuePtr& v, PyObject* own) {  // its own method is NotImplemented
      if (v->kind == VKind::Object)
        return own || Py_TYPE(v->obj.get())->tp_richcompare == PyBaseObject_Type.tp_richcompare;
      return v->is_const() && !PyType_HasFeature(Py_TYPE(v->obj.get()), Py_TPFLAGS_HEAPTYPE);
    };
    const bool same_class = !(a->kind == VKind::Object && b->kind == VKind::Object &&
                              Py_TYPE(a->obj.get()) != Py_TYPE(b->obj.get()));
    if ((fa || fb) && same_class && (a->kind == VKind::Object || b->kind == VKind::Object) &&
        declines(a, fa) && (b->kind == VKind::Object || b->is_const())) {
      if (fa) {
        ValuePtr r = inline_function(fa, nullptr, nullptr, {a, b}, {});
        if (!not_implemented(r)) return r;
      }
      if (fb) {
        ValuePtr r = inline_function(fb, nullptr, nullptr, {b, a}, {});
        if (!not_implemented(r)) return r;
      }
    }
  }
  if (op != 2 && op != 3) {  // `Level.LOW < Level.HIGH` of an IntEnum compares the numbers
    ValuePtr na = a->is_const() ? a : pinned_number(ctx_, a);
    ValuePtr nb = b->is_const() ? b : pinned_number(ctx_, b);
    if (na && nb && (na != a || nb != b)) return compare(op, na, nb);
  }
  graph_break("unsupported_operand", std::string("comparison ") + names[op] + " of " +
                                         a->type_name() + " and " + b->type_name());
}

// `a <op> b` where a user object's class defines the operator in Python (a tensor wrapper's
// __add__, __rmul__ of a number-like class): its dunders are inlined in CPython's order, the
// in-place one first, then a's, then b's reflected one. Null: no Python dunder decides it.
ValuePtr Tracer::user_binary_op(PyObject* op, const ValuePtr& a, const ValuePtr& b) {
  if (a->kind != VKind::Object && b->kind != VKind::Object) return nullptr;
  static const std::unordered_map<std::string, std::string> dunders = {
      {"add", "add"},           {"sub", "sub"}, {"mul", "mul"}, {"truediv", "truediv"},
      {"floordiv", "floordiv"}, {"mod", "mod"}, {"pow", "pow"}, {"matmul", "matmul"},
      {"and_", "and"},          {"or_", "or"},  {"xor", "xor"}, {"lshift", "lshift"},
      {"rshift", "rshift"}};
  std::string name = attr_str(op, "__name__");
  const bool inplace = name.size() > 1 && name[0] == 'i' && dunders.count(name.substr(1));
  auto it = dunders.find(inplace ? name.substr(1) : name);
  if (it == dunders.end()) return nullptr;
  const std::string base = it->second;
  PyObject* forward = python_dunder(a, ("__" + base + "__").c_str());
  PyObject* reflected = python_dunder(b, ("__r" + base + "__").c_str());
  PyObject* in_place = inplace ? python_dunder(a, ("__i" + base + "__").c_str()) : nullptr;
  if (!forward && !reflected && !in_place) return nullptr;
  // NOTE: CPython tries b's reflected method first when type(b) is a proper subclass of
  // type(a) overriding it, and a C-level method of the other side may answer first: such
  // pairs are left to the graph break below.
  if (a->kind == VKind::Object && b->kind == VKind::Object &&
      Py_TYPE(a->obj.get()) != Py_TYPE(b->obj.get()))
    return nullptr;
  if (a->kind != VKind::Object &&
      !(a->is_const() && !PyType_HasFeature(Py_TYPE(a->obj.get()), Py_TPFLAGS_HEAPTYPE)))
    return nullptr;
  if (b->kind != VKind::Object && !b->is_const() && !b->is_tensor()) return nullptr;
  // NOTE: `"%s" % obj` formats: str's own % answers before obj's __rmod__.
  if (a->is_const() && base == "mod" &&
      (PyUnicode_Check(a->obj.get()) || PyBytes_Check(a->obj.get())))
    return nullptr;
  if (in_place) {
    ValuePtr r = inline_function(in_place, nullptr, nullptr, {a, b}, {});
    if (!not_implemented(r)) return r;
  }
  if (forward) {
    ValuePtr r = inline_function(forward, nullptr, nullptr, {a, b}, {});
    if (!not_implemented(r)) return r;
  }
  if (reflected) {
    ValuePtr r = inline_function(reflected, nullptr, nullptr, {b, a}, {});
    if (!not_implemented(r)) return r;
  }
  return nullptr;
}

ValuePtr Tracer::custom_equality(bool eq, const ValuePtr& a, const ValuePtr& b) {
  // The object side's Python __eq__ (the reflected one when `a` is a constant).
  const ValuePtr& self = a->is_const() ? b : a;
  const ValuePtr& other = a->is_const() ? a : b;
  PyTypeObject* type = Py_TYPE(self->obj.get());
  PyRef eq_name = PyRef::steal(PyUnicode_FromString("__eq__"));
  PyRef ne_name = PyRef::steal(PyUnicode_FromString("__ne__"));
  PyObject* eq_fn = _PyType_Lookup(type, eq_name.get());  // borrowed
  PyObject* ne_fn = _PyType_Lookup(type, ne_name.get());
  PyObject* default_ne = _PyType_Lookup(&PyBaseObject_Type, ne_name.get());
  // A Python __eq__ is inlined; object.__ne__ inverts it unless NotImplemented.
  PyObject* fn = eq ? eq_fn : (ne_fn == default_ne ? eq_fn : ne_fn);
  if (fn && PyFunction_Check(fn)) {
    ValuePtr r = inline_function(fn, nullptr, nullptr, {self, other}, {});
    if (r->is_const() && r->obj.get() == Py_NotImplemented) {
      bool same = a->obj.get() == b->obj.get();  // the reflected side is not tried
      if (other->kind == VKind::Object || other->kind == VKind::Module)
        graph_break("custom_dunder", "== returned NotImplemented on two objects");
      return const_bool(eq ? same : !same);
    }
    if (eq || fn == ne_fn) return r;
    return const_bool(!truth(r));
  }
  // A C-level comparison (an enum with a str or int mixin) has no side effects:
  // it runs now on the real objects, each pinned by identity.
  auto pinned = [&](const ValuePtr& v) {
    if (v->is_const()) return true;
    if (v->kind != VKind::Object || v->attrs || !v->source) return false;
    ctx_.guards().add_id_match(v->source, v->obj.get());
    return true;
  };
  if (!pinned(a) || !pinned(b)) graph_break("custom_dunder", "== on objects with a custom __eq__");
  int r = PyObject_RichCompareBool(a->obj.get(), b->obj.get(), eq ? Py_EQ : Py_NE);
  if (r < 0) raise_current_error("== raised");
  return const_bool(r == 1);
}

// As CPython's dict merge: a dict subclass that keeps dict's iteration hands over its storage
// as it is; another (an OrderedDict subclass such as transformers' ModelOutput) is read through
// keys() and then obj[key] for each key, which runs a Python __getitem__ of its class.
ValuePtr Tracer::mapping_items(const ValuePtr& obj) {
  PyTypeObject* type = Py_TYPE(obj->obj.get());
  // NOTE: one read from the frame: its items under a guard on its keys (not kept in `mapping`,
  // which would make later writes to it replayable)
  ValuePtr items = obj->mapping;
  if (!items && obj->source) items = ctx_.dict_subclass_items(obj, /*need_iteration_order=*/true);
  if (!items) graph_break("unsupported_operand", std::string("** on a ") + type->tp_name);
  if (type->tp_iter == PyDict_Type.tp_iter) return items;
  PyRef keys_name = PyRef::steal(PyUnicode_FromString("keys"));
  if (!keys_name) throw PythonError();
  PyObject* keys = _PyType_Lookup(type, keys_name.get());
  if (keys && PyFunction_Check(keys))
    graph_break("custom_dunder", std::string("** on a ") + type->tp_name + " with its own keys()");
  ValuePtr d = Value::of_kind(VKind::Dict);
  const std::vector<PyRef> order = items->keys;  // NOTE: a copy: __getitem__ could change them
  for (const PyRef& key : order) {
    d->keys.push_back(key);
    d->items.push_back(subscript(obj, Value::constant(key)));
  }
  return d;
}

ValuePtr Tracer::subscript(const ValuePtr& c, const ValuePtr& idx) {
  switch (c->kind) {
    case VKind::Tensor:
      return ctx_.call_op(torch_api().operator_getitem.get(), "",
                          {c, bool_lists_as_positions(ctx_, c, idx)}, {});
    case VKind::Tuple:
    case VKind::List: {
      if (!idx->is_const())
        graph_break("non_constant_index", "index of a sequence must be a constant");
      if (PySlice_Check(idx->obj.get())) {
        Py_ssize_t start, stop, step, len;
        if (PySlice_GetIndicesEx(idx->obj.get(), c->items.size(), &start, &stop, &step, &len) < 0)
          throw PythonError();
        std::vector<ValuePtr> out;
        for (Py_ssize_t i = 0, j = start; i < len; ++i, j += step) out.push_back(c->items[j]);
        if (c->kind == VKind::List) return Value::list(std::move(out));
        ValuePtr t = Value::tuple(std::move(out));
        if (c->named_type.get() == torch_api().size_type.get()) t->named_type = c->named_type;
        return t;  // NOTE: x.shape[1:] is a torch.Size; a namedtuple's slice a plain tuple
      }
      return c->items[normalize_index(
          idx->obj.get(), c->items.size(),
          c->kind == VKind::List ? "list index out of range" : "tuple index out of range")];
    }
    case VKind::Deque:
      // NOTE: an int only (a deque takes no slice: CPython raises its TypeError).
      if (!idx->is_const() || !PyLong_Check(idx->obj.get()))
        graph_break("non_constant_index", "a deque index that is not an int known while tracing");
      return c->items[normalize_index(idx->obj.get(), c->items.size(), "deque index out of range")];
    case VKind::Dict: {
      const ValuePtr key = key_value(ctx_, idx);
      if (!key->is_const()) graph_break("unsupported_dict_key", "dict key must be a constant");
      int i = dict_find(c, key->obj.get());
      if (i < 0)
        raise_user_arg(PyExc_KeyError, key->obj.get(),
                       "KeyError: " + ir::const_repr(key->obj.get()));
      return c->items[i];
    }
    case VKind::Const: {
      PyRef key = idx->is_const() ? idx->obj : const_tuple(idx);
      if (!key) graph_break("non_constant_index", "indexing a constant with a traced value");
      // NOTE: a dict subclass's missing key runs __missing__ (a defaultdict inserts its
      // factory's value): that side effect must not happen once at trace time.
      if (PyDict_Check(c->obj.get()) && !PyDict_CheckExact(c->obj.get())) {
        int has = PyDict_Contains(c->obj.get(), key.get());
        if (has < 0) raise_current_error("indexing raised");
        if (!has)
          graph_break("unsupported_side_effect", std::string("missing key of a ") +
                                                     Py_TYPE(c->obj.get())->tp_name +
                                                     " (its __missing__ runs eagerly)");
      }
      PyRef r = PyRef::steal(PyObject_GetItem(c->obj.get(), key.get()));
      if (!r) {
        // A missing key of a watched dict (os.environ's, a registry's) must
        // recompile when the key appears: guard the dict's version.
        if (c->source && PyDict_CheckExact(c->obj.get()) && PyErr_ExceptionMatches(PyExc_KeyError))
          ctx_.guards().add_dict_version(c->source, c->obj.get());
        raise_current_error("indexing raised");
      }
      // NOTE: an item of a mutable constant (a defaultdict, a deque) can change between
      // calls: its value is guarded; an immutable container's items cannot.
      if (c->source && (PyLong_Check(key.get()) || PyUnicode_Check(key.get())))
        return ctx_.wrap(r.get(), ir::Source::item(c->source, key),
                         !is_immutable_constant(c->obj.get()));
      return ctx_.from_result(r.get());
    }
    case VKind::Object: {
      if (auto r = call_dunder(c, "__getitem__", {idx})) return *r;
      if (c->mapping) {
        // NOTE: dict.__getitem__ of a subclass calls its __missing__ for a missing key
        // (collections.Counter's returns 0); a Python one is traced like any method.
        static PyObject* missing_name = PyUnicode_InternFromString("__missing__");  // immortal
        PyObject* missing = _PyType_Lookup(Py_TYPE(c->obj.get()), missing_name);    // borrowed
        const ValuePtr key = key_value(ctx_, idx);
        if (missing && PyFunction_Check(missing) && key->is_const() &&
            dict_find(c->mapping, key->obj.get()) < 0)
          return inline_function(missing, nullptr, nullptr, {c, key}, {});
        return subscript(c->mapping, idx);
      }
      std::vector<ValuePtr> args{idx};
      KwArgs kw;
      if (auto r = created_object_method(c, "__getitem__", args, kw)) return *r;
      graph_break("custom_dunder", "indexing a " + c->type_name());
    }
    case VKind::Module: {
      if (!idx->is_const()) graph_break("non_constant_index", "module index must be a constant");
      // `self.layers[:n]` of a ModuleList is a fresh container every call: iterate
      // it as the list of the guarded container's own items instead.
      if (PySlice_Check(idx->obj.get()) && c->source &&
          std::string(Py_TYPE(c->obj.get())->tp_name) == "ModuleList") {
        Py_ssize_t n = PyObject_Length(c->obj.get());
        if (n < 0) throw PythonError();
        ctx_.guards().add_length_match(c->source, n);
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(idx->obj.get(), &start, &stop, &step) < 0) throw PythonError();
        Py_ssize_t len = PySlice_AdjustIndices(n, &start, &stop, step);
        std::vector<ValuePtr> items;
        for (Py_ssize_t i = 0, j = start; i < len; ++i, j += step)
          items.push_back(subscript(c, const_int(j)));
        return Value::list(std::move(items));
      }
      if (PySlice_Check(idx->obj.get()))
        if (auto r = slice_sequential(c, idx->obj.get())) return r;
      if (ValuePtr children = sliced_children(c); children && PyLong_CheckExact(idx->obj.get())) {
        const auto n = static_cast<long long>(children->items.size());
        long long i = PyLong_AsLongLong(idx->obj.get());
        if (i == -1 && PyErr_Occurred()) throw PythonError();
        if (i < 0) i += n;
        if (i >= 0 && i < n) return children->items[i];  // else the real module raises below
      }
      PyRef r = PyRef::steal(PyObject_GetItem(c->obj.get(), idx->obj.get()));
      if (!r) raise_current_error("module indexing raised");
      ir::SourcePtr src;
      if (c->source && (PyLong_Check(idx->obj.get()) || PyUnicode_Check(idx->obj.get())))
        src = ir::Source::item(c->source, idx->obj);
      if (c->source && !src)
        graph_break("unsupported_operand", "slicing a module container (nn.Sequential[a:b])");
      return ctx_.wrap(r.get(), src);
    }
    default:
      graph_break("unsupported_operand", "indexing a " + c->type_name());
  }
}

// `seq[a:b]` of an nn.Sequential: Sequential.__getitem__ builds a new Sequential of the
// selected children on every call. The trace builds it once, for real (a module made by traced
// code: no source, nothing guarded about it), and its `_modules` reads as the selected items of
// the traced `seq._modules`, so the children keep their sources (and their guards, parameters).
// Null for a subclass, whose constructor or __getitem__ may do more.
ValuePtr Tracer::sliced_children(const ValuePtr& m) {
  if (m->kind != VKind::Module || m->source || !m->flag) return nullptr;
  auto it = ctx_.attr_overlay.find({m->obj.get(), "_modules"});
  return it != ctx_.attr_overlay.end() && it->second->kind == VKind::Dict ? it->second : nullptr;
}

ValuePtr Tracer::slice_sequential(const ValuePtr& c, PyObject* slice) {
  static PyObject* sequential = [] {
    PyRef m = PyRef::steal(PyImport_ImportModule("torch.nn"));
    PyObject* t = m ? PyObject_GetAttrString(m.get(), "Sequential") : nullptr;
    if (!t) throw PythonError();
    return t;  // NOTE: kept for the process lifetime, like the module
  }();
  if (Py_TYPE(c->obj.get()) != reinterpret_cast<PyTypeObject*>(sequential)) return nullptr;
  ValuePtr children = get_attr(c, "_modules");
  if (children->kind != VKind::Dict) return nullptr;
  PyRef r = PyRef::steal(PyObject_GetItem(c->obj.get(), slice));
  if (!r) raise_current_error("module indexing raised");
  Py_ssize_t start, stop, step;
  if (PySlice_Unpack(slice, &start, &stop, &step) < 0) throw PythonError();
  const Py_ssize_t n =
      PySlice_AdjustIndices(static_cast<Py_ssize_t>(children->items.size()), &start, &stop, step);
  ValuePtr picked = Value::of_kind(VKind::Dict);
  for (Py_ssize_t i = 0, j = start; i < n; ++i, j += step) {
    picked->keys.push_back(children->keys[j]);
    picked->items.push_back(children->items[j]);
  }
  if (PyObject_Length(r.get()) != n) return nullptr;  // not the children traced: leave it
  ValuePtr m = Value::of_kind(VKind::Module);
  m->obj = r;
  m->flag = true;  // made by traced code (Tracer::is_fresh_module)
  ctx_.keep_alive.push_back(r);
  ctx_.attr_overlay[{r.get(), "_modules"}] = picked;
  return m;
}

void Tracer::base_setitem(const ValuePtr& obj, const ValuePtr& key, const ValuePtr& value) {
  if (!obj->source) {
    TL_CHECK(obj->mapping) << "dict.__setitem__ on an object without items";
    return store_subscript(obj->mapping, key, value);
  }
  if (!key->is_const() ||
      !(PyUnicode_CheckExact(key->obj.get()) || PyLong_CheckExact(key->obj.get())))
    graph_break("unsupported_side_effect",
                "item assignment on a " + obj->type_name() + " with a key other than a str or int");
  // NOTE: from the first write on, the object's items are the trace's (symbolic), so reads
  // after it see it; the real object gets the writes when the effects are replayed.
  if (!obj->mapping) {
    obj->mapping = ctx_.dict_subclass_items(obj, /*need_iteration_order=*/true);
    if (!obj->mapping)
      graph_break("unsupported_side_effect", "item assignment on a " + obj->type_name() +
                                                 ", which iterates in an order of its own");
  }
  store_subscript(obj->mapping, key, value);
  ctx_.keep_alive.push_back(obj->obj);
  ctx_.effects.push_back({ir::SideEffect::Kind::BaseSetItem, obj->source, "", value, key->obj});
}

// `c[slice] = v` (or `del c[slice]` when `v` is null) on a symbolic list, as CPython's
// list_ass_subscript: a plain slice takes any number of items, an extended one exactly as many
// as it selects.
void Tracer::list_store_slice(const ValuePtr& c, PyObject* slice, const ValuePtr* v) {
  Py_ssize_t start, stop, step;
  if (PySlice_Unpack(slice, &start, &stop, &step) < 0) throw PythonError();
  const Py_ssize_t n =
      PySlice_AdjustIndices(static_cast<Py_ssize_t>(c->items.size()), &start, &stop, step);
  // NOTE: the new items are read before the list changes (`a[:] = a` copies first).
  std::vector<ValuePtr> items = v ? iterate(*v) : std::vector<ValuePtr>{};
  if (step == 1) {
    stop = std::max(stop, start);
    c->items.erase(c->items.begin() + start, c->items.begin() + stop);
    c->items.insert(c->items.begin() + start, items.begin(), items.end());
  } else if (!v) {
    std::vector<ValuePtr> kept;
    for (Py_ssize_t i = 0; i < static_cast<Py_ssize_t>(c->items.size()); ++i) {
      const Py_ssize_t k = i - start;
      const bool picked = k % step == 0 && k / step >= 0 && k / step < n;
      if (!picked) kept.push_back(c->items[i]);
    }
    c->items = std::move(kept);
  } else {
    if (static_cast<Py_ssize_t>(items.size()) != n)
      raise_user(PyExc_ValueError, "attempt to assign sequence of size " +
                                       std::to_string(items.size()) +
                                       " to extended slice of size " + std::to_string(n));
    for (Py_ssize_t k = 0; k < n; ++k) c->items[start + k * step] = items[k];
  }
  mark_mutated(c);
}

void Tracer::store_subscript(const ValuePtr& c, const ValuePtr& idx, const ValuePtr& v) {
  if (c->is_tensor()) {
    ctx_.call_op(operator_fn("setitem"), "", {c, bool_lists_as_positions(ctx_, c, idx), v}, {});
    return;
  }
  if (c->kind == VKind::Object && c->flag) {
    if (call_dunder(c, "__setitem__", {idx, v})) return;
    if (c->mapping) return store_subscript(c->mapping, idx, v);
  }
  if (c->kind == VKind::Object && c->source && PyDict_Check(c->obj.get())) {
    if (call_dunder(c, "__setitem__", {idx, v})) return;
    return base_setitem(c, idx, v);
  }
  if (c->kind == VKind::Dict && !idx->is_const()) {
    const ValuePtr key = key_value(ctx_, idx);
    if (key != idx) return store_subscript(c, key, v);
  }
  if (!idx->is_const()) graph_break("non_constant_index", "index must be a constant");
  if (c->kind == VKind::List) {
    if (PySlice_Check(idx->obj.get())) return list_store_slice(c, idx->obj.get(), &v);
    c->items[normalize_index(idx->obj.get(), c->items.size(),
                             "list assignment index out of range")] = v;
    mark_mutated(c);
    return;
  }
  if (c->kind == VKind::Deque && PyLong_Check(idx->obj.get())) {
    c->items[normalize_index(idx->obj.get(), c->items.size(), "deque index out of range")] = v;
    mark_mutated(c);  // NOTE: CPython's item store leaves iterators valid (no state change)
    return;
  }
  if (c->kind == VKind::Dict) {
    int i = dict_find(c, idx->obj.get());
    if (i >= 0) {
      c->items[i] = v;
    } else {
      c->keys.push_back(idx->obj);
      c->items.push_back(v);
    }
    mark_mutated(c);
    return;
  }
  graph_break("unsupported_side_effect", "item assignment on a " + c->type_name());
}

}  // namespace tl::capture

namespace tl::capture {
using namespace detail;  // NOTE: helpers of this file family only

bool Tracer::contains(const ValuePtr& container, const ValuePtr& item) {
  if (container->kind == VKind::Set) {
    PyRef key = set_member_key(item);
    if (!key) graph_break("set_of_objects", "'in' test of a " + item->type_name() + " on a set");
    int r = PySet_Contains(container->obj.get(), key.get());
    if (r < 0) raise_current_error("'in' raised");
    return r;
  }
  if (container->kind == VKind::Object) {
    if (auto r = call_dunder(container, "__contains__", {item})) return truth(*r);
    if (container->mapping && item->is_const())
      return dict_find(container->mapping, item->obj.get()) >= 0;
    std::vector<ValuePtr> args{item};
    KwArgs kw;
    if (auto r = created_object_method(container, "__contains__", args, kw)) return truth(*r);
  }
  if (container->kind == VKind::Iterator) {  // consumes up to the first match, as CPython
    while (ValuePtr e = iter_next(container)) {
      if (e == item) return true;
      if (e->obj && item->obj && e->obj.get() == item->obj.get() &&
          (e->is_const() || e->kind == VKind::Object || e->kind == VKind::Module))
        return true;
      if (truth(compare(2, e, item))) return true;
    }
    return false;
  }
  if (container->kind == VKind::DictView) {
    if (container->method_name == "keys" && item->is_const()) {
      for (auto& k : container->self->keys) {
        int eq = PyObject_RichCompareBool(k.get(), item->obj.get(), Py_EQ);
        if (eq < 0) raise_current_error("'in' raised");
        if (eq) return true;
      }
      return false;
    }
    if (container->method_name == "keys")
      graph_break("unsupported_dict_key", "'in' test of a " + item->type_name() + " on dict keys");
    return contains(Value::tuple(dict_view_items(container)), item);
  }
  if (container->is_sequence() || container->kind == VKind::Deque) {
    // As tuple/list `in` does: identity first, then element == item.
    for (const ValuePtr& e : container->items) {
      if (e == item) return true;
      bool is_object = e->kind == VKind::Object || e->kind == VKind::Module || e->is_const();
      if (is_object && e->obj && e->obj.get() == item->obj.get()) return true;
      if (truth(compare(2, e, item))) return true;
    }
    return false;
  }
  graph_break("unsupported_operand", "'in' test on " + container->type_name());
}

}  // namespace tl::capture
