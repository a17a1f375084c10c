#pragma once
// The symbolic bytecode interpreter: runs one code object over symbolic
// values, recording torch ops into the context's graph. Inlined calls run a
// nested Tracer on the same context.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bytecode/decode.h"
#include "capture/context.h"

namespace tl::capture {

class UserException;

// Thrown by the innermost frame of CaptureContext::stop_path where it stops; each tracer it
// leaves records its state (CaptureContext::stopped) and the top-level one returns. Not a
// std::exception: nothing on the way may take it for an error.
struct NestedStop {};
using KwArgs = std::vector<std::pair<std::string, ValuePtr>>;

class Tracer {
 public:
  // `code`, `globals` and `builtins` are borrowed and must outlive the tracer.
  // `generator`: run a generator function's body to completion, collecting
  // what it yields (run() then returns an Iterator over them).
  Tracer(CaptureContext& ctx, PyCodeObject* code, PyObject* globals, PyObject* builtins, int depth,
         bool generator = false);

  // Runs the code with its localsplus slots (arguments filled, the rest null)
  // and free-variable cells; returns the returned value.
  ValuePtr run(std::vector<ValuePtr> localsplus, std::vector<ValuePtr> free_cells);
  // A generator body: start() binds its slots without running anything; each resume() runs
  // it to its next yield and returns the value, or null once it returned.
  void start(std::vector<ValuePtr> localsplus, std::vector<ValuePtr> free_cells);
  ValuePtr resume();
  // A generator body's return value once resume() returned null.
  const ValuePtr& returned_value() const { return return_value_; }
  // A generator stopped at a yield inside a try/finally, except or with block: freeing it
  // runs code (GeneratorExit is thrown into it), which the trace does not model.
  bool suspended_in_handler_region() const;
  // Top-level tracer only: run() returns nullptr, with stopped() true, when it
  // first reaches instruction `index`, before executing it. The state at that
  // point (stack(), locals()) is what a graph break hands to CPython.
  void stop_at(int index) { stop_at_ = index; }
  // Top-level tracer only: follow CaptureContext::stop_path (more than one frame deep).
  void stop_on_path() { on_path_ = true; }
  bool stopped() const { return stopped_; }
  const std::vector<ValuePtr>& stack() const { return stack_; }
  const std::vector<ValuePtr>& locals() const { return locals_; }

  // Calls any value with arguments (torch op, builtin, inlined function,
  // module, method...). Public for the builtins table.
  ValuePtr call(const ValuePtr& fn, std::vector<ValuePtr> args, KwArgs kwargs);
  ValuePtr get_attr(const ValuePtr& obj, const std::string& name);
  // The key of `item` as a member of a set (objects.cpp), or null.
  PyRef set_member_key(const ValuePtr& item);
  // `module.name = v` writes back the tensor `module.name` already is (attributes.cpp).
  bool stores_back_same_tensor(const ValuePtr& module, const std::string& name, const ValuePtr& v);
  bool plain_tensor_attr(const ValuePtr& module, const std::string& name, const ValuePtr& v);
  // getattr with a default: returns nullopt when the attribute does not exist.
  // `generic`: object.__getattribute__ semantics, ignoring a type's override
  // (what super().__getattribute__ runs).
  std::optional<ValuePtr> try_get_attr(const ValuePtr& obj, const std::string& name,
                                       bool generic = false);
  ValuePtr make_super(const ValuePtr& cls, const ValuePtr& self);  // super_attr.cpp
  ValuePtr binary_op(PyObject* op_fn, const ValuePtr& a, const ValuePtr& b);
  ValuePtr call_method_caller(PyObject* f, PyObject* reduced, const ValuePtr& obj);
  std::optional<ValuePtr> call_operator_getter(PyObject* f, std::vector<ValuePtr>& args,
                                               KwArgs& kwargs);
  ValuePtr sorted_by_first(PyObject* sorted_fn, const std::vector<ValuePtr>& items,
                           const KwArgs& kwargs);
  ValuePtr sorted_objects(const std::vector<ValuePtr>& items, const KwArgs& kwargs);
  ValuePtr user_binary_op(PyObject* op_fn, const ValuePtr& a, const ValuePtr& b);
  ValuePtr unary_op(PyObject* op_fn, const ValuePtr& a);
  ValuePtr compare(int op, const ValuePtr& a, const ValuePtr& b);
  // `a == b` / `a != b` (eq false) for an object whose type defines __eq__.
  ValuePtr custom_equality(bool eq, const ValuePtr& a, const ValuePtr& b);
  bool truth(const ValuePtr& v);
  std::vector<ValuePtr> iterate(const ValuePtr& v);  // materialise an iterable (consumes it)
  // iter(v): an Iterator value; lists and dicts are iterated live (iterators.cpp).
  ValuePtr get_iter(const ValuePtr& v);
  // next(it) of an Iterator value; null once exhausted.
  ValuePtr iter_next(const ValuePtr& it);
  // objects.cpp: obj's Python-defined dunder `name` inlined with `args`; nullopt when its
  // class defines none in Python.
  std::optional<ValuePtr> call_dunder(const ValuePtr& obj, const char* name,
                                      std::vector<ValuePtr> args);
  ValuePtr object_iter(const ValuePtr& v);  // iter() of a user-defined class's object
  ValuePtr subscript(const ValuePtr& container, const ValuePtr& index);
  // What `{**obj}` reads from a dict subclass instance whose items are traced (a Dict).
  ValuePtr mapping_items(const ValuePtr& obj);
  bool contains(const ValuePtr& container, const ValuePtr& item);  // `item in container`
  CaptureContext& ctx() { return ctx_; }
  // True while the instruction being traced lies inside a try block.
  bool in_try_block() const { return pc_ > 0 && pc_ - 1 < in_try_.size() && in_try_[pc_ - 1]; }

 private:
  ValuePtr execute();  // runs to the return (or, in a generator, the next yield)
  void step(const bytecode::Instruction& inst);
  void do_call(int argc, PyObject* kw_names);
  void do_call_ex(int flags);
  // Before a CALL dispatches `fn`: the inlined frame that will be this very call
  // (CaptureContext::direct_call).
  void expect_direct_call(const ValuePtr& fn);
  void do_make_function(int flags);
  void set_function_attribute(const ValuePtr& fn, int flag, const ValuePtr& attr);
  // The fast local at `slot`; a graph break (the user's UnboundLocalError) when unbound.
  ValuePtr load_fast(int slot);
  // f-string steps: !s/!r/!a (conversion 1/2/3, 0: none), then format() with `spec`.
  ValuePtr convert_value(const ValuePtr& v, int conversion);
  ValuePtr format_value(const ValuePtr& v, const ValuePtr& spec);
  // True when the instructions after this one only load values, format and join them into a
  // string and call with two arguments, the string last (`f(cond, f"...{n}...")`).
  bool formats_into_call() const;
  // `s`, an f-string of `parts`' symbolic ints headed for a call: see Value::unread_message.
  static ValuePtr unread_message(ValuePtr s, const std::vector<ValuePtr>& parts);
  void store_subscript(const ValuePtr& container, const ValuePtr& index, const ValuePtr& value);
  // dict.__setitem__ (the C base's) on an Object of a dict subclass: on one made by the trace
  // its symbolic items; on one read from the frame, those items (read once, then kept) and a
  // BaseSetItem effect replayed after the graph.
  void base_setitem(const ValuePtr& obj, const ValuePtr& key, const ValuePtr& value);
  void store_attr(const ValuePtr& obj, const std::string& name, const ValuePtr& value);
  void store_plain_attr(const ValuePtr& obj, const std::string& name, const ValuePtr& value);
  bool store_class_attr(const ValuePtr& cls, const std::string& name, const ValuePtr& v);
  ValuePtr class_overlay(PyTypeObject* type, const std::string& name) const;
  ValuePtr load_global(const std::string& name);
  ValuePtr inline_function(PyObject* func, ir::SourcePtr func_src, const ValuePtr& made,
                           std::vector<ValuePtr> args, const KwArgs& kwargs);
  ValuePtr call_builtin(PyObject* fn, std::vector<ValuePtr>& args, KwArgs& kwargs, bool& handled);
  // sorted/min/max with a key= of the user's: the key traced per item (builtins.cpp).
  ValuePtr keyed_order(PyObject* fn, const std::string& name, std::vector<ValuePtr>& args,
                       const KwArgs& kwargs);
  ValuePtr call_method_on(const ValuePtr& self, const std::string& name,
                          std::vector<ValuePtr>& args, KwArgs& kwargs);
  ValuePtr call_module(const ValuePtr& module, std::vector<ValuePtr> args, KwArgs kwargs);
  ValuePtr wrap_partial(const ValuePtr& partial_const);
  ValuePtr call_weakref(const ValuePtr& fn, std::vector<ValuePtr>& args, KwArgs& kwargs);
  std::optional<ValuePtr> super_attr(const ValuePtr& sup, const std::string& name);
  ValuePtr call_base_slot(const ValuePtr& self, const std::string& name,
                          std::vector<ValuePtr>& args);
  std::optional<ValuePtr> container_attr(const ValuePtr& obj, const std::string& name);
  std::optional<ValuePtr> custom_getattr(const ValuePtr& obj, const std::string& name);
  ValuePtr make_namedtuple(PyObject* cls, const std::vector<ValuePtr>& args, const KwArgs& kwargs);
  ValuePtr construct_object(PyObject* cls, std::vector<ValuePtr> args, KwArgs kwargs);
  // A bare instance of `cls` (its tp_new with no arguments, kept alive for the trace) as an
  // object made by traced code: attribute writes stay symbolic (Value::flag).
  ValuePtr new_traced_object(PyObject* cls);
  // module_construct.cpp: nn.Module instances built by traced code (made for real at trace
  // time; `flag` set on their value), torch.nn code run on them, and their attribute writes.
  static bool is_fresh_module(const ValuePtr& v);
  ValuePtr construct_module(PyObject* cls, std::vector<ValuePtr> args, KwArgs kwargs);
  std::optional<ValuePtr> fresh_module_call(PyObject* func, const std::vector<ValuePtr>& args,
                                            const KwArgs& kwargs);
  void store_fresh_module_attr(const ValuePtr& m, const std::string& name, const ValuePtr& v);
  // objects.cpp: objects made by traced code (dataclasses, ModelOutput) and dunder dispatch.
  ValuePtr construct_model_output(PyObject* cls, std::vector<ValuePtr>& args, KwArgs& kwargs);
  std::optional<ValuePtr> created_object_method(const ValuePtr& self, const std::string& name,
                                                std::vector<ValuePtr>& args, KwArgs& kwargs);
  ValuePtr call_set_method(const ValuePtr& self, const std::string& name,
                           std::vector<ValuePtr>& args);
  // deque.cpp: collections.deque(iterable, maxlen) and the methods of a Deque value.
  ValuePtr make_deque(std::vector<ValuePtr>& args, KwArgs& kwargs);
  ValuePtr call_deque_method(const ValuePtr& self, const std::string& name,
                             std::vector<ValuePtr>& args, KwArgs& kwargs);
  // library_calls.cpp: library functions given their effect directly (dataclasses.fields,
  // torch.finfo, logging calls, object.__setattr__...); nullopt when `fn` is none of them.
  std::optional<ValuePtr> call_library(PyObject* fn, const ValuePtr& self,
                                       std::vector<ValuePtr>& args, KwArgs& kwargs);
  std::optional<ValuePtr> deepcopy_value(const ValuePtr& v);  // copy.deepcopy(v), or none
  ValuePtr call_lru_cached(PyObject* fn, std::vector<ValuePtr>& args, KwArgs& kwargs);
  std::optional<ValuePtr> call_numpy(PyObject* fn, std::vector<ValuePtr>& args, KwArgs& kwargs);
  std::optional<ValuePtr> call_numpy_method(const ValuePtr& fn, std::vector<ValuePtr>& args,
                                            KwArgs& kwargs);
  // autograd_function.cpp: Function.apply of class `cls`, inlined when autograd won't record.
  ValuePtr call_autograd_function(const ValuePtr& cls, std::vector<ValuePtr>& args, KwArgs& kwargs);
  // The same when autograd records the call: one graph node calling `cls.apply`.
  void guard_state_reads(PyObject* cls, const char* hint);
  ValuePtr call_recorded_function(const ValuePtr& cls, const std::string& name,
                                  std::vector<ValuePtr>& args);
  // Starts the handler covering instruction `index` for an exception raised by
  // it (CPython's exception-table unwinding); false when no handler covers it.
  bool enter_handler(size_t index, const UserException& e);
  // The exception an except block is handling in this frame or the nearest caller
  // (sys.exception()), borrowed; null when none.
  PyObject* handled_exception() const;
  // First instruction of the try body containing `index` (in_try_ run).
  size_t try_region_start(size_t index) const;
  // The top-level instruction a graph break at `index` stops before.
  int break_point(size_t index) const;
  void jump_if(const bytecode::Instruction& inst, bool jump);
  // data_dependent_assert.cpp: an `assert` on a tensor's value becomes a check the graph runs.
  // Where the assertion holds: the instruction it goes on at, and the truth `cond` has then.
  struct AssertSite {
    size_t holds_at;
    bool holds_if;
  };
  // The assert whose conditional jump is instruction `jump` when `cond` (the value the jump
  // tests) can be checked in the graph there; nullopt otherwise (neither side of the jump is a
  // branch that only raises, the value is no one-element traced tensor, or the graph already
  // has a visible effect).
  std::optional<AssertSite> assert_site(size_t jump, const ValuePtr& cond);
  // `cond` can be checked in the graph: a one-element traced tensor, no visible effect in the
  // graph yet, and autograd will not record it.
  bool checkable(const ValuePtr& cond);
  void add_check(const ValuePtr& cond, bool holds_if);  // the check node, at the graph's end
  // `torch._assert(cond, message)` on a checkable tensor: its check recorded, true.
  bool call_torch_assert(PyObject* fn, const std::vector<ValuePtr>& args, const KwArgs& kwargs);
  // At the conditional jump being run: records the check of `cond` and goes on where the
  // assertion holds; false (nothing done) when assert_site() says no.
  bool check_assertion(const ValuePtr& cond);
  // At a CALL of `Tensor.item()` (`fn`, no arguments; or `int(t)`/`float(t)` giving the same
  // number) whose number only feeds an assert
  // (`assert t.item() <= n`, `assert not t.item()`): pushes the tensor in its place and returns
  // true; the comparison then runs on the tensor as Python compares the number
  // (item_comparison).
  bool begin_item_assert(const ValuePtr& fn, const std::vector<ValuePtr>& args,
                         const KwArgs& kwargs);
  // COMPARE_OP of that assert: `a`/`b` (one of them the pushed tensor) replaced by operands
  // whose tensor comparison gives Python's answer; a graph break (at the item() call) when no
  // exact one exists.
  void item_comparison(ValuePtr& a, ValuePtr& b);
  // The item() call such an assert started at (top-level index of this tracer's code), the
  // COMPARE_OP (-1: none) and the tensor pushed; a break before the jump breaks at the call, so
  // CPython never sees the tensor where the number belongs.
  struct PendingItem {
    int call = -1;
    int compare = -1;
    const Value* value = nullptr;
  };
  void mark_mutated(const ValuePtr& container);
  // `seq[a:b]` of an nn.Sequential as a module made by traced code; null for other modules.
  ValuePtr slice_sequential(const ValuePtr& c, PyObject* slice);
  // The children (a Dict value) of a module slice_sequential made, or null.
  ValuePtr sliced_children(const ValuePtr& m);
  void list_store_slice(const ValuePtr& list, PyObject* slice, const ValuePtr* items);

  ValuePtr pop();
  // A slice value; keeps symbolic bounds (x[:, :t]) for a tensor subscript.
  // `a <op> b` on ints, one a symbolic size ("add", "iadd", "sub", "mul", "floordiv", "mod"):
  // the value with its expression; null for anything else (then specialised).
  ValuePtr sym_arith(const std::string& op, const ValuePtr& a, const ValuePtr& b);
  ValuePtr make_slice(const ValuePtr& start, const ValuePtr& end, const ValuePtr& step);
  ValuePtr& top(int depth = 1);
  void push(ValuePtr v) { stack_.push_back(std::move(v)); }
  std::string name_at(int index) const;  // co_names[index]
  // suspended_in_handler_region's reading of exception handlers (tracer.cpp).
  const bytecode::ExceptionTableEntry* handler_at(int offset) const;
  bool reraises_to_the_caller(int offset, int hops) const;
  bool handler_skips_generator_exit(int h) const;
  PyObject* const_at(int index) const;  // co_consts[index], borrowed

  CaptureContext& ctx_;
  PyCodeObject* code_;
  PyObject* globals_;
  PyObject* builtins_;
  int depth_;
  bytecode::Bytecode bc_;
  std::vector<bool> in_try_;  // instruction covered by a try/except handler
  std::vector<ValuePtr> stack_;
  std::vector<ValuePtr> locals_;
  std::vector<ValuePtr> free_cells_;
  PyObject* kw_names_ = nullptr;  // borrowed from co_consts
  size_t pc_ = 0;
  int stop_at_ = -1;
  bool stopped_ = false;
  // This frame can be resumed on its own after a break inside it (GraphBreak::Level).
  bool nestable_ = false;
  PyRef closure_;  // the inlined function's closure (with nestable_)
  // This frame lies on CaptureContext::stop_path: it stops there (innermost) or in its call.
  bool on_path_ = false;
  bool sym_aware_ = false;     // the instruction being run follows symbolic sizes (tracer.cpp)
  bool scalar_aware_ = false;  // ... and scalar inputs (capture/scalar_inputs.h)
  bool returned_ = false;
  bool generator_ = false;
  ValuePtr yielded_;  // set by YIELD_VALUE, taken by execute()
  ValuePtr return_value_;
  // The exception an `except` block of this frame is handling (CPython's
  // exc_info), or null: PUSH_EXC_INFO saves it, POP_EXCEPT restores it.
  ValuePtr handled_exc_;
  int try_start_ = -1;  // top level: the try statement whose handler runs now
  PendingItem pending_item_;
};

}  // namespace tl::capture
