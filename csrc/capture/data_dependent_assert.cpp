// An `assert` on a tensor's value, checked when the graph runs instead of breaking it.
//
// `assert lengths.max().item() <= slen` (XLM's and FlauBERT's embeddings), `assert (x > 0).all()`:
// the truth of the condition is data the trace does not have. Breaking there splits the frame
// (and, inside an inlined call, every caller up to the top). Dynamo puts `_assert_async` in its
// graph for a tensor condition and breaks on `.item()` unless scalars are captured; here both
// become one graph: the trace goes on as if the assertion held, and the graph gets a check of
// the condition at the assert (torchlite/_asserts.py). A failing check raises before anything
// visible has run (no check is added once the graph has an in-place op or a random draw), so
// the frame runs eagerly from its start (frame/captured_frame.cpp) and raises eager's own
// AssertionError, with the message as the user wrote it. The same holds for any branch that only
// raises: pytest's rewrite of an assert in a test module (`@py_assert1 = x > 0; ...; if not
// @py_assert8: raise AssertionError(<explanation>)`, every step kept in a local) and a model's
// own `if (ids < 0).any(): raise ValueError(...)`. Not in a graph autograd may record
// (grad mode on with a trainable module or input: its joint trace keeps torch's ops only):
// there the assert breaks the graph as before; models run under torch.no_grad() get the check.
//
// `.item()` itself is kept out of the graph: when the number it returns only feeds the assert
// (compared with a plain int or float, or tested for truth), the comparison runs on the tensor
// cast to what Python compares in (an int64 for integers and bools, a float64 for floats: a
// float32 tensor compared with a Python float in float32 would round the float), and where no
// cast compares exactly (an integer against a float), the frame breaks at `.item()` as before.
#include "capture/data_dependent_assert.h"

#include <opcode.h>

#include <algorithm>

#include "capture/graph_break.h"
#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "core/errors.h"
#include "core/python_helpers.h"
#include "ir/effects.h"

namespace tl::capture {
namespace {

bool is_conditional_jump(const bytecode::Instruction& inst, bool& if_true) {
  const std::string& op = inst.opname;
  if (op.rfind("POP_JUMP", 0) != 0 || inst.jump_target < 0) return false;
  if_true = op.find("IF_TRUE") != std::string::npos;
  return if_true || op.find("IF_FALSE") != std::string::npos;
}

// An instruction that pushes one value without touching the stack below (the other operand of
// the comparison, loaded after the item() call).
bool pushes_operand(const bytecode::Instruction& inst) {
  switch (inst.opcode) {
    case LOAD_FAST:
    case LOAD_CONST:
    case LOAD_DEREF:
#ifdef LOAD_FAST_CHECK
    case LOAD_FAST_CHECK:
#endif
      return true;
    case LOAD_GLOBAL:
      return (inst.arg & 1) == 0;  // NOTE: bit 0 pushes a NULL too (3.11+)
    default:
      return false;
  }
}

// The code from `from` always ends by raising an exception (`raise AssertionError(...)`): it only
// jumps forward and within itself, returns nowhere and reaches a `raise <exception>` before
// `limit`. An assert statement's failing branch is one (LOAD_ASSERTION_ERROR ... RAISE_VARARGS),
// so is pytest's rewrite of it (`if not @py_assert1: ... raise AssertionError(<explanation>)`)
// and a plain `if (x < 0).any(): raise ValueError(...)`. When the check of such a branch fails,
// the frame runs eagerly from its start, so what the branch does is not traced: only that it is
// the exceptional way out (taken rarely, ending the call) makes checking worth it.
bool raises_from(const std::vector<bytecode::Instruction>& insts, size_t from, size_t limit) {
  constexpr size_t kMaxBlock = 1024;  // NOTE: pytest's message building for a long assert
  limit = std::min({limit, insts.size(), from + kMaxBlock});
  size_t furthest = from;  // the furthest jump target seen inside the block
  for (size_t i = from; i < limit; ++i) {
    const bytecode::Instruction& inst = insts[i];
    if (inst.jump_target >= 0) {
      if (static_cast<size_t>(inst.jump_target) <= i) return false;  // a loop
      furthest = std::max(furthest, static_cast<size_t>(inst.jump_target));
      continue;
    }
    switch (inst.opcode) {
      case RAISE_VARARGS:
        if (inst.arg == 0) return false;  // NOTE: a bare `raise` re-raises what a handler caught
        if (furthest <= i) return true;   // NOTE: else a jump skips this raise
        break;
      case RETURN_VALUE:
#ifdef RETURN_CONST
      case RETURN_CONST:
#endif
      case YIELD_VALUE:
      case RERAISE:
        return false;
      default:
        break;
    }
  }
  return false;
}

bool loads_local(const bytecode::Instruction& inst, int local) {
  bool loads = inst.opcode == LOAD_FAST;
#ifdef LOAD_FAST_CHECK
  loads = loads || inst.opcode == LOAD_FAST_CHECK;
#endif
  return loads && inst.arg == local;
}

// `STORE_FAST x; LOAD_FAST x` from `i`, with constants stored to other locals in between
// (pytest's rewritten assert keeps each step in a local `@py_assertN` and loads it back:
// `@py_assert7 = t.item(); @py_assert10 = False; @py_assert9 = @py_assert7 > @py_assert10`):
// stepped over, x added to `kept`.
size_t skip_store_load(const std::vector<bytecode::Instruction>& insts, size_t i,
                       std::vector<int>& kept) {
  const size_t n = insts.size();
  while (i < n) {
#ifdef STORE_FAST_LOAD_FAST
    // NOTE: 3.13 fuses a store and the next load of fast locals below 16.
    if (insts[i].opcode == STORE_FAST_LOAD_FAST && (insts[i].arg >> 4) == (insts[i].arg & 15)) {
      kept.push_back(insts[i].arg & 15);
      ++i;
      continue;
    }
#endif
    if (insts[i].opcode != STORE_FAST) break;
    const int x = insts[i].arg;
    size_t j = i + 1;
    while (j + 1 < n && insts[j].opcode == LOAD_CONST) {
      const bytecode::Instruction& store = insts[j + 1];
      if (store.opcode == STORE_FAST && store.arg != x) {
        j += 2;
        continue;
      }
#ifdef STORE_FAST_LOAD_FAST
      if (store.opcode == STORE_FAST_LOAD_FAST && (store.arg >> 4) != x && (store.arg & 15) == x) {
        kept.push_back(x);
        return skip_store_load(insts, j + 2, kept);
      }
#endif
      break;
    }
    if (j >= n || !loads_local(insts[j], x)) break;
    kept.push_back(x);
    i = j + 1;
  }
  return i;
}

// Every local of `kept` is stored again from instruction `i` on before anything else runs
// (pytest's `@py_assert1 = @py_assert3 = None` where its assert holds): none of them is ever
// read while it holds the tensor the trace put where CPython has a number.
bool stored_again(const std::vector<bytecode::Instruction>& insts, size_t i,
                  const std::vector<int>& kept) {
  std::vector<int> stored;
  for (; i < insts.size(); ++i) {
    const bytecode::Instruction& inst = insts[i];
    if (inst.opcode == STORE_FAST) {
      stored.push_back(inst.arg);
#ifdef STORE_FAST_STORE_FAST
    } else if (inst.opcode == STORE_FAST_STORE_FAST) {
      stored.push_back(inst.arg >> 4);
      stored.push_back(inst.arg & 15);
#endif
    } else if (inst.opcode != LOAD_CONST && inst.opcode != COPY && inst.opcode != NOP) {
      break;
    }
  }
  for (int k : kept)
    if (std::find(stored.begin(), stored.end(), k) == stored.end()) return false;
  return true;
}

// An attribute read of the value on top (`self.max_len`): replaces it, no method form.
bool reads_attribute(const bytecode::Instruction& inst) {
  if (inst.opcode != LOAD_ATTR) return false;
#if PY_VERSION_HEX >= 0x030C0000
  return (inst.arg & 1) == 0;
#else
  return true;
#endif
}

long long meta_numel(const ValuePtr& t) {
  PyRef n = PyRef::steal(PyObject_CallMethod(t->meta.get(), "numel", nullptr));
  if (!n) throw PythonError();
  long long v = PyLong_AsLongLong(n.get());
  if (v == -1 && PyErr_Occurred()) throw PythonError();
  return v;
}

// How `t.item()` compares: as a Python int ("long": integer and bool tensors), a Python float
// ("double": floating tensors), or not at all (complex, unsigned wider than 8 bits: "").
std::string item_kind(const ValuePtr& t) {
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(t->meta.get(), "dtype"));
  PyRef name = dtype ? PyRef::steal(PyObject_Str(dtype.get())) : PyRef();
  if (!name) throw PythonError();
  const std::string s = detail::utf8(name.get());
  for (const char* i :
       {"torch.bool", "torch.uint8", "torch.int8", "torch.int16", "torch.int32", "torch.int64"})
    if (s == i) return "long";
  for (const char* f : {"torch.float16", "torch.bfloat16", "torch.float32", "torch.float64"})
    if (s == f) return "double";
  return "";
}

// A module with a parameter that requires grad, among `o` or the items of a tuple, list or dict
// `o` is (a decorator's `*args`, `**kwargs`).
bool holds_trainable_module(PyObject* o, int depth = 0) {
  if (PyTuple_Check(o) || PyList_Check(o)) {
    PyRef seq = PyRef::steal(PySequence_Fast(o, "items"));
    if (!seq) throw PythonError();
    for (Py_ssize_t i = 0; depth == 0 && i < PySequence_Fast_GET_SIZE(seq.get()); ++i)
      if (holds_trainable_module(PySequence_Fast_GET_ITEM(seq.get(), i), 1)) return true;
    return false;
  }
  if (PyDict_Check(o)) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (depth == 0 && PyDict_Next(o, &pos, &k, &v))
      if (holds_trainable_module(v, 1)) return true;
    return false;
  }
  int is_module = PyObject_IsInstance(o, torch_api().module_type.get());
  if (is_module < 0) throw PythonError();
  if (!is_module) return false;
  PyRef params = PyRef::steal(PyObject_CallMethod(o, "parameters", nullptr));
  PyRef it = params ? PyRef::steal(PyObject_GetIter(params.get())) : PyRef();
  if (!it) throw PythonError();
  while (PyRef p = PyRef::steal(PyIter_Next(it.get()))) {
    PyRef rg = PyRef::steal(PyObject_GetAttrString(p.get(), "requires_grad"));
    if (!rg) throw PythonError();
    if (rg.get() == Py_True) return true;
  }
  if (PyErr_Occurred()) throw PythonError();
  return false;
}

// True when autograd may record the graph: grad mode on and an input that requires grad, or a
// module of the frame with such parameters (read later, they make it a training graph). Its
// joint trace records torch's ops only, so a check would vanish from the compiled training
// step (torchlite/_training.py refuses such a graph as a backstop, which runs it op by op).
bool training_graph(const CaptureContext& ctx) {
  if (!ctx.grad_enabled()) return false;
  for (const auto& [src, t] : ctx.tensor_inputs()) {
    PyRef rg = PyRef::steal(PyObject_GetAttrString(t, "requires_grad"));
    if (!rg) throw PythonError();
    if (rg.get() == Py_True) return true;
  }
  const ir::FrameView& frame = ctx.frame();
  for (int i = 0; i < frame.nlocals; ++i)
    if (frame.locals[i] && holds_trainable_module(frame.locals[i])) return true;
  return false;
}

[[noreturn]] void item_break() {
  graph_break("data_dependent_op",
              "Tensor.item() needs the tensor's values, which are not known while tracing");
}

}  // namespace

bool is_assertion_check(const ir::Node& n) {
  if (n.op != ir::OpKind::CallFunction || !n.target) return false;
  return n.target.get() == python_helper("asserts.check").get();
}

bool Tracer::checkable(const ValuePtr& cond) {
  if (!cond || !cond->is_tensor() || cond->folded || !cond->node || !cond->meta) return false;
  // NOTE: bool() of a tensor of several elements raises: left to CPython.
  if (meta_numel(cond) != 1) return false;
  return !ir::any_visible_effect(ctx_.graph()) && !training_graph(ctx_);
}

void Tracer::add_check(const ValuePtr& cond, bool holds_if) {
  PyRef flag = PyRef::borrow(holds_if ? Py_True : Py_False);
  ir::Node* check = ctx_.graph().add_call_function(
      python_helper("asserts.check"), {ir::Arg::of_node(cond->node), ir::Arg::constant(flag)}, {});
  check->location = ctx_.location;
}

std::optional<Tracer::AssertSite> Tracer::assert_site(size_t jump, const ValuePtr& cond) {
  const auto& insts = bc_.insts;
  bool if_true = false;
  if (jump >= insts.size() || !is_conditional_jump(insts[jump], if_true)) return std::nullopt;
  if (!cond || !cond->is_tensor()) return std::nullopt;
  const size_t target = static_cast<size_t>(insts[jump].jump_target);
  // NOTE: `assert a and b` tests `a` with a jump to the raise, `b` with a jump over it.
  const bool fall_raises = target > jump + 1 && raises_from(insts, jump + 1, target);
  const bool target_raises = raises_from(insts, target, insts.size());
  if (fall_raises == target_raises || !checkable(cond)) return std::nullopt;
  if (fall_raises) return AssertSite{target, if_true};
  return AssertSite{jump + 1, !if_true};
}

bool Tracer::check_assertion(const ValuePtr& cond) {
  std::optional<AssertSite> site = assert_site(pc_ - 1, cond);
  if (!site) return false;
  add_check(cond, site->holds_if);
  pc_ = site->holds_at;
  pending_item_ = PendingItem{};
  return true;
}

bool Tracer::call_torch_assert(PyObject* fn, const std::vector<ValuePtr>& args,
                               const KwArgs& kwargs) {
  if (fn != torch_api().assert_fn.get() || !kwargs.empty() || args.size() != 2 ||
      !args[1]->is_const() || !checkable(args[0]))
    return false;
  add_check(args[0], true);
  return true;
}

bool Tracer::begin_item_assert(const ValuePtr& fn, const std::vector<ValuePtr>& args,
                               const KwArgs& kwargs) {
  // `t.item()`, or `int(t)` of an integer tensor and `float(t)` of a floating one (the same
  // number; int() of a float truncates, and raises on NaN).
  ValuePtr t;
  if (fn->kind == VKind::Method && !fn->flag && fn->method_name == "item" && fn->self &&
      fn->self->is_tensor() && args.empty() && kwargs.empty()) {
    t = fn->self;
  } else if (fn->is_const() && args.size() == 1 && kwargs.empty() && args[0]->is_tensor() &&
             (fn->obj.get() == reinterpret_cast<PyObject*>(&PyLong_Type) ||
              fn->obj.get() == reinterpret_cast<PyObject*>(&PyFloat_Type))) {
    t = args[0];
    if (!t->folded && t->meta &&
        item_kind(t) !=
            (fn->obj.get() == reinterpret_cast<PyObject*>(&PyLong_Type) ? "long" : "double"))
      return false;
  } else {
    return false;
  }
  if (t->folded || !t->node) return false;
  const auto& insts = bc_.insts;
  std::vector<int> kept;  // locals holding the number or the comparison (pytest's rewrite)
  size_t i = skip_store_load(insts, pc_, kept);
  int compare = -1;
  if (i < insts.size() && pushes_operand(insts[i])) {
    ++i;
    while (i < insts.size() && reads_attribute(insts[i])) ++i;
    if (i >= insts.size() || insts[i].opcode != COMPARE_OP) return false;
  }
  if (i < insts.size() && insts[i].opcode == COMPARE_OP) {
    compare = static_cast<int>(i++);
    i = skip_store_load(insts, i, kept);
  }
#ifdef TO_BOOL
  if (i < insts.size() && insts[i].opcode == TO_BOOL) ++i;
#endif
  std::optional<AssertSite> site = assert_site(i, t);
  if (!site || !stored_again(insts, site->holds_at, kept)) return false;
  if (compare >= 0 && item_kind(t).empty()) return false;
  // NOTE: a copy, so the comparison finds it by identity whatever else the stack holds.
  ValuePtr pushed = Value::tensor(t->node, t->meta, t->device);
  pending_item_ = PendingItem{static_cast<int>(pc_ - 1), compare, pushed.get()};
  push(std::move(pushed));
  return true;
}

void Tracer::item_comparison(ValuePtr& a, ValuePtr& b) {
  const bool left = a.get() == pending_item_.value;
  if (left == (b.get() == pending_item_.value)) item_break();  // NOTE: not the pushed tensor
  ValuePtr& item = left ? a : b;
  const ValuePtr& other = left ? b : a;
  if (!other->is_const() || other->sym_slice) item_break();
  ctx_.specialise_scalars(other);  // NOTE: `exact` below reads the number
  PyObject* o = other->obj.get();
  const std::string kind = item_kind(item);
  bool exact = false;
  if (PyBool_Check(o)) {
    exact = true;
  } else if (PyLong_CheckExact(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) throw PythonError();
    // NOTE: a float64 holds every int up to 2**53 exactly, as Python's float/int compare does.
    const long long kExactInDouble = 1LL << 53;
    exact = overflow == 0 && (kind == "long" || (v <= kExactInDouble && v >= -kExactInDouble));
  } else if (PyFloat_CheckExact(o)) {
    // NOTE: an int64 in a float64 rounds past 2**53, where Python compares exactly.
    exact = kind == "double";
  }
  if (!exact) item_break();
  item = ctx_.call_op(nullptr, kind, {item}, {});
}

}  // namespace tl::capture
