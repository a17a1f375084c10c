#include "capture/capture.h"

#include <opcode.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "bytecode/decode.h"
#include "bytecode/resume.h"
#include "capture/break_kinds.h"
#include "capture/context.h"
#include "capture/graph_break.h"
#include "capture/lazy_iter.h"
#include "capture/made_in_call.h"
#include "capture/optimizer_step.h"
#include "capture/resume_point.h"
#include "capture/scalar_inputs.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "core/errors.h"
#include "core/python_helpers.h"
#include "guards/global_state.h"
#include "ir/effects.h"

namespace tl::capture {
namespace {

// CO_FAST_CELL of co_localspluskinds (declared only in an internal CPython header).
constexpr char kFastCell = 0x40;

std::string utf8(PyObject* s) {
  const char* c = PyUnicode_AsUTF8(s);
  if (!c) throw PythonError();
  return c;
}

// A list, dict or object made by the trace: rebuilt fresh, so it must be rebuilt once.
bool is_mutable_built(const ValuePtr& v) {
  return v->kind == VKind::List || v->kind == VKind::Dict || v->kind == VKind::Deque ||
         (v->kind == VKind::Object && v->flag);
}

// Adds the symbols `e` reads to `out`.
void symbols_of(const ir::SymExpr& e, std::unordered_set<int>& out) {
  if (e.op == ir::SymOp::Sym) out.insert(static_cast<int>(e.value));
  for (const ir::SymExprPtr& a : e.args) symbols_of(*a, out);
}

// True when every symbol of `e` is a size of an input tensor read from the frame: its value at
// any call can be read there (ir::Residual::Kind::SymSize).
bool of_input_sizes(const CaptureContext& ctx, const ir::SymExpr& e) {
  std::unordered_set<int> syms;
  symbols_of(e, syms);
  for (int k : syms) {
    if (k < 0 || k >= static_cast<int>(ctx.sym_table.size())) return false;
    const ir::Node* n = ctx.sym_table[k].first;
    if (!n || n->op != ir::OpKind::Placeholder || !n->source) return false;
  }
  return true;
}

// `e` with each symbol k replaced by `by(k)`.
ir::SymExprPtr substitute(const ir::SymExprPtr& e, const std::function<ir::SymExprPtr(int)>& by) {
  switch (e->op) {
    case ir::SymOp::Int:
      return e;
    case ir::SymOp::Sym:
      return by(static_cast<int>(e->value));
    case ir::SymOp::Add:
    case ir::SymOp::Mul: {
      ir::SymExprPtr out = substitute(e->args[0], by);
      for (size_t i = 1; i < e->args.size(); ++i)
        out = e->op == ir::SymOp::Add ? ir::sym_add(out, substitute(e->args[i], by))
                                      : ir::sym_mul(out, substitute(e->args[i], by));
      return out;
    }
    case ir::SymOp::FloorDiv:
      return ir::sym_floordiv(substitute(e->args[0], by), substitute(e->args[1], by));
    case ir::SymOp::Mod:
      return ir::sym_mod(substitute(e->args[0], by), substitute(e->args[1], by));
    case ir::SymOp::Min:
      return ir::sym_min(substitute(e->args[0], by), substitute(e->args[1], by));
    case ir::SymOp::Max:
      return ir::sym_max(substitute(e->args[0], by), substitute(e->args[1], by));
  }
  TL_CHECK(false) << "unknown size expression";
}

// Ints handed on at a break as sizes (SymSize), by the user's code and the local's name: `h =
// t // 2` is `x.size(1) // 2` with symbol k = size dims[k].second of the local named
// dims[k].first. The resume function (a frame of its own, whose locals keep their names) takes
// its int argument `h` as that expression of its own argument `x`'s size when it holds there
// (size_argument). A hint only: the resume function guards what it relies on (SIZE_EQUALS),
// so the last break to write one wins.
struct SizeHint {
  ir::SymExprPtr expr;
  std::vector<std::pair<std::string, int>> dims;
};
struct CodeHints {
  PyRef code;  // NOTE: held, so its address is never reused by another code object
  std::unordered_map<std::string, SizeHint> by_name;
};
std::unordered_map<PyCodeObject*, CodeHints>& size_hints() {
  static auto* hints = new std::unordered_map<PyCodeObject*, CodeHints>();  // NOTE: never freed
  return *hints;
}

// Records the hint for the local `name` of `code` handed on as `r` (a SymSize residual) when
// every size it reads is of a local (a tensor argument the resume function may take too).
void record_size_hint(PyCodeObject* code, const std::string& name, const ir::Residual& r) {
  SizeHint hint;
  std::unordered_map<int, int> renumber;
  for (size_t k = 0; k < r.sym_dims.size(); ++k) {
    const auto& [src, dim] = r.sym_dims[k];
    if (!src) continue;
    if (src->kind != ir::SourceKind::Local) return;
    renumber[static_cast<int>(k)] = static_cast<int>(hint.dims.size());
    hint.dims.emplace_back(src->name, dim);
  }
  hint.expr = substitute(r.sym, [&](int k) { return ir::sym_symbol(renumber.at(k)); });
  PyCodeObject* user = bytecode::user_code_of(code);
  CodeHints& h = size_hints()[user];
  if (!h.code) h.code = PyRef::borrow(reinterpret_cast<PyObject*>(user));
  h.by_name[name] = std::move(hint);
}

// Converts the values that outlive the frame into residual instructions,
// collecting the tensors the graph must return.
class ResidualBuilder {
 public:
  // `at_break`: values handed to CPython mid-frame, which must keep their
  // identity (inputs stay the caller's objects; a container built by the
  // trace may be rebuilt only once).
  explicit ResidualBuilder(CaptureContext& ctx, bool at_break = false)
      : ctx_(ctx), at_break_(at_break) {}

  // True when `src` reads through a container of the frame that the trace changed: the value
  // re-read there after the side effects are replayed is another one (`t = xs[0]; xs[0] = y`).
  // Not when the container still holds, at the item `src` goes through, the very value read
  // there (`kwargs.pop("return_dict")` leaves `kwargs["cache"]` as it was).
  bool read_through_mutated(const ir::SourcePtr& src) const {
    for (const ValuePtr& c : ctx_.sourced_containers) {
      if (!c->mutated || !c->source) continue;
      const std::string container = c->source->str();
      const ir::Source* child = src.get();
      for (const ir::Source* s = src->base.get(); s; child = s, s = s->base.get())
        if (s == c->source.get() || s->str() == container) {
          if (!still_holds(*c, *child)) return true;
          break;
        }
    }
    return false;
  }

  // True when the list or dict value `c` still holds, where `item` (an Item source on `c`'s
  // own source) reads, the value the trace read from there.
  static bool still_holds(const Value& c, const ir::Source& item) {
    if (item.kind != ir::SourceKind::Item || !item.key) return false;
    const std::string read = item.str();
    auto is_read_value = [&](const ValuePtr& v) {
      return v && v->source && (v->source.get() == &item || v->source->str() == read);
    };
    if (c.kind == VKind::Dict) {
      for (size_t i = 0; i < c.keys.size() && i < c.items.size(); ++i) {
        int same = PyObject_RichCompareBool(c.keys[i].get(), item.key.get(), Py_EQ);
        if (same < 0) throw PythonError();
        if (same) return is_read_value(c.items[i]);
      }
      return false;
    }
    if ((c.kind == VKind::List || c.kind == VKind::Deque) && PyLong_Check(item.key.get())) {
      long long i = PyLong_AsLongLong(item.key.get());
      if (i < 0 || i >= static_cast<long long>(c.items.size())) return false;
      return is_read_value(c.items[static_cast<size_t>(i)]);
    }
    return false;
  }

  // The int values handed to CPython (at this break, or in the result) as sizes read at each
  // call, not as the trace's numbers (hand_on_sizes).
  void keep_symbolic(std::unordered_set<const Value*> kept) { sym_kept_ = std::move(kept); }

  // Whether scalar value `v` is computed only from numbers read per call from attributes or
  // globals (CaptureContext::dynamic_numbers: a counter) and plain constants, with at least one
  // of the former (`any`).
  static bool from_dynamic_numbers(const ValuePtr& v, bool& any) {
    if (!v->scalar_fn) {
      if (v->scalar && v->source &&
          (v->source->kind == ir::SourceKind::Attr || v->source->kind == ir::SourceKind::Global))
        return any = true;
      return !v->scalar && !v->source && v->is_const();
    }
    if (!v->scalar) return false;
    for (const ValuePtr& a : v->scalar_args)
      if (!from_dynamic_numbers(a, any)) return false;
    return true;
  }
  static bool from_dynamic_numbers(const ValuePtr& v) {
    bool any = false;
    return from_dynamic_numbers(v, any) && any;
  }

  ir::Residual build(const ValuePtr& v) {
    ir::Residual r;
    // NOTE: a number the frame takes per call, read as a constant by nothing: the call's own.
    if (v->is_const() && v->scalar && v->source) {
      r.kind = ir::Residual::Kind::Source;
      r.source = v->source;
      return r;
    }
    // NOTE: a number computed in the graph from scalar inputs (`self.step + 1` written back, a
    // counter): the graph's 0-d int64/float64 tensor of it, made a Python number again after
    // the run (torchlite/_scalars.py), so the next call's number is not a constant either.
    if (v->is_const() && v->scalar && v->scalar_fn && from_dynamic_numbers(v)) {
      static PyObject* cpu = [] {
        PyObject* d = PyObject_CallFunction(torch_api().device_type.get(), "s", "cpu");
        if (!d) throw PythonError();
        return d;  // NOTE: kept for the process lifetime, like torch
      }();
      ValuePtr t = ctx_.scalar_input_tensor(v, cpu);
      ValuePtr number = Value::tuple({t});
      number->named_type = python_helper("scalars.item");
      return build(number);
    }
    if (v->is_const() && v->scalar) ctx_.pin_scalar(v);  // int(s): no source to read it from
    if (v->is_const() && v->sym && sym_kept_.count(v.get())) {
      r.kind = ir::Residual::Kind::SymSize;
      r.sym = v->sym;
      std::unordered_set<int> syms;
      symbols_of(*v->sym, syms);
      r.sym_dims.resize(ctx_.sym_table.size());
      for (int k : syms)
        r.sym_dims[k] = {ctx_.sym_table[k].first->source, ctx_.sym_table[k].second};
      return r;
    }
    bool immutable = v->is_const() && is_immutable_constant(v->obj.get());
    if (v->source && !v->is_tensor() && !immutable && read_through_mutated(v->source))
      graph_break(at_break_ ? "live_value_at_break" : "unsupported_return",
                  "a " + v->type_name() + " read from " + v->source->str() +
                      " outlives the trace, which changed that container");
    if (at_break_ && v->is_tensor() && v->node->op == ir::OpKind::Placeholder && v->node->source &&
        !read_through_mutated(v->node->source)) {
      r.kind = ir::Residual::Kind::Source;
      r.source = v->node->source;
      return r;
    }
    // NOTE: residuals have no shared bindings, so a mutable value built by the trace and
    // referenced twice would come back as two objects (`l is l2`, `o.__class__ = ...` run by
    // CPython on one copy and read back on the other): unsupported, never a silent copy.
    if (!v->source && is_mutable_built(v) && !rebuilt_.insert(v.get()).second)
      graph_break(at_break_ ? "live_value_at_break" : "unsupported_return",
                  "a " + v->type_name() + " built in traced code is referenced twice " +
                      (at_break_ ? "at a graph break" : "in the result"));
    switch (v->kind) {
      case VKind::Tensor: {
        r.kind = ir::Residual::Kind::GraphOutput;
        auto it = output_index_.find(v->node);
        if (it == output_index_.end()) {
          it = output_index_.emplace(v->node, static_cast<int>(outputs_.size())).first;
          outputs_.push_back(ir::Arg::of_node(v->node));
        }
        r.index = it->second;
        return r;
      }
      case VKind::Const:
        // NOTE: an object made while tracing would be shared by every call
        // (an exception raised again would grow one traceback forever).
        if (at_break_ && !v->source && !is_immutable_constant(v->obj.get()) &&
            !PyCallable_Check(v->obj.get()) && !PyModule_Check(v->obj.get()))
          graph_break(
              "live_value_at_break",
              "a " + v->type_name() + " object created in traced code is live at a graph break");
        if (v->source && !is_immutable_constant(v->obj.get())) {
          r.kind = ir::Residual::Kind::Source;
          r.source = v->source;
          return r;
        }
        r.kind = ir::Residual::Kind::Const;
        r.value = v->obj;
        return r;
      case VKind::Tuple:
        for (auto& item : v->items) r.items.push_back(build(item));
        if (v->named_type) {
          r.kind = ir::Residual::Kind::NamedTuple;
          r.value = v->named_type;
        } else {
          r.kind = ir::Residual::Kind::Tuple;
        }
        return r;
      case VKind::List:
      case VKind::Dict:
        if (v->source) {  // the caller's own container, mutations replayed separately
          r.kind = ir::Residual::Kind::Source;
          r.source = v->source;
          return r;
        }
        for (auto& item : v->items) r.items.push_back(build(item));
        r.kind = v->kind == VKind::List ? ir::Residual::Kind::List : ir::Residual::Kind::Dict;
        r.keys = v->keys;
        return r;
      case VKind::Deque:
        if (v->source) {  // the caller's own deque, mutations replayed separately
          r.kind = ir::Residual::Kind::Source;
          r.source = v->source;
          return r;
        }
        for (auto& item : v->items) r.items.push_back(build(item));
        r.kind = ir::Residual::Kind::Deque;
        r.value = v->maxlen;
        return r;
      case VKind::Module:
      case VKind::Object:
      case VKind::Method:  // one read from the frame (CaptureContext::wrap_bound_method)
        if (v->source) {
          r.kind = ir::Residual::Kind::Source;
          r.source = v->source;
          return r;
        }
        if (v->kind == VKind::Method)
          graph_break("unsupported_return", "returning a method from traced code");
        return build(lower_created_object(v));  // made by traced code (or a clean break)
      case VKind::Function:
        r.kind = ir::Residual::Kind::Function;
        r.index = function_index(v);
        return r;
      case VKind::Iterator:
        if (auto r_it = returned_iterator(v)) return *r_it;
        graph_break("unsupported_return", "returning a " + v->type_name() + " from traced code");
      default:
        graph_break("unsupported_return", "returning a " + v->type_name() + " from traced code");
    }
  }

  // NOTE: an iterator handed back to the caller (`ModuleList.__iter__` returns
  // `iter(self._modules.values())`) is made again by CPython over the very containers it walks,
  // advanced as far as the trace advanced it, when each of them is the frame's own (has a
  // source): the caller's loop then sees what eager's would. A container the trace built would
  // be rebuilt as a copy, so that stays a break.
  std::optional<ir::Residual> returned_iterator(const ValuePtr& it) {
    auto live = live_iterator(it);
    if (!live) return std::nullopt;
    ir::Residual r;
    r.kind = ir::Residual::Kind::Iterator;
    r.value = live->factory;
    r.index = static_cast<int>(live->skip);
    for (const ValuePtr& a : live->args) {
      if (a->kind == VKind::Iterator) {
        auto inner = returned_iterator(a);
        if (!inner) return std::nullopt;
        r.items.push_back(std::move(*inner));
      } else if (a->source) {
        r.items.push_back(build(a));
      } else {
        return std::nullopt;
      }
    }
    return r;
  }

  std::vector<ir::Arg> take_outputs() { return std::move(outputs_); }

  // The frame's own cell variables at a break (Cell values, in slot order): the first cells of
  // the closures, which the code after the break takes as its first free variables.
  void add_frame_cells(const std::vector<ValuePtr>& cells) {
    TL_CHECK(closures_.cells.empty()) << "frame cells after other cells";
    for (const ValuePtr& c : cells) {
      TL_CHECK(c && c->kind == VKind::Cell && !c->source) << "a frame's cell slot holds no cell";
      made_cell(c);
    }
  }
  ir::MadeClosures take_closures() { return std::move(closures_); }

 private:
  // The cell `c` (a Cell value) as a function made by the trace refers to it.
  ir::MadeClosures::CellRef cell_ref(const ValuePtr& c) {
    using K = ir::MadeClosures::CellRef::Kind;
    ir::MadeClosures::CellRef ref;
    if (!c || c->kind != VKind::Cell)
      graph_break("unsupported_function_object",
                  "a function made in traced code with a malformed closure");
    if (!c->source) {
      ref.kind = K::Made;
      ref.index = made_cell(c);
      return ref;
    }
    if (c->source->kind == ir::SourceKind::Closure) {
      ref.kind = K::FrameFree;
      ref.index = c->source->index;
      return ref;
    }
    // NOTE: a cell of a function the trace inlined: the source reads its contents.
    if (c->source->kind == ir::SourceKind::Attr && c->source->name == "cell_contents") {
      const ir::SourcePtr& cell = c->source->base;
      if (cell->kind == ir::SourceKind::Held && cell->key && PyCell_Check(cell->key.get())) {
        ref.kind = K::Object;
        ref.object = cell->key;
      } else {
        ref.kind = K::Fetched;
        ref.source = cell;
      }
      return ref;
    }
    graph_break(at_break_ ? "live_value_at_break" : "unsupported_return",
                "a function made in traced code closes over " + c->source->str() +
                    ", which cannot be passed on");
  }

  // The index of the cell made at run time for `c` (a Cell value made by the trace).
  int made_cell(const ValuePtr& c) {
    auto it = cell_index_.find(c.get());
    if (it != cell_index_.end()) return it->second;
    const int index = static_cast<int>(closures_.cells.size());
    cell_index_.emplace(c.get(), index);
    closures_.cells.emplace_back();
    if (c->cell_contents) {
      ir::Residual contents = build(c->cell_contents);  // NOTE: may add cells (no reference kept)
      closures_.cells[index].bound = true;
      closures_.cells[index].contents = std::move(contents);
    }
    return index;
  }

  // The index of the function made at run time for `v` (a Function value): one object however
  // many places name it.
  int function_index(const ValuePtr& v) {
    auto it = function_index_.find(v.get());
    if (it != function_index_.end()) return it->second;
    const int index = static_cast<int>(closures_.functions.size());
    function_index_.emplace(v.get(), index);
    closures_.functions.emplace_back();
    ir::MadeClosures::Function f;
    f.code = v->obj;
    f.globals = v->globals;
    f.defaults.value = PyRef::borrow(Py_None);
    f.kwdefaults.value = PyRef::borrow(Py_None);
    if (!v->items.empty()) f.defaults = build(Value::tuple(v->items));
    if (!v->kwdefaults.empty()) {
      ir::Residual kw;
      kw.kind = ir::Residual::Kind::Dict;
      kw.keys = v->keys;
      for (const ValuePtr& d : v->kwdefaults) kw.items.push_back(build(d));
      f.kwdefaults = std::move(kw);
    }
    for (const ValuePtr& c : v->cells) f.closure.push_back(cell_ref(c));
    closures_.functions[index] = std::move(f);
    return index;
  }

  ir::MadeClosures closures_;
  std::unordered_map<const Value*, int> cell_index_;
  std::unordered_map<const Value*, int> function_index_;
  CaptureContext& ctx_;
  bool at_break_;
  std::unordered_set<const Value*> sym_kept_;
  std::unordered_set<const Value*> rebuilt_;
  std::unordered_map<const ir::Node*, int> output_index_;
  std::vector<ir::Arg> outputs_;
};

// A tensor argument (a placeholder with a source) among `locals`, by its name in `code`.
ValuePtr tensor_local(PyCodeObject* code, const std::vector<ValuePtr>& locals,
                      const std::string& name) {
  for (int i = 0; i < code->co_nlocals && i < static_cast<int>(locals.size()); ++i) {
    const ValuePtr& t = locals[i];
    if (!t || !t->is_tensor() || !t->node || t->node->op != ir::OpKind::Placeholder ||
        !t->node->source || !t->meta)
      continue;
    if (utf8(PyTuple_GET_ITEM(code->co_localsplusnames, i)) == name) return t;
  }
  return nullptr;
}

// The resume function's int argument `n` (`value`, read from `src`) as the expression of its
// tensor arguments' sizes the break handed it on as (SizeHint), when that expression gives
// `value` at this call's sizes and is not constant here; else null.
ValuePtr hinted_size(CaptureContext& ctx, PyCodeObject* code, PyObject* n, long long value,
                     const ir::SourcePtr& src, const std::vector<ValuePtr>& locals) {
  auto code_hints = size_hints().find(bytecode::user_code_of(code));
  if (code_hints == size_hints().end()) return nullptr;
  auto hint = code_hints->second.by_name.find(src->name);
  if (hint == code_hints->second.by_name.end()) return nullptr;
  const SizeHint& h = hint->second;
  std::vector<int64_t> sizes;
  std::vector<ir::SymExprPtr> syms;
  std::vector<std::pair<ir::SourcePtr, int>> guarded;
  for (const auto& [name, dim] : h.dims) {
    ValuePtr t = tensor_local(code, locals, name);
    if (!t) return nullptr;
    PyRef shape = PyRef::steal(PyObject_GetAttrString(t->meta.get(), "shape"));
    if (!shape) throw PythonError();
    if (dim >= PyTuple_GET_SIZE(shape.get())) return nullptr;
    ValuePtr size = ctx.size_value(t, dim);
    sizes.push_back(PyLong_AsLongLong(size->obj.get()));
    syms.push_back(size->sym ? size->sym : ir::sym_int(sizes.back()));
    guarded.emplace_back(t->node->source, dim);
  }
  try {
    if (h.expr->eval(sizes) != value) return nullptr;
  } catch (const std::exception&) {
    return nullptr;
  }
  ir::SymExprPtr e = substitute(h.expr, [&](int k) { return syms.at(k); });
  if (e->constant()) return nullptr;
  ValuePtr v = Value::constant(PyRef::borrow(n));
  v->sym = e;
  ctx.any_sym = true;
  ctx.guards().add_int_equals_sizes(src, h.expr, std::move(guarded));
  return v;
}

// A resume function's int argument `n` (borrowed, read from `src`) that equals a size >= 2 of
// one of its tensor arguments (`locals`, the first such size in slot and dimension order), as
// that size: a symbol, so a size-generic entry serves every size with each call's `n` (`b, t =
// x.shape` before a break, `view(b, t, -1)` after it), guarded by `n == that size` (SIZE_EQUALS)
// in place of n's value. An int equal to no size (or one equal to another size by chance, which
// the guard then refuses at other sizes: a capture more, never a wrong number) is guarded by value
// as before. Null when no tensor argument has that size.
ValuePtr size_argument(CaptureContext& ctx, PyCodeObject* code, PyObject* n,
                       const ir::SourcePtr& src, const std::vector<ValuePtr>& locals) {
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(n, &overflow);
  if (overflow) {
    PyErr_Clear();
    return nullptr;
  }
  if (ValuePtr v = hinted_size(ctx, code, n, value, src, locals)) return v;
  if (value < 2) return nullptr;
  for (const ValuePtr& t : locals) {
    if (!t || !t->is_tensor() || !t->node || t->node->op != ir::OpKind::Placeholder ||
        !t->node->source || !t->meta)
      continue;
    PyRef shape = PyRef::steal(PyObject_GetAttrString(t->meta.get(), "shape"));
    if (!shape) throw PythonError();
    for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(shape.get()); ++d) {
      if (PyLong_AsLongLong(PyTuple_GET_ITEM(shape.get(), d)) != value) continue;
      ValuePtr v = ctx.size_value(t, d);
      if (!v->sym) return nullptr;
      ctx.guards().add_int_equals_sizes(src, ir::sym_symbol(0),
                                        {{t->node->source, static_cast<int>(d)}});
      return v;
    }
  }
  return nullptr;
}

// The frame's entry state: argument slots hold raw values; free variables
// come from the function's closure. A resume function's grad-mode __exit__
// parameters become the with-blocks they close.
void entry_state(CaptureContext& ctx, PyCodeObject* code, const ir::FrameView& frame,
                 std::vector<ValuePtr>& locals, std::vector<ValuePtr>& cells) {
  int n = code->co_nlocalsplus;
  locals.assign(n, nullptr);
  int nfree = 0;
  for (int i = 0; i < n; ++i)
    if (code->co_localspluskinds && (PyBytes_AS_STRING(code->co_localspluskinds)[i] & 0x80))
      ++nfree;
  const auto* exits = bytecode::resume_grad_exits(code);
  // A resume function (or loop body) made by torchlite: its int arguments are what the code
  // before the break left, often sizes (size_argument).
  const bool resumed = bytecode::user_code_of(code) != code;
  if (resumed) ctx.made_in_call = made_in_call_names(code);
  std::vector<int> ints;
  for (int i = 0; i < n && i < frame.nlocals; ++i) {
    unsigned char kind = PyBytes_AS_STRING(code->co_localspluskinds)[i];
    if (kind & 0x80) continue;  // CO_FAST_FREE: from the closure below
    PyObject* v = frame.locals[i];
    if (!v) continue;
    if (exits) {
      auto it = std::find_if(exits->begin(), exits->end(), [&](auto& e) { return e.first == i; });
      if (it != exits->end()) {
        locals[i] = Value::of_kind(VKind::GradModeExit);
        locals[i]->flag = it->second;
        continue;
      }
    }
    std::string name = utf8(PyTuple_GET_ITEM(code->co_localsplusnames, i));
    if (resumed && PyLong_CheckExact(v)) {
      ints.push_back(i);  // NOTE: after the tensors, which it may be a size of
      continue;
    }
    // NOTE: a float the code before the break left (`.item()`) is this call's number: a graph
    // input where tensor ops take it, not a constant (capture/scalar_inputs.h).
    if (resumed && PyFloat_CheckExact(v))
      if ((locals[i] = scalar_argument(ctx, v, ir::Source::local(i, name)))) continue;
    locals[i] = ctx.wrap(v, ir::Source::local(i, name));
  }
  for (int i : ints) {
    std::string name = utf8(PyTuple_GET_ITEM(code->co_localsplusnames, i));
    ir::SourcePtr src = ir::Source::local(i, name);
    if (!(locals[i] = size_argument(ctx, code, frame.locals[i], src, locals)) &&
        !(locals[i] = scalar_argument(ctx, frame.locals[i], src)))
      locals[i] = ctx.wrap(frame.locals[i], src);
  }
  for (int j = 0; j < nfree; ++j) {
    int slot = n - nfree + j;
    std::string name = utf8(PyTuple_GET_ITEM(code->co_localsplusnames, slot));
    PyObject* cell = frame.closure ? PyTuple_GET_ITEM(frame.closure, j) : nullptr;
    PyObject* contents = cell ? PyCell_GET(cell) : nullptr;
    ValuePtr c = Value::cell(contents ? ctx.wrap(contents, ir::Source::closure(j, name)) : nullptr);
    c->source = ir::Source::closure(j, name);
    cells.push_back(c);
  }
}

std::vector<ir::SideEffect> side_effects(CaptureContext& ctx, ResidualBuilder& rb) {
  std::vector<ir::SideEffect> out;
  // NOTE: the frame's containers first, while their sources still lead to them: a store
  // replayed before could rebind the path (`G_L.append(1); G_L = other` must not fill other).
  for (auto& c : ctx.sourced_containers) {
    if (!c->mutated) continue;
    ir::SideEffect s;
    s.kind = c->kind == VKind::List    ? ir::SideEffect::Kind::ReplaceList
             : c->kind == VKind::Deque ? ir::SideEffect::Kind::ReplaceDeque
                                       : ir::SideEffect::Kind::ReplaceDict;
    s.target = c->source;
    ir::Residual r;
    r.kind = c->kind == VKind::Dict ? ir::Residual::Kind::Dict : ir::Residual::Kind::List;
    r.keys = c->keys;
    for (auto& item : c->items) r.items.push_back(rb.build(item));
    s.value = std::move(r);
    out.push_back(std::move(s));
  }
  for (auto& e : ctx.effects) {
    ir::SideEffect s;
    s.kind = e.kind;
    s.target = e.target;
    s.name = e.name;
    s.key = e.key;
    s.value = rb.build(e.value);
    out.push_back(std::move(s));
  }
  return out;
}

ResumeValue resume_value(ResidualBuilder& rb, const ValuePtr& v) {
  ResumeValue out;
  if (v->kind == VKind::Method && v->self && !v->flag) {
    out.value = rb.build(v->self);
    if (v->obj)
      out.func = v->obj;
    else
      out.attr = v->method_name;
    if (out.func || !out.attr.empty()) return out;
  }
  out.value = rb.build(v);
  return out;
}

// The list or dict `v` made by the trace as the resume's local it also is, else `rb`'s.
ir::Residual iterated_container(ResidualBuilder& rb, const ValuePtr& v,
                                const std::unordered_map<const Value*, int>& held_by_local) {
  auto local = held_by_local.find(v.get());
  if (local == held_by_local.end() || v->source) return rb.build(v);
  ir::Residual r;
  r.kind = ir::Residual::Kind::ResumeLocal;
  r.index = local->second;
  return r;
}

// A loop's iterator at a graph break: made again by CPython over the list or dict under it
// (LazyIter::live), else a tuple of the items still to come.
ir::Residual iterator_at_break(ResidualBuilder& rb, const ValuePtr& it,
                               std::unordered_set<const Value*>& seen,
                               const std::unordered_map<const Value*, int>& held_by_local) {
  // NOTE: one iterator in two places (nested loops over one iterator) must stay one object.
  if (!seen.insert(it.get()).second)
    graph_break("live_value_at_break",
                "one " + it->type_name() + " iterated twice at a graph break");
  if (auto live = live_iterator(it)) {
    ir::Residual r;
    r.kind = ir::Residual::Kind::Iterator;
    r.value = live->factory;
    r.index = static_cast<int>(live->skip);
    for (const ValuePtr& a : live->args)
      r.items.push_back(a->kind == VKind::Iterator ? iterator_at_break(rb, a, seen, held_by_local)
                                                   : iterated_container(rb, a, held_by_local));
    return r;
  }
  auto items = remaining_items(it);
  if (!items)
    graph_break("live_value_at_break", "a " + it->type_name() + " being iterated at a graph break");
  return rb.build(Value::tuple(std::move(*items)));
}

// The frame's cell variables where the trace stopped, in slot order.
std::vector<ValuePtr> frame_cells(const std::vector<ValuePtr>& locals, PyCodeObject* code) {
  std::vector<ValuePtr> out;
  const char* kinds = PyBytes_AS_STRING(code->co_localspluskinds);
  for (int i = 0; i < code->co_nlocalsplus; ++i) {
    if (!(kinds[i] & kFastCell)) continue;
    const ValuePtr& c = i < static_cast<int>(locals.size()) ? locals[i] : nullptr;
    // NOTE: 3.12 inlines a comprehension whose variable a closure captures as a cell the
    // comprehension makes and drops: stopped inside it, the slot holds another value.
    if (!c || c->kind != VKind::Cell || c->source)
      graph_break("live_value_at_break", "a cell variable in flux at a graph break");
    out.push_back(c);
  }
  return out;
}

// The plain locals the resume function takes, ascending: the bound ones that are not cells. A
// cell (an argument one included) goes on as a cell of the bridge's closure (frame_cells,
// ResidualBuilder::add_frame_cells).
std::vector<int> passed_locals(const std::vector<ValuePtr>& locals, PyCodeObject* code) {
  std::vector<int> out;
  const char* kinds = PyBytes_AS_STRING(code->co_localspluskinds);
  for (int i = 0; i < code->co_nlocals && i < static_cast<int>(locals.size()); ++i) {
    if (!locals[i] || (kinds[i] & kFastCell)) continue;
    if (locals[i]->kind == VKind::Cell)
      graph_break("live_value_at_break", "a cell object in a plain local at a graph break");
    out.push_back(i);
  }
  return out;
}

// Every size value CPython receives from the frame (at a break: the locals, the stack, the
// frame's cells, what the resume function goes on with; else its result) is a plain number
// from here on. An int computed from the inputs' sizes alone (`t = x.size(1)`, `b * t`) is
// handed on as the number those sizes give at each call (a SymSize residual, read from the
// frame's tensors): an entry serving other sizes (a size-generic graph) hands on each call's
// own number, with nothing to guard. Any other symbolic value is specialised (a relation
// `expr == value`, checked by the guards). Returns the ints kept symbolic.
// A lazy iterator may hold sizes where the walk cannot see: the entry then keeps exact sizes.
std::unordered_set<const Value*> hand_on_sizes(CaptureContext& ctx,
                                               const std::vector<ValuePtr>& roots) {
  std::unordered_set<const Value*> kept;
  if (!ctx.any_sym) return kept;
  std::unordered_set<const Value*> seen;
  std::function<void(const ValuePtr&)> walk = [&](const ValuePtr& v) {
    if (!v || !seen.insert(v.get()).second) return;
    if (v->is_const()) {
      if (v->sym && !v->fsym && !v->sym_slice && PyLong_CheckExact(v->obj.get()) &&
          of_input_sizes(ctx, *v->sym)) {
        kept.insert(v.get());
        return;
      }
      ctx.specialise(v);
      return;
    }
    // NOTE: a folded tensor handed on is its graph node's result, computed at each call's
    // sizes; only a size not of the inputs' sizes alone is pinned (`torch.zeros(x.shape[0], 4)`
    // returned kept s0 exact: a recompile at every size).
    for (const ValuePtr& s : v->folded_sizes)
      if (!(s->sym && !s->fsym && !s->sym_slice && PyLong_CheckExact(s->obj.get()) &&
            of_input_sizes(ctx, *s->sym)))
        ctx.specialise(s);
    if (v->kind == VKind::Iterator && v->lazy)
      ctx.read_size("a lazy iterator live at a graph break");
    for (const auto* list : {&v->items, &v->kwdefaults, &v->cells})
      for (const ValuePtr& x : *list) walk(x);
    for (const ValuePtr& x : {v->self, v->cell_contents, v->attrs, v->mapping, v->same_object})
      walk(x);
  };
  for (const ValuePtr& v : roots) walk(v);
  return kept;
}

// The state CPython needs at the instruction the tracer stopped at.
// `route_step`: the break is at an optimizer's step (optimizer_step.h), which CPython calls as
// torchlite's compiled step instead.
// `hints`: the top-level frame's plan, whose inputs the SymSize residuals read by their local
// names (record_size_hint); an inlined level's locals are other variables.
ResumePlan resume_plan(CaptureContext& ctx, ResidualBuilder& rb, const CaptureContext::Stopped& at,
                       PyCodeObject* code, int index, bool region, bool route_step,
                       bool hints = true) {
  ResumePlan plan;
  plan.index = index;
  plan.region = region;
  plan.grad_mode = ctx.grad_enabled();
  std::unordered_set<const Value*> iterators;
  // NOTE: the locals are passed first; an iterator over a list or dict one of them holds
  // iterates that very object (ResumeLocal), not a second copy of it.
  // NOTE: a position counts the locals passed (passed_locals), never a slot skipped there: an
  // argument that is a cell ahead of the list would shift every index after it.
  const std::vector<int> passed = passed_locals(at.locals, code);
  const auto& locals = at.locals;
  std::unordered_map<const Value*, int> held_by_local;
  for (size_t position = 0; position < passed.size(); ++position) {
    const ValuePtr& v = locals[passed[position]];
    if (v->kind == VKind::List || v->kind == VKind::Dict || v->kind == VKind::Deque)
      held_by_local.emplace(v.get(), static_cast<int>(position));
  }
  for (const ValuePtr& v : at.stack) {
    if (!v) {
      plan.stack += static_cast<char>(bytecode::Slot::Null);
    } else if (v->kind == VKind::GradModeExit) {
      plan.stack +=
          static_cast<char>(v->flag ? bytecode::Slot::ExitTrue : bytecode::Slot::ExitFalse);
      plan.stack_values.emplace_back();
    } else if (v->kind == VKind::Iterator) {
      if (!region) graph_break("live_value_at_break", "iterator on the stack at a graph break");
      // NOTE: a fresh iterator of a list or dict hands CPython the container itself (the
      // bridge's GET_ITER iterates it), so the loop sees what its body does to it; any other
      // is made again live over the frame's containers, or is a snapshot of what is left.
      plan.stack += static_cast<char>(bytecode::Slot::Iter);
      ValuePtr rest = unstarted_container(v);
      if (rest && (rest->source || !held_by_local.count(rest.get()))) {
        plan.stack_values.push_back(resume_value(rb, rest));
      } else if (rest) {  // iter() of the local's own list or dict
        plan.stack_values.emplace_back();
        ir::Residual& r = plan.stack_values.back().value;
        r.kind = ir::Residual::Kind::Iterator;
        r.index = 0;
        r.items.push_back(iterated_container(rb, rest, held_by_local));
      } else {
        plan.stack_values.emplace_back();
        plan.stack_values.back().value = iterator_at_break(rb, v, iterators, held_by_local);
      }
    } else if (route_step && optimizer_step_route(v)) {
      plan.stack += static_cast<char>(bytecode::Slot::Value);
      plan.stack_values.push_back(
          optimizer_step_call(v, [&](const ValuePtr& x) { return rb.build(x); }));
    } else {
      plan.stack += static_cast<char>(bytecode::Slot::Value);
      plan.stack_values.push_back(resume_value(rb, v));
    }
  }
  for (int i : passed) {
    if (value_made_in_call(locals[i], ctx.made_in_call))
      record_made_in_call(code, utf8(PyTuple_GET_ITEM(code->co_localsplusnames, i)));
    plan.local_slots.push_back(i);
    plan.locals.push_back(resume_value(rb, locals[i]));
    if (hints && plan.locals.back().value.kind == ir::Residual::Kind::SymSize)
      record_size_hint(code, utf8(PyTuple_GET_ITEM(code->co_localsplusnames, i)),
                       plan.locals.back().value);
  }
  return plan;
}

// A graph that writes tensors is valid only for inputs that share memory as traced (one
// object through two names, views of one storage): reads after a write, and the overlap checks
// of in-place ops, depend on it. Inputs read through attributes (a module's parameters and
// buffers) are left out: they are many, and an argument aliasing them is not a pattern worth a
// per-call cost.
// NOTE: the guard costs ~1 us per tensor on every call: it is made only when the graph writes
// one of the inputs it would check (or a tensor it cannot name). A graph that writes nothing
// of them (a random draw, no_grad(), a BatchNorm updating its buffers) gives the same answers
// however its arguments share memory.
void guard_storage_aliasing(CaptureContext& ctx) {
  ir::InputWrites writes = ir::written_inputs(ctx.graph());
  if (!writes.unknown && writes.placeholders.empty()) return;
  std::vector<ir::SourcePtr> sources;
  std::vector<PyObject*> tensors;
  bool written = writes.unknown;
  for (const auto& [src, t] : ctx.tensor_inputs()) {
    bool through_attr = false;
    for (const ir::Source* s = src.get(); s; s = s->base.get())
      through_attr = through_attr || s->kind == ir::SourceKind::Attr;
    if (through_attr) continue;
    sources.push_back(src);
    tensors.push_back(t);
    for (const ir::Node* p : writes.placeholders) written = written || p->source == src;
  }
  if (written && sources.size() >= 2) ctx.guards().add_storage_aliasing(sources, tensors);
}

// The levels below the frame a nested trace stops in (`path`, outermost first, the frame's own
// level first): each one's plan (ResumePlan::nested), checked to be one CPython can go on from.
std::vector<ResumePlan::Level> nested_levels(CaptureContext& ctx, ResidualBuilder& rb,
                                             const ResumePlan& top,
                                             const std::vector<GraphBreak::Level>& path,
                                             const std::vector<CaptureContext::Stopped>& frames) {
  std::vector<ResumePlan::Level> out;
  for (size_t d = 1; d < path.size(); ++d) {
    auto* code = reinterpret_cast<PyCodeObject*>(path[d].code.get());
    ResumePlan p = resume_plan(ctx, rb, frames[d], code, path[d].index, false, false, false);
    for (char c : p.stack)
      if (c == static_cast<char>(bytecode::Slot::ExitTrue) ||
          c == static_cast<char>(bytecode::Slot::ExitFalse))
        graph_break("live_value_at_break", "a with-block open in an inlined call at a graph break");
    ResumePlan::Level l;
    l.code = path[d].code;
    l.globals = path[d].globals;
    l.closure = path[d].closure;
    l.index = path[d].index;
    l.stack = std::move(p.stack);
    l.stack_values = std::move(p.stack_values);
    l.local_slots = std::move(p.local_slots);
    l.locals = std::move(p.locals);
    out.push_back(std::move(l));
  }
  // NOTE: made (and cached) now, so a level CPython could not go on from is a break here, where
  // the caller's frame can still break at its call instead.
  try {
    bytecode::call_through_bridge(reinterpret_cast<PyCodeObject*>(path[0].code.get()), top.index,
                                  top.stack, top.local_slots);
    for (size_t d = 0; d + 1 < out.size(); ++d)
      bytecode::call_through_bridge(reinterpret_cast<PyCodeObject*>(out[d].code.get()),
                                    out[d].index, out[d].stack, out[d].local_slots);
    const ResumePlan::Level& last = out.back();
    bytecode::bridge_for({reinterpret_cast<PyCodeObject*>(last.code.get()), last.index, false,
                          last.stack, last.local_slots});
  } catch (const bytecode::CannotResume& e) {
    graph_break("live_value_at_break",
                std::string("no resume inside the inlined call: ") + e.what());
  }
  return out;
}

// One trace of the frame into `out`. `stop_at` >= 0: stop before that
// top-level instruction and record the plan for CPython to go on from there.
// Returns the top-level instruction a graph break happened at, or -1.
// `path`: stop inside inlined calls instead (nested_path); `levels`: the frames a break left.
int trace(CaptureResult& out, PyCodeObject* code, const ir::FrameView& frame, int stop_at,
          bool region, bool structural_modules, bool route_step = false,
          const std::vector<GraphBreak::Level>* path = nullptr,
          std::vector<GraphBreak::Level>* levels = nullptr, bool top_managers = true,
          bool* entered_top_manager = nullptr) {
  CaptureContext ctx(frame);
  ctx.inline_top_managers = top_managers;
  if (path)
    for (const auto& l : *path)
      ctx.stop_path.push_back({reinterpret_cast<PyCodeObject*>(l.code.get()), l.index});
  // NOTE: `self` of an __init__ is a new object on every call.
  ctx.structural_modules = structural_modules || utf8(code->co_name) == "__init__";
  int top_index = -1;
  try {
    std::vector<ValuePtr> locals, cells;
    // NOTE: a break while binding the inputs points at the function's first line.
    ctx.filename = utf8(code->co_filename);
    ctx.lineno = code->co_firstlineno;
    entry_state(ctx, code, frame, locals, cells);
    Tracer tracer(ctx, code, frame.globals, frame.builtins, 0);
    tracer.stop_at(stop_at);
    if (path) tracer.stop_on_path();
    ValuePtr ret = tracer.run(std::move(locals), std::move(cells));
    for (const auto& gen : ctx.generators)
      if (gen->suspended_in_handler_region())
        graph_break("live_value_at_break",
                    "a generator left suspended inside a try or with block (CPython runs its "
                    "cleanup when it is freed)");
    ResidualBuilder rb(ctx, tracer.stopped());
    if (tracer.stopped()) {
      // Nested: each frame of the path as it stopped, the top-level one first.
      std::vector<CaptureContext::Stopped> frames(ctx.stopped.rbegin(), ctx.stopped.rend());
      if (!path) frames = {{tracer.stack(), tracer.locals()}};
      TL_CHECK(frames.size() == (path ? path->size() : 1)) << "a nested stop missed a frame";
      std::vector<const CaptureContext::Stopped*> all;
      for (const auto& f : frames) all.push_back(&f);
      std::vector<ValuePtr> cells_at_break = frame_cells(frames[0].locals, code);
      std::vector<ValuePtr> handed_on = cells_at_break;
      for (const CaptureContext::Stopped* f : all) {
        handed_on.insert(handed_on.end(), f->stack.begin(), f->stack.end());
        handed_on.insert(handed_on.end(), f->locals.begin(), f->locals.end());
      }
      rb.keep_symbolic(hand_on_sizes(ctx, handed_on));
      rb.add_frame_cells(cells_at_break);
      out.side_effects = side_effects(ctx, rb);
      out.resume = resume_plan(ctx, rb, frames[0], code, path ? (*path)[0].index : stop_at, region,
                               route_step);
      out.resume->frame_cells = static_cast<int>(cells_at_break.size());
      if (path) {
        for (char c : out.resume->stack)
          if (c != static_cast<char>(bytecode::Slot::Value) &&
              c != static_cast<char>(bytecode::Slot::Null))
            graph_break("live_value_at_break",
                        "a with-block or loop open at an inlined call's break");
        out.resume->grad_mode = ctx.stop_grad_mode;
        out.resume->nested = nested_levels(ctx, rb, *out.resume, *path, frames);
      }
    } else {
      rb.keep_symbolic(hand_on_sizes(ctx, {ret}));
      out.result = rb.build(ret);
      out.side_effects = side_effects(ctx, rb);
    }
    out.closures = rb.take_closures();
    ctx.graph().set_output(rb.take_outputs());
    ctx.drop_unused_inputs();
    ctx.graph().lint();
    guard_storage_aliasing(ctx);
  } catch (const GraphBreak& b) {
    out.resume.reset();  // NOTE: a break while the plan was made (a level CPython cannot resume)
    out.graph_break = BreakInfo{b.kind(), b.reason(), ctx.filename, ctx.lineno,
                                b.hint().empty() ? kind_hint(b.kind()) : b.hint()};
    top_index = b.top_index;
    if (levels) *levels = b.levels;
    if (PyErr_Occurred()) clear_expected_error();
  } catch (const PythonError&) {
    // An unexpected Python error while tracing: never wrong, so run eagerly. A fatal
    // one (Ctrl-C) reaches the user instead, and no cache entry is made.
    if (fatal_python_error_pending()) throw;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    PyRef type = PyRef::steal(t), value = PyRef::steal(v), trace = PyRef::steal(tb);
    std::string msg = type ? reinterpret_cast<PyTypeObject*>(type.get())->tp_name : "error";
    PyRef s = value ? PyRef::steal(PyObject_Str(value.get())) : PyRef();
    if (s && PyUnicode_Check(s.get())) msg += std::string(": ") + PyUnicode_AsUTF8(s.get());
    clear_expected_error();
    out.graph_break = BreakInfo{"op_error", "error while tracing: " + msg, ctx.filename, ctx.lineno,
                                kind_hint("op_error")};
  }
  if (entered_top_manager) *entered_top_manager = ctx.entered_top_manager;
  out.graph = ctx.graph_ptr();
  out.guards = std::move(ctx.guards());
  out.example_inputs = ctx.example_inputs();
  out.reads_sizes = ctx.reads_sizes;
  out.reads_sizes_why = ctx.reads_sizes_why;
  out.sym_table = ctx.sym_table;
  out.sym_relations = ctx.sym_relations;
  return top_index;
}

bool is_call(const bytecode::Bytecode& bc, int index) {
  if (index < 0 || index >= static_cast<int>(bc.insts.size())) return false;
  const int op = bc.insts[index].opcode;
  return op == CALL || op == CALL_FUNCTION_EX;
}

// `index` lies in no try, with or loop block of `bc` (a resume function entered there, or a
// bridge running it, would have no handler or loop to go on in).
bool outside_blocks(const bytecode::Bytecode& bc, int index, int* stop = nullptr) {
  std::string why;
  BreakPoint at = break_point(bc, index, why);
  if (at.index < 0 || at.region) return false;
  const int offset = bc.insts[index].offset;
  for (const auto& e : bc.exception_table)
    if (offset >= e.start && offset < e.end) return false;
  if (stop) *stop = at.index;
  return true;
}

// Where a nested trace stops (ResumePlan::nested): the frames a break left (`levels`, innermost
// first, as GraphBreak::levels), outermost first, down to the deepest one CPython can go on in;
// the innermost one's index is where its bridge starts. Empty when that is the top-level frame
// (it breaks at its instruction as before).
std::vector<GraphBreak::Level> nested_path(const std::vector<GraphBreak::Level>& levels,
                                           int top_index) {
  std::vector<GraphBreak::Level> path(levels.rbegin(), levels.rend());
  if (path.size() < 2 || path[0].index != top_index) return {};
  std::vector<bytecode::Bytecode> codes;
  for (const auto& l : path)
    codes.push_back(bytecode::decode(reinterpret_cast<PyCodeObject*>(l.code.get())));
  if (!is_call(codes[0], path[0].index)) return {};
  size_t deepest = 0;
  int stop = -1;
  for (size_t d = 1; d < path.size() && path[d].nestable; ++d) {
    int at = -1;
    if (outside_blocks(codes[d], path[d].index, &at)) {
      deepest = d;
      stop = at;
    }
    // NOTE: a level above the innermost one is inside its call, which must be the next frame.
    if (!is_call(codes[d], path[d].index) || !outside_blocks(codes[d], path[d].index)) break;
  }
  if (deepest == 0) return {};
  path.resize(deepest + 1);
  path.back().index = stop;
  return path;
}

// Meta tensors that require grad record autograd nodes, which would call the user's
// saved_tensors_hooks pack functions at trace time (on meta tensors, once per trace): set
// torch's "tracing" flag, which defers default hooks, for the length of a capture.
class DeferSavedTensorHooks {
 public:
  DeferSavedTensorHooks() {
    PyRef autograd = PyRef::steal(PyImport_ImportModule("torch._C._autograd"));
    set_ = autograd ? PyRef::steal(PyObject_GetAttrString(autograd.get(),
                                                          "_saved_tensors_hooks_set_tracing"))
                    : PyRef();
    if (!set_) {  // NOTE: older torch: no such flag, nothing to defer
      PyErr_Clear();
      return;
    }
    prev_ = PyRef::steal(PyObject_CallOneArg(set_.get(), Py_True));
    if (!prev_) {
      PyErr_Clear();
      set_ = PyRef();
    }
  }
  ~DeferSavedTensorHooks() {
    if (!set_) return;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyRef r = PyRef::steal(PyObject_CallOneArg(set_.get(), prev_.get()));
    if (!r) PyErr_Clear();
    PyErr_Restore(t, v, tb);
  }
  DeferSavedTensorHooks(const DeferSavedTensorHooks&) = delete;
  DeferSavedTensorHooks& operator=(const DeferSavedTensorHooks&) = delete;

 private:
  PyRef set_, prev_;
};

}  // namespace

CaptureResult capture_frame(PyCodeObject* code, PyObject* func, const ir::FrameView& frame,
                            bool structural_modules) {
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  (void)func;
  CaptureResult out;
  // NOTE: code run with restricted builtins (namedtuple's generated __new__ has
  // `__builtins__ = {}`) cannot run the code a compiled entry or resume function needs.
  if (!frame.builtins || !PyDict_Check(frame.builtins) ||
      !PyDict_GetItemString(frame.builtins, "__import__")) {
    out.graph_break =
        BreakInfo{"unsupported_bytecode", "code run with restricted builtins",
                  utf8(code->co_filename), code->co_firstlineno, kind_hint("unsupported_bytecode")};
    out.no_resume = "its builtins lack __import__";
    out.capture_ms = elapsed();
    return out;
  }
  torch_api();  // import torch before anything is traced
  // NOTE: a TorchFunctionMode or TorchDispatchMode the caller entered (or the frame's own
  // with-block, run eagerly at its break) must see every op: the frame runs eagerly while
  // one is active; the global-state guard sends calls without one back to capture.
  if (guards::torch_modes_active()) {
    out.guards.add_global_state();
    out.graph_break =
        BreakInfo{"active_torch_mode",
                  "a torch function or dispatch mode is active (it must see "
                  "every op)",
                  utf8(code->co_filename), code->co_firstlineno, kind_hint("active_torch_mode")};
    out.no_resume = "a torch function or dispatch mode is active";
    out.capture_ms = elapsed();
    return out;
  }
  DeferSavedTensorHooks defer_hooks;
  std::vector<GraphBreak::Level> levels;
  bool entered_manager = false;
  int top_index = trace(out, code, frame, -1, false, structural_modules, false, nullptr, &levels,
                        true, &entered_manager);
  // A break after the frame entered a Python context manager: traced again with its
  // with-block as the break (CaptureContext::inline_top_managers); the restarts below too.
  const bool top_managers = !(out.graph_break && entered_manager);
  if (!top_managers) {
    out = CaptureResult();
    levels.clear();
    top_index =
        trace(out, code, frame, -1, false, structural_modules, false, nullptr, &levels, false);
  }
  if (!out.graph_break) {
    out.capture_ms = elapsed();
    return out;
  }
  // Trace again, up to where CPython takes over (the restart keeps every
  // op of the instruction that broke, an inlined call's included, out of
  // the graph).
  std::string why;
  BreakPoint at{-1, false};
  if (top_index < 0)
    why = "the break is not at an instruction of the frame (" + out.graph_break->kind + ")";
  else
    at = break_point(bytecode::decode(code), top_index, why);
  // A break inside inlined calls: the frames down to it go on after it each in its own resume
  // function, so the code before the break on every level is in this graph (one break in all,
  // not one per level). Else (or when that trace cannot resume) the frame breaks at its call.
  std::vector<GraphBreak::Level> path;
  if (at.index >= 0 && !at.region && out.graph_break->kind != "optimizer_step")
    path = nested_path(levels, top_index);
  std::optional<CaptureResult> nested;
  if (!path.empty()) {
    nested.emplace();
    trace(*nested, code, frame, -1, false, structural_modules, false, &path, nullptr, top_managers);
    if (!nested->resume) nested.reset();
  }
  if (at.index >= 0) {
    CaptureResult again;
    trace(again, code, frame, at.index, at.region, structural_modules,
          out.graph_break->kind == "optimizer_step", nullptr, nullptr, top_managers);
    // NOTE: inlined code that writes Python state before the break (an LR scheduler's
    // `self._step_count += 1`, a counter, a cache) tends to read it too: in the caller's graph
    // that read is a guard on a value each call changes (a recapture per call), where the
    // callee's own frame runs it as before. Such a break stays at the call.
    if (nested && (!again.resume || nested->side_effects.size() <= again.side_effects.size())) {
      nested->graph_break = out.graph_break;
      nested->capture_ms = elapsed();
      return std::move(*nested);
    }
    if (again.resume) {
      again.graph_break = out.graph_break;
      again.capture_ms = elapsed();
      return again;
    }
    why = again.graph_break ? "tracing up to the break failed: " + again.graph_break->reason
                            : "the trace did not reach the resume point";
  }
  out.no_resume = why;
  out.capture_ms = elapsed();
  return out;
}

}  // namespace tl::capture
