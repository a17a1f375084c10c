// Opcode semantics of the capture interpreter (CPython 3.11, 3.12 and 3.13).
#include "capture/tracer.h"

#include <opcode.h>

#include "capture/autocast.h"
#include "capture/constant_fold.h"
#include "capture/graph_break.h"
#include "capture/lazy_iter.h"
#include "capture/py_helpers.h"
#include "capture/torch_api.h"
#include "capture/user_exception.h"
#include "core/errors.h"

namespace tl::capture {
namespace {

// A CALL's CaptureContext::direct_call never outlives its dispatch (a call that inlined
// nothing, a torch op, leaves it unmatched).
class DirectCallScope {
 public:
  explicit DirectCallScope(CaptureContext& ctx) : ctx_(ctx) {}
  ~DirectCallScope() { ctx_.direct_call = {}; }
  DirectCallScope(const DirectCallScope&) = delete;
  DirectCallScope& operator=(const DirectCallScope&) = delete;

 private:
  CaptureContext& ctx_;
};

constexpr int kMaxInlineDepth = 48;
constexpr int64_t kMaxInstructions = 2'000'000;

const char* kBinaryOps[] = {"add",  "and_",      "floordiv", "lshift",   "matmul",  "mul",  "mod",
                            "or_",  "pow",       "rshift",   "sub",      "truediv", "xor",  "iadd",
                            "iand", "ifloordiv", "ilshift",  "imatmul",  "imul",    "imod", "ior",
                            "ipow", "irshift",   "isub",     "itruediv", "ixor"};

PyObject* operator_fn(const char* name) {
  // Borrowed from the operator module, which lives forever.
  PyObject* fn = PyObject_GetAttrString(torch_api().operator_module.get(), name);
  if (!fn) throw PythonError();
  Py_DECREF(fn);
  return fn;
}

std::string utf8(PyObject* s) {
  const char* c = PyUnicode_AsUTF8(s);
  if (!c) throw PythonError();
  return c;
}

// Makes a running tracer's handled exception visible to the frames it calls (CPython's
// exc_info stack) for as long as it runs.
class ExcInfoScope {
 public:
  ExcInfoScope(std::vector<const ValuePtr*>& stack, const ValuePtr* slot) : stack_(stack) {
    stack_.push_back(slot);
  }
  ~ExcInfoScope() { stack_.pop_back(); }

 private:
  std::vector<const ValuePtr*>& stack_;
};

ValuePtr none_value() { return Value::constant(PyRef::borrow(Py_None)); }

ValuePtr bool_value(bool b) { return Value::constant(PyRef::borrow(b ? Py_True : Py_False)); }

// True when Python function `fn` never reads the parameter that receives its positional
// argument `index` (or the *args tuple that collects it). An exception leaving a with-block
// reaches __exit__(type, value, traceback); traced code has no traceback to give, so only an
// __exit__ that never looks at it (`def __exit__(self, *exc): ...`, `def __exit__(self, t, v,
// tb): self.close()`) is traced with the exception.
bool never_reads_argument(PyObject* fn, int index) {
  if (!PyFunction_Check(fn)) return false;
  auto* code = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn));
  int var = index;
  if (index >= code->co_argcount) {
    if (!(code->co_flags & CO_VARARGS)) return false;
    var = code->co_argcount + code->co_kwonlyargcount;
  }
  for (const bytecode::Instruction& inst : bytecode::decode(code).insts) {
    switch (inst.opcode) {
      case LOAD_FAST:
#ifdef LOAD_FAST_CHECK
      case LOAD_FAST_CHECK:
#endif
#ifdef LOAD_FAST_AND_CLEAR
      case LOAD_FAST_AND_CLEAR:
#endif
      case LOAD_CLOSURE:
      case MAKE_CELL:
      case DELETE_FAST:
        if (inst.arg == var) return false;
        break;
#ifdef LOAD_FAST_LOAD_FAST
      case LOAD_FAST_LOAD_FAST:
        if ((inst.arg >> 4) == var || (inst.arg & 15) == var) return false;
        break;
#endif
#ifdef STORE_FAST_LOAD_FAST
      case STORE_FAST_LOAD_FAST:
        if ((inst.arg & 15) == var) return false;
        break;
#endif
      default:
        break;
    }
  }
  return true;
}

// The __exit__ of a with-block (as BEFORE_WITH pushed it) that can be traced with an exception
// leaving the block: grad-mode managers, and a Python __exit__ that ignores the traceback.
bool exit_takes_exception(const ValuePtr& exit) {
  if (!exit) return false;
  if (exit->kind == VKind::GradModeExit) return true;
  return exit->kind == VKind::Method && exit->self && exit->obj &&
         never_reads_argument(exit->obj.get(), 3);
}

// NOTE: 3.13 puts the NULL (or self) of a call above the callable:
// `callable, self_or_null, args`; 3.11/3.12 put it below: `NULL|method, callable|self, args`.
constexpr bool kNullAboveCallable = PY_VERSION_HEX >= 0x030D0000;

}  // namespace

Tracer::Tracer(CaptureContext& ctx, PyCodeObject* code, PyObject* globals, PyObject* builtins,
               int depth, bool generator)
    : ctx_(ctx),
      code_(code),
      globals_(globals),
      builtins_(builtins),
      depth_(depth),
      generator_(generator) {
  if (depth > kMaxInlineDepth)
    graph_break("unsupported_bytecode",
                "call stack deeper than " + std::to_string(kMaxInlineDepth) + " inlined frames");
  int unsupported = CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE;
  if (!generator) unsupported |= CO_GENERATOR;
  if (code->co_flags & unsupported)
    graph_break("unsupported_bytecode",
                "call to generator or coroutine function " + utf8(code->co_name));
  bc_ = bytecode::decode(code);
  in_try_.assign(bc_.insts.size(), false);
  for (auto& e : bc_.exception_table) {
    int h = bc_.index_at_offset(e.target);
    if (h < 0 || h + 1 >= static_cast<int>(bc_.insts.size())) continue;
    if (bc_.insts[h].opcode != PUSH_EXC_INFO || bc_.insts[h + 1].opcode == WITH_EXCEPT_START)
      continue;
    for (size_t i = 0; i < bc_.insts.size(); ++i)
      if (bc_.insts[i].offset >= e.start && bc_.insts[i].offset < e.end) in_try_[i] = true;
  }
}

ValuePtr Tracer::pop() {
  TL_CHECK(!stack_.empty()) << "capture stack underflow in " << utf8(code_->co_name);
  ValuePtr v = std::move(stack_.back());
  stack_.pop_back();
  // NOTE: symbolic sizes are specialised by default: an instruction that may read a value as
  // a plain number (a branch, an attribute, a store, a yield) turns an expression into a
  // relation `expr == value`. Only the instructions in sym_aware move or follow them.
  if (!sym_aware_ && ctx_.any_sym)
    ctx_.specialise(v, /*scalars=*/!scalar_aware_);
  else if (!scalar_aware_ && ctx_.any_scalar)
    ctx_.specialise_scalars(v);
  return v;
}

namespace {

// Instructions that keep a symbolic size symbolic: they move values, or handle expressions
// themselves (arithmetic, comparisons, subscripts, calls: operators.cpp, calls.cpp).
bool sym_aware(int opcode) {
  switch (opcode) {
    case POP_TOP:
    case STORE_FAST:
#ifdef STORE_FAST_STORE_FAST
    case STORE_FAST_STORE_FAST:
#endif
#ifdef STORE_FAST_LOAD_FAST
    case STORE_FAST_LOAD_FAST:
#endif
    case BINARY_OP:
    case UNARY_NEGATIVE:
    case COMPARE_OP:
    case CONTAINS_OP:
    case UNPACK_SEQUENCE:
    case UNPACK_EX:
    case BUILD_SLICE:
    case BINARY_SUBSCR:
    case STORE_SUBSCR:
#ifdef BINARY_SLICE
    case BINARY_SLICE:
    case STORE_SLICE:
#endif
    case LIST_EXTEND:
    case LIST_APPEND:
    case MAP_ADD:
    // NOTE: `f(*args, **kwargs)` and `{**a}` move the values (keys are compared): a wrapper
    // handing its **kwargs on (transformers' deprecate_kwarg) keeps the sizes in them.
    case DICT_MERGE:
    case DICT_UPDATE:
#ifdef LIST_TO_TUPLE
    case LIST_TO_TUPLE:
#endif
    case CALL:
#ifdef CALL_KW
    case CALL_KW:
#endif
    case CALL_FUNCTION_EX:
    case RETURN_VALUE:
      return true;
    default:
      return false;
  }
}

// Instructions that keep a scalar input (a number a resume function takes per call) one: they
// move it (into a tuple, out of an inlined function, into the frame's result: a residual reads
// it from its source), or hand it to a tensor op (binary_op, call: the op decides,
// capture/scalar_inputs.h) or an inlined function. Every other instruction reads the number
// (a tuple's consumers walk its items): it is specialised.
bool scalar_aware(int opcode) {
  switch (opcode) {
    case POP_TOP:
    case BUILD_TUPLE:
    case RETURN_VALUE:
    case STORE_FAST:
#ifdef STORE_FAST_STORE_FAST
    case STORE_FAST_STORE_FAST:
#endif
#ifdef STORE_FAST_LOAD_FAST
    case STORE_FAST_LOAD_FAST:
#endif
    case BINARY_OP:
    case UNARY_NEGATIVE:
    case COMPARE_OP:
    case IS_OP:
    case CALL:
#ifdef CALL_KW
    case CALL_KW:
#endif
    case STORE_ATTR:  // NOTE: decides itself (a counter written back, `self.step = n + 1`)
      return true;
    default:
      return false;
  }
}

}  // namespace

ValuePtr& Tracer::top(int depth) {
  TL_CHECK(static_cast<int>(stack_.size()) >= depth) << "capture stack underflow";
  return stack_[stack_.size() - depth];
}

std::string Tracer::name_at(int index) const {
  return utf8(PyTuple_GET_ITEM(code_->co_names, index));
}

PyObject* Tracer::const_at(int index) const { return PyTuple_GET_ITEM(code_->co_consts, index); }

void Tracer::start(std::vector<ValuePtr> localsplus, std::vector<ValuePtr> free_cells) {
  locals_ = std::move(localsplus);
  locals_.resize(code_->co_nlocalsplus);
  free_cells_ = std::move(free_cells);
}

ValuePtr Tracer::run(std::vector<ValuePtr> localsplus, std::vector<ValuePtr> free_cells) {
  TL_CHECK(!generator_) << "a generator body runs through resume()";
  start(std::move(localsplus), std::move(free_cells));
  return execute();
}

ValuePtr Tracer::resume() {
  TL_CHECK(generator_) << "resume() of a plain frame";
  if (returned_) return nullptr;
  ValuePtr v = execute();
  return returned_ ? nullptr : v;
}

// The exception table entry covering byte `offset`, or null (CPython's table is flat: the
// innermost handler only).
const bytecode::ExceptionTableEntry* Tracer::handler_at(int offset) const {
  for (const auto& e : bc_.exception_table)
    if (offset >= e.start && offset < e.end) return &e;
  return nullptr;
}

// True when an exception raised at `offset` leaves the frame without running user code: no
// handler, or only the handlers CPython adds itself (an except block's cleanup that restores
// the handled exception and re-raises; 3.12's PEP 479 wrapper of a generator body).
bool Tracer::reraises_to_the_caller(int offset, int hops) const {
  const bytecode::ExceptionTableEntry* e = handler_at(offset);
  if (!e) return true;
  int h = bc_.index_at_offset(e->target);
  if (h < 0 || hops > 4) return false;
  const auto& insts = bc_.insts;
  auto is = [&](size_t i, const char* name) { return i < insts.size() && insts[i].opname == name; };
#ifdef CALL_INTRINSIC_1
  if (insts[h].opcode == CALL_INTRINSIC_1 && insts[h].arg == 3) return true;
#endif
  size_t i = static_cast<size_t>(h);
  if (is(i, "COPY") && insts[i].arg == 3 && is(i + 1, "POP_EXCEPT") && is(i + 2, "RERAISE"))
    return reraises_to_the_caller(insts[i + 2].offset, hops + 1);
  return false;
}

// True when the handler at instruction `h` is a chain of `except Name:` clauses, each naming a
// builtin subclass of Exception, ending in the re-raise of an unmatched exception that leaves
// the frame: GeneratorExit (a BaseException) matches none of them, so closing a generator
// suspended there runs no user code.
// NOTE: `for a, b in zip(seq1, seq2)` over two equal-length collections.abc.Sequence objects
// leaves the second's Sequence.__iter__ suspended inside its `try: ... except IndexError:`
// (zip stops at the first one's end); transformers' DynamicCache(config=...) does this, which
// sent GPT-2's whole forward to CPython in training.
// NOTE: the names must not be globals of the generator's module (a module could rebind them;
// builtins are not guarded either, as everywhere in capture).
bool Tracer::handler_skips_generator_exit(int h) const {
  const auto& insts = bc_.insts;
  auto is = [&](size_t i, const char* name) { return i < insts.size() && insts[i].opname == name; };
  size_t i = static_cast<size_t>(h);
  if (!is(i, "PUSH_EXC_INFO")) return false;
  ++i;
  for (int clauses = 0; clauses < 8; ++clauses) {
    if (is(i, "RERAISE") && insts[i].arg == 0)
      return clauses > 0 && reraises_to_the_caller(insts[i].offset, 0);
    if (!is(i, "LOAD_GLOBAL") || !is(i + 1, "CHECK_EXC_MATCH") || i + 2 >= insts.size())
      return false;
    const std::string& jump = insts[i + 2].opname;  // 3.11: POP_JUMP_FORWARD_IF_FALSE
    if (jump.rfind("POP_JUMP", 0) != 0 || jump.find("IF_FALSE") == std::string::npos ||
        insts[i + 2].jump_target < 0)
      return false;
    PyObject* name = PyTuple_GET_ITEM(code_->co_names, insts[i].arg >> 1);
    if (PyDict_Check(globals_) && PyDict_GetItemWithError(globals_, name)) return false;
    if (PyErr_Occurred()) throw PythonError();
    PyObject* type = PyDict_Check(builtins_) ? PyDict_GetItemWithError(builtins_, name) : nullptr;
    if (PyErr_Occurred()) throw PythonError();
    if (!type || !PyExceptionClass_Check(type)) return false;
    int caught = PyObject_IsSubclass(type, PyExc_Exception);
    if (caught < 0) throw PythonError();
    if (!caught) return false;
    i = static_cast<size_t>(insts[i + 2].jump_target);
  }
  return false;
}

bool Tracer::suspended_in_handler_region() const {
  if (!generator_ || returned_ || pc_ == 0) return false;
  const int offset = bc_.insts[pc_ - 1].offset;
  const bytecode::ExceptionTableEntry* e = handler_at(offset);
  if (!e) return false;
  int h = bc_.index_at_offset(e->target);
#ifdef CALL_INTRINSIC_1
  // 3.12 wraps every generator body in a PEP 479 handler: no user code.
  if (h >= 0 && bc_.insts[h].opcode == CALL_INTRINSIC_1 && bc_.insts[h].arg == 3) return false;
#endif
#ifdef CLEANUP_THROW
  // NOTE: 3.12's `yield from` (SEND) hands a close to the inner generator through a
  // CLEANUP_THROW handler: no user code (the inner generator, traced, is checked itself).
  // nn.Module.parameters() suspended by `next(...)` sat here and broke on 3.12.
  if (h >= 0 && bc_.insts[h].opcode == CLEANUP_THROW) return false;
#endif
  return h < 0 || !handler_skips_generator_exit(h);
}

ValuePtr Tracer::execute() {
  std::string filename = utf8(code_->co_filename);
  ExcInfoScope exc_info(ctx_.exc_info, &handled_exc_);
  while (!returned_) {
    TL_CHECK(pc_ < bc_.insts.size()) << "capture ran past the end of " << utf8(code_->co_name);
    if (depth_ == 0 && static_cast<int>(pc_) == stop_at_) {
      stopped_ = true;
      return nullptr;
    }
    if (on_path_ && depth_ > 0 && static_cast<size_t>(depth_) + 1 == ctx_.stop_path.size() &&
        static_cast<int>(pc_) == ctx_.stop_path.back().index) {
      ctx_.stop_grad_mode = ctx_.grad_enabled();
      ctx_.stopped.push_back({stack_, locals_});
      throw NestedStop{};
    }
    const size_t index = pc_;
    const bytecode::Instruction& inst = bc_.insts[pc_];
    if (inst.line >= 0) {
      ctx_.filename = filename;
      ctx_.lineno = inst.line;
      ctx_.location = filename + ":" + std::to_string(inst.line);
    }
    try {
      if (++ctx_.instructions > kMaxInstructions)
        graph_break("unsupported_bytecode", "trace too long (loop over many iterations?)");
      // Ctrl-C while a long trace runs only C++: raised here, it reaches the user.
      if (PyErr_CheckSignals() < 0) throw PythonError();
      ++pc_;
      step(inst);
      if (yielded_) return std::move(yielded_);
    } catch (const NestedStop&) {
      // NOTE: the CALL popped its callable and arguments: the stack is what lies below them.
      if (!on_path_) throw;
      ctx_.stopped.push_back({stack_, locals_});
      if (depth_ > 0) throw;
      stopped_ = true;
      return nullptr;
    } catch (GraphBreak& b) {
      // An exception of the traced program is caught here when a try block of an
      // inlined frame covers it; the top-level frame never traces try bodies.
      auto* user = dynamic_cast<UserException*>(&b);
      if (user && !user->chained) {
        user->chained = true;
        chain_context(user->exception(), handled_exception());
      }
      if (user && enter_handler(index, *user)) {
        pending_item_ = PendingItem{};
        continue;
      }
      // NOTE: between an assert's item() call and its jump the stack holds a tensor where
      // CPython would have the number: the break is at the call.
      if (depth_ == 0 && b.top_index < 0)
        b.top_index = break_point(pending_item_.call >= 0 ? pending_item_.call : index);
      b.levels.push_back({PyRef::borrow(reinterpret_cast<PyObject*>(code_)),
                          PyRef::borrow(globals_), closure_,
                          static_cast<int>(pending_item_.call >= 0 ? pending_item_.call : index),
                          depth_ == 0 || nestable_});
      throw;
    }
  }
  return return_value_;
}

PyObject* Tracer::handled_exception() const {
  for (auto it = ctx_.exc_info.rbegin(); it != ctx_.exc_info.rend(); ++it)
    if (**it) return (**it)->obj.get();
  return nullptr;
}

bool Tracer::enter_handler(size_t index, const UserException& e) {
  const int offset = bc_.insts[index].offset;
  const bytecode::ExceptionTableEntry* entry = nullptr;
  for (const auto& x : bc_.exception_table) {
    if (offset >= x.start && offset < x.end) {
      entry = &x;
      break;
    }
  }
  if (!entry) return false;
  const int h = bc_.index_at_offset(entry->target);
  TL_CHECK(h >= 0) << "exception handler outside the code of " << utf8(code_->co_name);
  TL_CHECK(static_cast<int>(stack_.size()) >= entry->depth) << "exception handler stack depth";
  // A with-block's __exit__ runs with the exception (WITH_EXCEPT_START): traced when it is one
  // exit_takes_exception allows (the exit function is the handler's deepest stack value), else
  // neither this frame nor any caller may catch the exception at trace time.
  if (bc_.insts[h].opcode == PUSH_EXC_INFO && h + 1 < static_cast<int>(bc_.insts.size()) &&
      bc_.insts[h + 1].opcode == WITH_EXCEPT_START &&
      (entry->depth < 1 || !exit_takes_exception(stack_[entry->depth - 1])))
    graph_break("unsupported_bytecode",
                "exception leaving a with-block in traced code (" + e.reason() + ")",
                "its __exit__ reads the traceback, or is not a Python function");
  stack_.resize(entry->depth);
  if (entry->lasti) push(detail::const_int(offset / 2));
  push(Value::constant(PyRef::borrow(e.exception())));
  if (depth_ == 0) try_start_ = try_region_start(index);
  pc_ = static_cast<size_t>(h);
  return true;
}

size_t Tracer::try_region_start(size_t index) const {
  while (index > 0 && in_try_[index - 1]) --index;
  return index;
}

int Tracer::break_point(size_t index) const {
  // CPython cannot enter a try body or handler in the middle (the bridge that
  // runs the breaking instruction has no handler): the frame breaks where the
  // try statement starts, and the try runs in CPython.
  if (handled_exc_ && try_start_ >= 0) return try_start_;
  if (in_try_[index]) return static_cast<int>(try_region_start(index));
  return static_cast<int>(index);
}

void Tracer::jump_if(const bytecode::Instruction& inst, bool jump) {
  if (jump) pc_ = inst.jump_target;
}

void Tracer::mark_mutated(const ValuePtr& c) { c->mutated = true; }

void Tracer::step(const bytecode::Instruction& inst) {
  const int arg = inst.arg;
  sym_aware_ = sym_aware(inst.opcode);
  scalar_aware_ = scalar_aware(inst.opcode);
  switch (inst.opcode) {
    case NOP:
    case RESUME:
#ifdef PRECALL
    case PRECALL:
#endif
      return;
    case COPY_FREE_VARS: {
      int n = arg;
      int first = code_->co_nlocalsplus - n;
      TL_CHECK(static_cast<int>(free_cells_.size()) == n) << "closure size mismatch";
      for (int i = 0; i < n; ++i) locals_[first + i] = free_cells_[i];
      return;
    }
    case MAKE_CELL: {
      ValuePtr cur = locals_[arg];
      locals_[arg] = Value::cell(cur);
      return;
    }
    case PUSH_NULL:
      push(nullptr);
      return;
    case POP_TOP:
      pop();
      return;
    case COPY:
      push(top(arg));
      return;
    case SWAP:
      std::swap(top(1), top(arg));
      return;
    case LOAD_CONST:
      push(Value::constant(PyRef::borrow(const_at(arg))));
      return;
#ifdef RETURN_CONST
    case RETURN_CONST:
      return_value_ = Value::constant(PyRef::borrow(const_at(arg)));
      returned_ = true;
      return;
#endif
    case RETURN_VALUE:
      return_value_ = pop();
      // NOTE: the frame's result is rebuilt after the graph: a size of the inputs in it is read
      // from them at each call, any other is specialised (capture.cpp, hand_on_sizes).
      returned_ = true;
      return;
    case RETURN_GENERATOR:
      if (!generator_) graph_break("unsupported_bytecode", "generator body");
      push(none_value());
      return;
    case YIELD_VALUE:
      if (!generator_) graph_break("unsupported_bytecode", "yield");
      yielded_ = pop();
      push(none_value());  // the value sent in by next()
      return;
    case LOAD_FAST:
#ifdef LOAD_FAST_CHECK
    case LOAD_FAST_CHECK:
#endif
      push(load_fast(arg));
      return;
#ifdef LOAD_FAST_AND_CLEAR
    case LOAD_FAST_AND_CLEAR:
      push(locals_[arg]);
      locals_[arg] = nullptr;
      return;
#endif
    case STORE_FAST:
      locals_[arg] = pop();
      return;
#ifdef LOAD_FAST_LOAD_FAST
    // 3.13 superinstructions: two fast locals, the first in the high nibble.
    case LOAD_FAST_LOAD_FAST:
      push(load_fast(arg >> 4));
      push(load_fast(arg & 15));
      return;
    case STORE_FAST_STORE_FAST:
      locals_[arg >> 4] = pop();
      locals_[arg & 15] = pop();
      return;
    case STORE_FAST_LOAD_FAST:
      locals_[arg >> 4] = pop();
      push(load_fast(arg & 15));
      return;
#endif
    case DELETE_FAST:
      locals_[arg] = nullptr;
      return;
    case LOAD_DEREF: {
      ValuePtr cell = locals_[arg];
      TL_CHECK(cell && cell->kind == VKind::Cell) << "LOAD_DEREF on a non-cell slot";
      if (!cell->cell_contents)
        graph_break("user_exception", "free variable referenced before assignment");
      push(cell->cell_contents);
      return;
    }
    case STORE_DEREF: {
      ValuePtr cell = locals_[arg];
      TL_CHECK(cell && cell->kind == VKind::Cell) << "STORE_DEREF on a non-cell slot";
      if (cell->source)
        graph_break("unsupported_side_effect",
                    "assignment to a closure variable of the compiled function");
      cell->cell_contents = pop();
      return;
    }
    case LOAD_CLOSURE:
      push(locals_[arg]);
      return;
    case LOAD_GLOBAL: {
      if ((arg & 1) && !kNullAboveCallable) push(nullptr);
      push(load_global(name_at(arg >> 1)));
      if ((arg & 1) && kNullAboveCallable) push(nullptr);
      return;
    }
    case STORE_GLOBAL: {
      std::string name = name_at(arg);
      ValuePtr v = pop();
      if (globals_ != ctx_.frame().globals)
        graph_break("unsupported_side_effect", "global write in another module");
      ctx_.global_overlay[name] = v;
      ctx_.effects.push_back({ir::SideEffect::Kind::SetGlobal, nullptr, name, v});
      return;
    }
#ifdef LOAD_METHOD
    case LOAD_METHOD: {
      ValuePtr obj = pop();
      push(nullptr);
      push(get_attr(obj, name_at(arg)));
      return;
    }
#endif
    case LOAD_ATTR: {
      ValuePtr obj = pop();
#if PY_VERSION_HEX >= 0x030C0000
      // NOTE: a method lookup is modelled as (NULL, bound attribute), which
      // CALL treats like (function, self).
      if ((arg & 1) && !kNullAboveCallable) push(nullptr);
      push(get_attr(obj, name_at(arg >> 1)));
      if ((arg & 1) && kNullAboveCallable) push(nullptr);
#else
      push(get_attr(obj, name_at(arg)));
#endif
      return;
    }
#ifdef LOAD_SUPER_ATTR
    case LOAD_SUPER_ATTR: {
      ValuePtr self = pop();
      ValuePtr cls = pop();
      ValuePtr fn = pop();
      if (!fn->is_const() || fn->obj.get() != reinterpret_cast<PyObject*>(&PySuper_Type))
        graph_break("unsupported_callable", "super is shadowed by another object");
      ValuePtr sup = make_super(cls, self);
      if ((arg & 1) && !kNullAboveCallable) push(nullptr);
      push(get_attr(sup, name_at(arg >> 2)));
      if ((arg & 1) && kNullAboveCallable) push(nullptr);
      return;
    }
#endif
    case STORE_ATTR: {
      ValuePtr obj = pop();
      ValuePtr v = pop();
      // NOTE: a scalar input (or a number computed from one) written to an attribute of the
      // frame's own module or object stays per call: the write is replayed after the graph
      // with this call's number (capture.cpp, build). Any other owner keeps the number.
      if (ctx_.any_scalar &&
          !(obj->source && (obj->kind == VKind::Module || obj->kind == VKind::Object)))
        ctx_.specialise_scalars(v);
      store_attr(obj, name_at(arg), v);
      return;
    }
    case DELETE_ATTR: {
      // `del self.args` on an object made by traced code (contextlib's __enter__ does it):
      // the instance dict loses the key, unless the class decides (a __delattr__ or a data
      // descriptor of its own).
      ValuePtr obj = pop();
      const std::string name = name_at(arg);
      if (obj->kind == VKind::Object && obj->flag && obj->attrs &&
          obj->attrs->kind == VKind::Dict) {
        PyTypeObject* type = Py_TYPE(obj->obj.get());
        PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
        PyRef delattr_name = PyRef::steal(PyUnicode_FromString("__delattr__"));
        if (!key || !delattr_name) throw PythonError();
        PyObject* descr = _PyType_Lookup(type, key.get());
        if (_PyType_Lookup(type, delattr_name.get()) ==
                _PyType_Lookup(&PyBaseObject_Type, delattr_name.get()) &&
            !(descr && Py_TYPE(descr)->tp_descr_set)) {
          int i = detail::dict_find(obj->attrs, key.get());
          if (i < 0)
            raise_user(PyExc_AttributeError, "'" + std::string(type->tp_name) +
                                                 "' object has no attribute '" + name + "'");
          obj->attrs->keys.erase(obj->attrs->keys.begin() + i);
          obj->attrs->items.erase(obj->attrs->items.begin() + i);
          return;
        }
      }
      graph_break("unsupported_bytecode", "del of attribute " + name + " of a " + obj->type_name());
    }
    case BINARY_OP: {
      ValuePtr b = pop();
      ValuePtr a = pop();
      TL_CHECK(arg >= 0 && arg < 26) << "unknown BINARY_OP " << arg;
      push(binary_op(operator_fn(kBinaryOps[arg]), a, b));
      return;
    }
    case UNARY_NEGATIVE:
      push(unary_op(operator_fn("neg"), pop()));
      return;
    case UNARY_INVERT:
      push(unary_op(operator_fn("invert"), pop()));
      return;
#ifdef UNARY_POSITIVE
    case UNARY_POSITIVE:
      push(unary_op(operator_fn("pos"), pop()));
      return;
#endif
    case UNARY_NOT:
      push(bool_value(!truth(pop())));
      return;
#ifdef TO_BOOL
    // NOTE: 3.13's conditional jumps and UNARY_NOT take an exact bool: the truth
    // test happens here, so a break on it runs TO_BOOL natively and the jump
    // after it only ever sees a bool.
    case TO_BOOL:
      // NOTE: an assert's tensor condition goes to its jump as it is (data_dependent_assert.cpp).
      if (assert_site(pc_, top())) return;
      push(bool_value(truth(pop())));
      return;
#endif
    case COMPARE_OP: {
      ValuePtr b = pop();
      ValuePtr a = pop();
      if (pending_item_.compare == static_cast<int>(pc_ - 1)) item_comparison(a, b);
#if PY_VERSION_HEX >= 0x030D0000
      // op << 5 | 16 when the result feeds a jump (converted to bool) | a specialization mask.
      ValuePtr r = compare(arg >> 5, a, b);
      push((arg & 16) && !assert_site(pc_, r) ? bool_value(truth(r)) : r);
#elif PY_VERSION_HEX >= 0x030C0000
      push(compare(arg >> 4, a, b));
#else
      push(compare(arg, a, b));
#endif
      return;
    }
    case IS_OP: {
      // An Object of a class that is no tensor, list, tuple, dict or function type.
      auto plain_object = [](const ValuePtr& v) {
        PyObject* o = v->kind == VKind::Object ? v->obj.get() : nullptr;
        return o && !PyList_Check(o) && !PyTuple_Check(o) && !PyDict_Check(o) &&
               !PyFunction_Check(o) &&
               !PyObject_TypeCheck(o,
                                   reinterpret_cast<PyTypeObject*>(torch_api().tensor_type.get()));
      };
      ValuePtr b = pop();
      ValuePtr a = pop();
      if (a && a->same_object) a = a->same_object;
      if (b && b->same_object) b = b->same_object;
      // NOTE: `s is None` (or `is` a resume function's unbound-local marker) of a number the
      // frame takes per call: its type decides (guarded). `s is 1` would read the number.
      auto no_number = [](const ValuePtr& v) {
        return v && v->is_const() && !v->scalar && !PyLong_Check(v->obj.get()) &&
               !PyFloat_Check(v->obj.get());
      };
      if (!(a && a->scalar && no_number(b)) && !(b && b->scalar && no_number(a))) {
        ctx_.specialise_scalars(a);
        ctx_.specialise_scalars(b);
      }
      bool same;
      if (a == b) {
        same = true;
      } else if (a && b &&
                 (a->is_const() || a->kind == VKind::Module || a->kind == VKind::Object) &&
                 (b->is_const() || b->kind == VKind::Module || b->kind == VKind::Object)) {
        same = a->obj.get() == b->obj.get();
      } else if (a && b && (a->is_const() || b->is_const() || plain_object(a) || plain_object(b))) {
        // A traced container or tensor is never a pre-existing constant, nor an object of
        // another type (dataclasses' `names is _HAS_DEFAULT_FACTORY` on a list argument).
        const bool a_fixed = a->is_const() || plain_object(a);
        const ValuePtr& c = a_fixed ? a : b;
        const ValuePtr& o = a_fixed ? b : a;
        same = false;
        if (o->is_tensor() || o->kind == VKind::Tuple || o->kind == VKind::List ||
            o->kind == VKind::Dict || o->kind == VKind::Function)
          same = false;
        else
          graph_break("unsupported_operand",
                      "identity test between " + c->type_name() + " and " + o->type_name());
      } else if (a && b && a->is_tensor() && b->is_tensor()) {
        // One object reached through two sources is two placeholders: ask the inputs.
        std::optional<bool> inputs = ctx_.same_input_tensor(a, b);
        same = inputs ? *inputs : a->node == b->node;
      } else {
        graph_break("unsupported_operand", "identity test ('is') on traced values");
      }
      push(Value::constant(PyRef::borrow((same != (arg == 1)) ? Py_True : Py_False)));
      return;
    }
    case CONTAINS_OP: {
      // NOTE: `key in d` compares the keys (constants) only: d's values, sizes among them (a
      // **kwargs handed on: transformers' deprecate_kwarg asks `old_name in kwargs`), keep
      // their symbols. Any other container is compared item by item: its sizes specialise.
      ValuePtr container = pop();
      ValuePtr item = pop();
      ctx_.specialise(item);
      if (container->kind != VKind::Dict) ctx_.specialise(container);
      if (container->kind == VKind::Dict) item = detail::key_value(ctx_, item);
      bool found = false;
      if (container->kind == VKind::Dict && item->is_const()) {
        for (auto& k : container->keys) {
          int eq = PyObject_RichCompareBool(k.get(), item->obj.get(), Py_EQ);
          if (eq < 0) throw PythonError();
          if (eq) found = true;
        }
      } else if (container->is_const() && item->is_const()) {
        int r = PySequence_Contains(container->obj.get(), item->obj.get());
        if (r < 0) {
          clear_expected_error();
          graph_break("user_exception", "'in' raised at trace time");
        }
        found = r;
      } else if (container->kind == VKind::Module && item->is_const()) {
        int r = PySequence_Contains(container->obj.get(), item->obj.get());
        if (r < 0) {
          clear_expected_error();
          graph_break("unsupported_operand", "'in' on a module");
        }
        found = r;
      } else {
        found = contains(container, item);
      }
      push(Value::constant(PyRef::borrow((found != (arg == 1)) ? Py_True : Py_False)));
      return;
    }
    case BINARY_SUBSCR: {
      ValuePtr idx = pop();
      ValuePtr c = pop();
      // NOTE: a tensor op keeps a symbolic index (x[:, :t]); a list or dict picks by value.
      if (!c->is_tensor()) ctx_.specialise(idx);
      if (c->is_const()) ctx_.specialise(c);
      push(subscript(c, idx));
      return;
    }
    case STORE_SUBSCR: {
      ValuePtr idx = pop();
      ValuePtr c = pop();
      ValuePtr v = pop();
      // NOTE: a tensor's setitem keeps a symbolic index and value (`cache[:, p:p + n] = k`: the
      // op records them); any other container stores by value.
      if (!c->is_tensor())
        for (const ValuePtr* read : {&idx, &c, &v}) ctx_.specialise(*read);
      store_subscript(c, idx, v);
      return;
    }
    case DELETE_SUBSCR: {
      ValuePtr idx = pop();
      ValuePtr c = pop();
      // NOTE: a dict subclass made by traced code (an OrderedDict): its own __delitem__ in
      // Python, else dict's, on its symbolic items.
      if (c->kind == VKind::Object && c->flag) {
        if (call_dunder(c, "__delitem__", {idx})) return;
        if (c->mapping) c = c->mapping;
      }
      if (c->kind == VKind::Dict && idx->is_const()) {
        for (size_t i = 0; i < c->keys.size(); ++i) {
          int eq = PyObject_RichCompareBool(c->keys[i].get(), idx->obj.get(), Py_EQ);
          if (eq < 0) throw PythonError();
          if (eq) {
            c->keys.erase(c->keys.begin() + i);
            c->items.erase(c->items.begin() + i);
            mark_mutated(c);
            return;
          }
        }
        graph_break("user_exception", "KeyError in del d[key]");
      }
      if (c->kind == VKind::List && idx->is_const()) {
        if (PySlice_Check(idx->obj.get())) return list_store_slice(c, idx->obj.get(), nullptr);
        if (PyLong_Check(idx->obj.get())) {
          c->items.erase(c->items.begin() +
                         detail::normalize_index(idx->obj.get(), c->items.size(),
                                                 "list assignment index out of range"));
          mark_mutated(c);
          return;
        }
      }
      graph_break("unsupported_side_effect", "del on " + c->type_name());
    }
#ifdef BINARY_SLICE
    case BINARY_SLICE: {
      ValuePtr end = pop();
      ValuePtr start = pop();
      ValuePtr c = pop();
      if (!start->is_const() || !end->is_const())
        graph_break("non_constant_index", "slice bounds must be known while tracing");
      if (!c->is_tensor()) {
        ctx_.specialise(start);
        ctx_.specialise(end);
      }
      if (c->is_const()) ctx_.specialise(c);
      push(subscript(c, make_slice(start, end, Value::constant(PyRef::borrow(Py_None)))));
      return;
    }
    case STORE_SLICE: {
      ValuePtr end = pop();
      ValuePtr start = pop();
      ValuePtr c = pop();
      ValuePtr v = pop();
      if (!start->is_const() || !end->is_const())
        graph_break("non_constant_index", "slice bounds must be known while tracing");
      if (c->is_tensor()) {  // NOTE: symbolic bounds stay symbolic, as in STORE_SUBSCR
        store_subscript(c, make_slice(start, end, Value::constant(PyRef::borrow(Py_None))), v);
        return;
      }
      for (const ValuePtr* read : {&start, &end, &c, &v}) ctx_.specialise(*read);
      PyRef sl = PyRef::steal(PySlice_New(start->obj.get(), end->obj.get(), nullptr));
      store_subscript(c, Value::constant(sl), v);
      return;
    }
#endif
    case BUILD_SLICE: {
      ValuePtr step = arg == 3 ? pop() : Value::constant(PyRef::borrow(Py_None));
      ValuePtr end = pop();
      ValuePtr start = pop();
      // NOTE: a bound eager reads through __index__ (a 0-d tensor of constants) has its number.
      for (ValuePtr* bound : {&start, &end, &step})
        if (auto number = folded_call(ctx_, *bound, "__index__")) *bound = *number;
      if (!start->is_const() || !end->is_const() || !step->is_const())
        graph_break("non_constant_index", "slice bounds must be known while tracing");
      push(make_slice(start, end, step));
      return;
    }
    case BUILD_TUPLE:
    case BUILD_LIST: {
      std::vector<ValuePtr> items(stack_.end() - arg, stack_.end());
      stack_.resize(stack_.size() - arg);
      push(inst.opcode == BUILD_TUPLE ? Value::tuple(std::move(items))
                                      : Value::list(std::move(items)));
      return;
    }
    case BUILD_SET: {
      std::vector<ValuePtr> items(stack_.end() - arg, stack_.end());
      stack_.resize(stack_.size() - arg);
      for (auto& item : items) ctx_.specialise(item);
      push(detail::make_set(items));
      return;
    }
    case SET_ADD: {
      ValuePtr v = pop();
      detail::set_add(top(arg), v);
      return;
    }
    case SET_UPDATE: {
      ValuePtr v = pop();
      for (auto& item : iterate(v)) detail::set_add(top(arg), item);
      return;
    }
    case BUILD_MAP: {
      ValuePtr d = Value::of_kind(VKind::Dict);
      size_t base = stack_.size() - 2 * arg;
      for (int i = 0; i < arg; ++i) {
        ValuePtr k = detail::key_value(ctx_, stack_[base + 2 * i]);
        if (!k->is_const()) graph_break("unsupported_dict_key", "dict key must be a constant");
        ctx_.specialise(k);
        detail::dict_set(d, k->obj.get(), stack_[base + 2 * i + 1]);  // {"a": 1, "a": 2}
      }
      stack_.resize(base);
      push(d);
      return;
    }
    case BUILD_CONST_KEY_MAP: {
      ValuePtr keys = pop();
      TL_CHECK(keys->is_const() && PyTuple_Check(keys->obj.get()));
      ValuePtr d = Value::of_kind(VKind::Dict);
      size_t base = stack_.size() - arg;
      for (int i = 0; i < arg; ++i)
        detail::dict_set(d, PyTuple_GET_ITEM(keys->obj.get(), i), stack_[base + i]);
      stack_.resize(base);
      push(d);
      return;
    }
    // NOTE: the container these build is a stack value a resume function receives when a
    // break fell inside the display (`[*xs, int(t)]`): its changes are side effects then.
    case LIST_APPEND: {
      ValuePtr v = pop();
      top(arg)->items.push_back(v);
      mark_mutated(top(arg));
      return;
    }
    case LIST_EXTEND: {
      ValuePtr v = pop();
      if (!v->is_sequence() || top(arg)->source) ctx_.specialise(v);
      auto items = iterate(v);
      auto& l = top(arg);
      l->items.insert(l->items.end(), items.begin(), items.end());
      mark_mutated(l);
      return;
    }
#ifdef LIST_TO_TUPLE
    case LIST_TO_TUPLE:
      push(Value::tuple(pop()->items));
      return;
#endif
#ifdef CALL_INTRINSIC_1
    case CALL_INTRINSIC_1: {
      if (arg == 3) {  // INTRINSIC_STOPITERATION_ERROR: PEP 479 in a generator's handler
        ValuePtr exc = pop();
        if (!exc->is_const())
          graph_break("unsupported_bytecode",
                      "a traced exception reaching a generator's StopIteration handler");
        push(Value::constant(pep479_replacement(exc->obj.get())));
        return;
      }
      if (arg == 6) {       // INTRINSIC_LIST_TO_TUPLE
        sym_aware_ = true;  // NOTE: moves the items (f(*shape))
        push(Value::tuple(pop()->items));
        return;
      }
      if (arg == 5) {  // INTRINSIC_UNARY_POSITIVE
        push(unary_op(operator_fn("pos"), pop()));
        return;
      }
      graph_break("unsupported_bytecode", "CALL_INTRINSIC_1 " + std::to_string(arg));
    }
#endif
    case DICT_UPDATE:
    case DICT_MERGE: {
      ValuePtr src = pop();
      ValuePtr& d = top(arg);
      if (src->kind == VKind::Object && src->obj && PyDict_Check(src->obj.get()))
        src = mapping_items(src);
      if (src->kind != VKind::Dict) graph_break("unsupported_operand", "** on a non-dict value");
      for (size_t i = 0; i < src->keys.size(); ++i) {
        bool replaced = false;
        for (size_t j = 0; j < d->keys.size(); ++j) {
          if (PyObject_RichCompareBool(d->keys[j].get(), src->keys[i].get(), Py_EQ) == 1) {
            if (inst.opcode == DICT_MERGE)
              graph_break("user_exception", "duplicate keyword argument");
            d->items[j] = src->items[i];
            replaced = true;
          }
        }
        if (!replaced) {
          d->keys.push_back(src->keys[i]);
          d->items.push_back(src->items[i]);
        }
      }
      mark_mutated(d);
      return;
    }
    case MAP_ADD: {
      ValuePtr v = pop();
      ValuePtr k = detail::key_value(ctx_, pop());
      if (!k->is_const()) graph_break("unsupported_dict_key", "dict key must be a constant");
      ctx_.specialise(k);  // NOTE: hashed and compared: only its value (the item keeps its size)
      ValuePtr& d = top(arg);
      mark_mutated(d);
      for (size_t j = 0; j < d->keys.size(); ++j) {
        if (PyObject_RichCompareBool(d->keys[j].get(), k->obj.get(), Py_EQ) == 1) {
          d->items[j] = v;
          return;
        }
      }
      d->keys.push_back(k->obj);
      d->items.push_back(v);
      return;
    }
    case UNPACK_SEQUENCE: {
      ValuePtr seq = pop();
      std::vector<ValuePtr> items = iterate(seq);
      if (static_cast<int>(items.size()) != arg)
        graph_break("user_exception", "unpacking " + std::to_string(items.size()) +
                                          " values into " + std::to_string(arg) + " names");
      for (auto it = items.rbegin(); it != items.rend(); ++it) push(*it);
      return;
    }
    case UNPACK_EX: {
      int before = arg & 0xFF, after = arg >> 8;
      std::vector<ValuePtr> items = iterate(pop());
      if (static_cast<int>(items.size()) < before + after)
        graph_break("user_exception", "not enough values to unpack");
      std::vector<ValuePtr> middle(items.begin() + before, items.end() - after);
      for (int i = 0; i < after; ++i) push(items[items.size() - 1 - i]);
      push(Value::list(std::move(middle)));
      for (int i = before - 1; i >= 0; --i) push(items[i]);
      return;
    }
#ifdef FORMAT_VALUE
    case FORMAT_VALUE: {
      if (arg == 0 && ctx_.any_sym && stack_.back()->sym && formats_into_call()) {
        sym_aware_ = true;  // NOTE: the call decides (do_call); pop() keeps the symbol
        ValuePtr v = pop();
        push(unread_message(format_value(v, nullptr), {v}));
        return;
      }
      ValuePtr spec = (arg & 0x04) ? pop() : nullptr;
      ValuePtr v = pop();
      push(format_value(convert_value(v, arg & 0x03), spec));
      return;
    }
#else
    // 3.13 splits FORMAT_VALUE: CONVERT_VALUE (!s, !r, !a), then FORMAT_SIMPLE or
    // FORMAT_WITH_SPEC.
    case CONVERT_VALUE:
      push(convert_value(pop(), arg));
      return;
    case FORMAT_SIMPLE: {
      if (ctx_.any_sym && stack_.back()->sym && formats_into_call()) {
        sym_aware_ = true;  // NOTE: the call decides (do_call); pop() keeps the symbol
        ValuePtr v = pop();
        push(unread_message(format_value(v, nullptr), {v}));
        return;
      }
      push(format_value(pop(), nullptr));
      return;
    }
    case FORMAT_WITH_SPEC: {
      ValuePtr spec = pop();
      ValuePtr v = pop();
      push(format_value(v, spec));
      return;
    }
#endif
    case BUILD_STRING: {
      PyRef parts = PyRef::steal(PyTuple_New(arg));
      std::vector<ValuePtr> formatted;  // the sizes of parts headed for a call unread
      bool unread = false;
      for (int i = 0; i < arg; ++i)
        unread = unread || stack_[stack_.size() - arg + i]->unread_message;
      unread = unread && formats_into_call();
      for (int i = 0; i < arg; ++i) {
        ValuePtr v = stack_[stack_.size() - arg + i];
        if (!v->is_const()) graph_break("format_traced_value", "string building on traced values");
        if (unread && v->unread_message)
          formatted.insert(formatted.end(), v->items.begin(), v->items.end());
        else
          ctx_.specialise(v);
        PyTuple_SET_ITEM(parts.get(), i, PyRef(v->obj).release());
      }
      stack_.resize(stack_.size() - arg);
      PyRef empty = PyRef::steal(PyUnicode_FromString(""));
      PyRef s = PyRef::steal(PyUnicode_Join(empty.get(), parts.get()));
      if (!s) throw PythonError();
      push(unread ? unread_message(Value::constant(s), formatted) : Value::constant(s));
      return;
    }
#ifdef KW_NAMES
    case KW_NAMES:
      kw_names_ = const_at(arg);
      return;
#endif
#ifdef CALL_KW
    case CALL_KW: {  // 3.13: the keyword names tuple sits on top of the arguments
      ValuePtr names = pop();
      TL_CHECK(names->is_const() && PyTuple_Check(names->obj.get())) << "CALL_KW without names";
      do_call(arg, names->obj.get());
      return;
    }
#endif
    case CALL: {
      // NOTE: cleared before the call: a call that raises into a handler of this frame must
      // not leave its keyword names to the handler's next CALL.
      PyObject* kw_names = kw_names_;
      kw_names_ = nullptr;
      do_call(arg, kw_names);
      return;
    }
    case CALL_FUNCTION_EX:
      do_call_ex(arg);
      return;
    case MAKE_FUNCTION:
      do_make_function(arg);
      return;
#ifdef SET_FUNCTION_ATTRIBUTE
    case SET_FUNCTION_ATTRIBUTE: {  // 3.13: MAKE_FUNCTION's flags, one instruction each
      ValuePtr fn = pop();
      ValuePtr attr = pop();
      set_function_attribute(fn, arg, attr);
      push(fn);
      return;
    }
#endif
    case JUMP_FORWARD:
    case JUMP_BACKWARD:
    case JUMP_BACKWARD_NO_INTERRUPT:
      pc_ = inst.jump_target;
      return;
#ifdef POP_JUMP_FORWARD_IF_TRUE
    case POP_JUMP_FORWARD_IF_TRUE:
    case POP_JUMP_BACKWARD_IF_TRUE: {
      ValuePtr v = pop();
      if (!check_assertion(v)) jump_if(inst, truth(v));
      return;
    }
    case POP_JUMP_FORWARD_IF_FALSE:
    case POP_JUMP_BACKWARD_IF_FALSE: {
      ValuePtr v = pop();
      if (!check_assertion(v)) jump_if(inst, !truth(v));
      return;
    }
    case POP_JUMP_FORWARD_IF_NONE:
    case POP_JUMP_BACKWARD_IF_NONE: {
      ValuePtr v = pop();
      jump_if(inst, v->is_const() && v->obj.get() == Py_None);
      return;
    }
    case POP_JUMP_FORWARD_IF_NOT_NONE:
    case POP_JUMP_BACKWARD_IF_NOT_NONE: {
      ValuePtr v = pop();
      jump_if(inst, !(v->is_const() && v->obj.get() == Py_None));
      return;
    }
    case JUMP_IF_TRUE_OR_POP:
      if (truth(top()))
        pc_ = inst.jump_target;
      else
        pop();
      return;
    case JUMP_IF_FALSE_OR_POP:
      if (!truth(top()))
        pc_ = inst.jump_target;
      else
        pop();
      return;
#else
    case POP_JUMP_IF_TRUE: {
      ValuePtr v = pop();
      if (!check_assertion(v)) jump_if(inst, truth(v));
      return;
    }
    case POP_JUMP_IF_FALSE: {
      ValuePtr v = pop();
      if (!check_assertion(v)) jump_if(inst, !truth(v));
      return;
    }
    case POP_JUMP_IF_NONE: {
      ValuePtr v = pop();
      jump_if(inst, v->is_const() && v->obj.get() == Py_None);
      return;
    }
    case POP_JUMP_IF_NOT_NONE: {
      ValuePtr v = pop();
      jump_if(inst, !(v->is_const() && v->obj.get() == Py_None));
      return;
    }
#endif
    case GET_ITER:
      push(get_iter(pop()));
      return;
    case GET_YIELD_FROM_ITER:  // `yield from it` in a generator body (run to completion)
      if (!generator_) graph_break("unsupported_bytecode", "yield from outside a generator");
      push(get_iter(pop()));
      return;
    case SEND: {
      ValuePtr sent = pop();
      if (!sent->is_const() || sent->obj.get() != Py_None || top()->kind != VKind::Iterator)
        graph_break("unsupported_bytecode", "send() of a value into a generator",
                    "iterate with a for loop instead of sending values");
      const std::shared_ptr<LazyIter> source = top()->lazy;
      if (ValuePtr v = iter_next(top())) {
        push(std::move(v));
        return;
      }
      // The delegate's return value: a traced generator's, None from an iterator over items.
      std::optional<ValuePtr> result = source ? source->return_value() : none_value();
      size_t after = inst.jump_target;
#ifdef END_SEND
      push(result ? *result : none_value());  // END_SEND at the target drops the iterator
      ++after;
#else
      top() = result ? *result : none_value();
#endif
      if (!result && (after >= bc_.insts.size() || bc_.insts[after].opcode != POP_TOP))
        graph_break("unsupported_bytecode", "the value of a `yield from` expression",
                    "use `yield from` as a statement, or return the value another way");
      pc_ = inst.jump_target;
      return;
    }
#ifdef END_SEND
    case END_SEND: {
      ValuePtr v = pop();
      pop();
      push(std::move(v));
      return;
    }
#endif
    case FOR_ITER: {
      ValuePtr it = top();
      TL_CHECK(it->kind == VKind::Iterator) << "FOR_ITER on a non-iterator";
      if (ValuePtr v = iter_next(it)) {
        push(std::move(v));
        return;
      }
      pop();
      pc_ = inst.jump_target;
#ifdef END_FOR
      // CPython jumps over the END_FOR (3.13: END_FOR, POP_TOP) at the target.
      if (pc_ < bc_.insts.size() && bc_.insts[pc_].opcode == END_FOR) ++pc_;
#if PY_VERSION_HEX >= 0x030D0000
      if (pc_ < bc_.insts.size() && bc_.insts[pc_].opcode == POP_TOP) ++pc_;
#endif
#endif
      return;
    }
#ifdef END_FOR
    case END_FOR:  // 3.12: pops the value and the iterator; 3.13: the value (POP_TOP follows)
      pop();
#if PY_VERSION_HEX < 0x030D0000
      pop();
#endif
      return;
#endif
    case BEFORE_WITH: {
      ValuePtr mgr = pop();
      if (is_autocast_manager(mgr)) {  // torch.autocast regions (capture/autocast.cpp)
        push(enter_autocast(ctx_, mgr));
        push(mgr);  // autocast.__enter__ returns the manager itself
        return;
      }
      if ((depth_ > 0 || ctx_.inline_top_managers) && mgr->kind == VKind::Object) {
        // A Python context manager (contextlib.nullcontext, transformers'
        // maybe_autocast when disabled, a user's class): __enter__ and __exit__ are
        // inlined. A break inside breaks the caller at its CALL; in the frame itself the
        // frame is traced again with the with-block as its break (inline_top_managers).
        PyRef enter_name = PyRef::steal(PyUnicode_FromString("__enter__"));
        PyRef exit_name = PyRef::steal(PyUnicode_FromString("__exit__"));
        PyObject* enter = _PyType_Lookup(Py_TYPE(mgr->obj.get()), enter_name.get());
        PyObject* exit = _PyType_Lookup(Py_TYPE(mgr->obj.get()), exit_name.get());
        if (enter && exit && PyFunction_Check(enter) && PyFunction_Check(exit)) {
          ValuePtr exit_method = Value::of_kind(VKind::Method);
          exit_method->self = mgr;
          exit_method->obj = PyRef::borrow(exit);
          if (depth_ == 0) ctx_.entered_top_manager = true;
          ValuePtr entered = inline_function(enter, nullptr, nullptr, {mgr}, {});
          push(exit_method);
          push(entered);
          return;
        }
      }
      if (mgr->kind != VKind::GradMode)
        graph_break("unsupported_bytecode",
                    "with-block on a " + mgr->type_name() +
                        " (only torch.no_grad/enable_grad/set_grad_enabled are captured)");
      ValuePtr exit = Value::of_kind(VKind::GradModeExit);
      exit->flag = mgr->restore >= 0 ? mgr->restore == 1 : ctx_.grad_enabled();
      ctx_.set_grad_mode(mgr->flag);
      push(exit);
      push(Value::constant(PyRef::borrow(Py_None)));
      return;
    }
    case WITH_EXCEPT_START: {
      // Stack: exit function, lasti, the exception handled before, the exception. The exit
      // function is one enter_handler let through: it gets no traceback (it never reads one).
      ValuePtr exc = top(1);
      TL_CHECK(exc->is_const()) << "WITH_EXCEPT_START without an exception";
      PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(exc->obj.get()));
      push(call(top(4), {Value::constant(PyRef::borrow(type)), exc, none_value()}, {}));
      return;
    }
    case RAISE_VARARGS: {
      if (arg == 0) {
        if (!handled_exc_) graph_break("user_exception", "bare raise in traced code");
        reraise_user(handled_exc_->obj.get());
      }
      ValuePtr cause = arg == 2 ? pop() : nullptr;
      ValuePtr exc = pop();
      if (!exc->is_const() || (cause && !cause->is_const()))
        graph_break("user_exception", "raise statement in traced code");
      if (cause) raise_user_from(exc->obj.get(), cause->obj.get());
      raise_user_value(exc->obj.get());
    }
    case LOAD_ASSERTION_ERROR:
      push(Value::constant(PyRef::borrow(PyExc_AssertionError)));
      return;
    case PUSH_EXC_INFO: {
      ValuePtr exc = pop();
      push(handled_exc_ ? handled_exc_ : none_value());
      handled_exc_ = exc;
      push(exc);
      return;
    }
    case CHECK_EXC_MATCH: {
      ValuePtr type = pop();
      PyRef types = type->is_const() ? type->obj : detail::const_tuple(type);
      if (!types || !top()->is_const())
        graph_break("non_constant_argument", "except clause on a traced value");
      int r = PyErr_GivenExceptionMatches(top()->obj.get(), types.get());
      push(detail::const_bool(r != 0));
      return;
    }
    case POP_EXCEPT: {
      ValuePtr prev = pop();
      handled_exc_ = prev->is_const() && prev->obj.get() == Py_None ? nullptr : prev;
      return;
    }
    case RERAISE: {
      ValuePtr exc = pop();
      if (!exc->is_const()) graph_break("user_exception", "re-raise in traced code");
      reraise_user(exc->obj.get());
    }
    case IMPORT_NAME: {
      ValuePtr fromlist = pop();
      ValuePtr level = pop();
      push(detail::import_loaded(name_at(arg), fromlist, level, globals_, ctx_));
      return;
    }
    case IMPORT_FROM:
      push(get_attr(top(), name_at(arg)));
      return;
    case GET_LEN: {
      ValuePtr v = top();
      push(Value::constant(PyRef::steal(PyLong_FromSize_t(iterate(v).size()))));
      return;
    }
    default:
      graph_break("unsupported_bytecode", std::string("bytecode ") +
                                              bytecode::opcode_name(inst.opcode) +
                                              " is not supported by the capture interpreter");
  }
}

ValuePtr Tracer::load_global(const std::string& name) {
  auto ov = ctx_.global_overlay.find(name);
  if (globals_ == ctx_.frame().globals && ov != ctx_.global_overlay.end()) return ov->second;
  PyRef key = PyRef::steal(PyUnicode_FromString(name.c_str()));
  PyObject* v = PyDict_GetItemWithError(globals_, key.get());
  if (v) {
    ir::SourcePtr src =
        globals_ == ctx_.frame().globals
            ? ir::Source::global(name)
            : ir::Source::item(ir::Source::held(PyRef::borrow(globals_), "globals"), key);
    return ctx_.wrap(v, src);
  }
  if (PyErr_Occurred()) throw PythonError();
  v = PyDict_GetItemWithError(builtins_, key.get());
  if (v) {
    // A global of the same name defined later (`len = ...`) shadows the builtin.
    if (globals_ == ctx_.frame().globals)
      ctx_.guards().add_global_absent(name);
    else
      ctx_.guards().add_attr(ir::Source::held(PyRef::borrow(globals_), "globals"),
                             guards::AttrTable::Owner::Dict, globals_, key.get(), nullptr);
    return ctx_.wrap(v, ir::Source::builtin(name));
  }
  if (PyErr_Occurred()) throw PythonError();
  graph_break("user_exception", "name '" + name + "' is not defined");
}

ValuePtr Tracer::load_fast(int slot) {
  ValuePtr v = locals_[slot];
  if (!v)
    graph_break("user_exception", "local variable '" +
                                      utf8(PyTuple_GET_ITEM(code_->co_localsplusnames, slot)) +
                                      "' referenced before assignment");
  return v;
}

ValuePtr Tracer::convert_value(const ValuePtr& v_in, int conversion) {
  const ValuePtr v = detail::printable_value(ctx_, v_in);
  if (!v->is_const())
    graph_break("format_traced_value", "f-string of a " + v->type_name() + " value");
  PyRef obj = v->obj;
  if (conversion == 1) obj = PyRef::steal(PyObject_Str(obj.get()));
  if (conversion == 2) obj = PyRef::steal(PyObject_Repr(obj.get()));
  if (conversion == 3) obj = PyRef::steal(PyObject_ASCII(obj.get()));
  if (!obj) throw PythonError();
  return obj.get() == v->obj.get() ? v : Value::constant(obj);
}

ValuePtr Tracer::make_slice(const ValuePtr& start, const ValuePtr& end, const ValuePtr& step) {
  ValuePtr v =
      Value::constant(PyRef::steal(PySlice_New(start->obj.get(), end->obj.get(), step->obj.get())));
  if (!v->obj) throw PythonError();
  if (start->sym || end->sym || step->sym) {
    v->sym_slice = true;
    v->items = {start, end, step};
  }
  return v;
}

bool Tracer::formats_into_call() const {
  // NOTE: `above` counts the values pushed over the string; an instruction that would take
  // the string itself (other than joining it into a longer one) ends the search.
  int above = 0;
  for (size_t i = pc_; i < bc_.insts.size() && i < pc_ + 64; ++i) {
    const bytecode::Instruction& inst = bc_.insts[i];
    switch (inst.opcode) {
      case LOAD_CONST:
      case LOAD_FAST:
#ifdef LOAD_FAST_CHECK
      case LOAD_FAST_CHECK:
#endif
      case LOAD_DEREF:
        ++above;
        continue;
#ifdef LOAD_FAST_LOAD_FAST
      case LOAD_FAST_LOAD_FAST:
        above += 2;
        continue;
#endif
      case LOAD_ATTR:  // `self.patch_size` (3.12 encodes a method load in bit 0: not followed)
#if PY_VERSION_HEX >= 0x030C0000
        if (inst.arg & 1) return false;
#endif
        if (above < 1) return false;
        continue;
      case BINARY_SUBSCR:
        if (above < 2) return false;
        --above;
        continue;
#ifdef FORMAT_VALUE
      case FORMAT_VALUE:
        if (above < 1 || (inst.arg & 0x04)) return false;
        continue;
#else
      case CONVERT_VALUE:
      case FORMAT_SIMPLE:
        if (above < 1) return false;
        continue;
#endif
      case BUILD_STRING:
        above = inst.arg > above ? 0 : above - inst.arg + 1;
        continue;
#ifdef PRECALL
      case PRECALL:
#endif
      case NOP:
        continue;
      case CALL:
        return inst.arg == 2 && above == 0;
      default:
        return false;
    }
  }
  return false;
}

ValuePtr Tracer::unread_message(ValuePtr s, const std::vector<ValuePtr>& parts) {
  s->unread_message = true;
  s->items = parts;
  return s;
}

ValuePtr Tracer::format_value(const ValuePtr& v_in, const ValuePtr& spec) {
  const ValuePtr v = detail::printable_value(ctx_, v_in);
  if (!v->is_const() || (spec && !spec->is_const()))
    graph_break("format_traced_value", "f-string of a " + v->type_name() + " value");
  PyRef out = PyRef::steal(PyObject_Format(v->obj.get(), spec ? spec->obj.get() : nullptr));
  if (!out) throw PythonError();
  return Value::constant(out);
}

void Tracer::do_call(int argc, PyObject* kw_names) {
  std::vector<ValuePtr> args(stack_.end() - argc, stack_.end());
  stack_.resize(stack_.size() - argc);
  ValuePtr a = pop();
  ValuePtr b = pop();
  ValuePtr fn;
  if (kNullAboveCallable) {  // b: the callable, a: self or NULL
    fn = b;
    if (a) args.insert(args.begin(), a);
  } else if (b) {
    fn = b;
    args.insert(args.begin(), a);
  } else {
    fn = a;
  }
  // NOTE: an f-string of sizes made for this call (formats_into_call) stays unread only as
  // the message of a `torch._assert` whose condition held: the relations the condition came
  // from are guarded, so wherever this entry runs the assert passes and never formats it.
  for (const ValuePtr& v : args) {
    if (!v || !v->unread_message) continue;
    const bool passes = fn && fn->is_const() && fn->obj.get() == torch_api().assert_fn.get() &&
                        !kw_names && args.size() == 2 && args[1] == v && args[0]->is_const() &&
                        args[0]->obj.get() == Py_True;
    if (!passes) ctx_.specialise(v);
  }
  KwArgs kwargs;
  if (kw_names) {
    Py_ssize_t nk = PyTuple_GET_SIZE(kw_names);
    size_t first = args.size() - nk;
    for (Py_ssize_t i = 0; i < nk; ++i)
      kwargs.emplace_back(utf8(PyTuple_GET_ITEM(kw_names, i)), args[first + i]);
    args.resize(first);
  }
  if (begin_item_assert(fn, args, kwargs)) return;
  DirectCallScope direct(ctx_);
  expect_direct_call(fn);
  push(call(fn, std::move(args), std::move(kwargs)));
}

void Tracer::expect_direct_call(const ValuePtr& fn) {
  ctx_.direct_call = {};
  if (!fn) return;
  if (fn->kind == VKind::Method && !fn->flag && fn->method_name.empty() && fn->obj &&
      PyFunction_Check(fn->obj.get()))
    ctx_.direct_call = {this, fn->obj.get(), nullptr};
  else if ((fn->kind == VKind::Const || fn->kind == VKind::Object) && fn->obj &&
           PyFunction_Check(fn->obj.get()))
    ctx_.direct_call = {this, fn->obj.get(), nullptr};
  else if (fn->kind == VKind::Module)
    ctx_.direct_call = {this, nullptr, fn.get()};
}

void Tracer::do_call_ex(int flags) {
  ValuePtr kw = (flags & 1) ? pop() : nullptr;
  ValuePtr pos = pop();
  ValuePtr fn, below;
  if (kNullAboveCallable) {
    pop();  // 3.13: the NULL pushed after the callable
    fn = pop();
  } else {
    fn = pop();
    below = pop();
  }
  if (below) {  // 3.11 method form: (fn, self) below the args tuple
    ValuePtr self = fn;
    fn = below;
    std::vector<ValuePtr> items = iterate(pos);
    items.insert(items.begin(), self);
    pos = Value::tuple(std::move(items));
  }
  KwArgs kwargs;
  if (kw) {
    if (kw->kind != VKind::Dict) graph_break("unsupported_operand", "** of a non-dict value");
    for (size_t i = 0; i < kw->keys.size(); ++i) {
      if (!PyUnicode_Check(kw->keys[i].get()))
        graph_break("user_exception", "keywords must be strings");
      kwargs.emplace_back(utf8(kw->keys[i].get()), kw->items[i]);
    }
  }
  std::vector<ValuePtr> positional = iterate(pos);
  DirectCallScope direct(ctx_);
  expect_direct_call(fn);
  push(call(fn, std::move(positional), std::move(kwargs)));
}

void Tracer::do_make_function(int flags) {
  ValuePtr code = pop();
  ValuePtr fn = Value::of_kind(VKind::Function);
  fn->obj = code->obj;
  fn->globals = PyRef::borrow(globals_);
  TL_CHECK(code->is_const() && PyCode_Check(code->obj.get())) << "MAKE_FUNCTION without code";
  // NOTE: 3.11/3.12 pop the attributes named by `flags` from the top down
  // (3.13 passes flags 0 and sets each with SET_FUNCTION_ATTRIBUTE).
  for (int flag : {0x08, 0x04, 0x02, 0x01})
    if (flags & flag) set_function_attribute(fn, flag, pop());
  push(fn);
}

void Tracer::set_function_attribute(const ValuePtr& fn, int flag, const ValuePtr& attr) {
  TL_CHECK(fn && fn->kind == VKind::Function) << "function attribute on a non-function";
  switch (flag) {
    case 0x08:  // closure
      fn->cells = attr->items;
      return;
    case 0x04:  // annotations
      return;
    case 0x02:  // keyword-only defaults
      if (attr->kind != VKind::Dict)
        graph_break("unsupported_function_object", "keyword-only defaults that are not a dict");
      fn->keys = attr->keys;
      fn->kwdefaults = attr->items;
      return;
    case 0x01:  // positional defaults
      fn->items = iterate(attr);
      return;
    default:
      graph_break("unsupported_bytecode", "function attribute " + std::to_string(flag));
  }
}

}  // namespace tl::capture
