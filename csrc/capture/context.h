#pragma once
// State shared by every (inlined) frame of one capture: the graph being
// built, its guards, the inputs read from the frame, and the side effects the
// traced code made. The interpreter (tracer.cpp) reads and writes it.
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "capture/value.h"
#include "guards/guard_set.h"
#include "ir/frame_view.h"
#include "ir/graph.h"
#include "ir/residual.h"

namespace tl::capture {

class Tracer;

// A torch.autocast region entered by traced code, with the thread-local autocast state it
// replaced (restored when the region is left).
struct AutocastRegion {
  std::string device;  // "cpu", "cuda", ...
  PyRef dtype;
  bool enabled = true;
  bool cache_enabled = true;
  PyRef prev_enabled, prev_dtype, prev_cache;
};

struct PendingEffect {
  ir::SideEffect::Kind kind;
  ir::SourcePtr target;
  std::string name;
  ValuePtr value;
  PyRef key;  // BaseSetItem
};

class CaptureContext {
 public:
  explicit CaptureContext(const ir::FrameView& frame);
  ~CaptureContext();  // restores the grad mode and autocast state traced code changed

  // Wraps a real object read from the frame (or from a traced object) into a
  // symbolic value, installing the guards its use needs. `obj` is borrowed.
  // `guard` false: the parent's guards already pin it (e.g. a module's
  // __dict__ entry under DICT_VERSION), so constants get no guard of their own.
  ValuePtr wrap(PyObject* obj, ir::SourcePtr src, bool guard = true);
  // A module read from `src` (non-null) is guarded by type and by each attribute the trace
  // reads (Value::flag of a Module), not by identity.
  bool guarded_by_structure(const ir::SourcePtr& src) const;
  // Guards a module's registry dict (`_modules`, `_parameters`, `_buffers`) the trace read
  // through `module` (with a source): its version; for a module guarded by structure (new on
  // every call, so is each dict) its keys in order instead, each item guarded where it is read.
  void guard_module_registry(const ValuePtr& module, const char* name, PyObject* dict);
  // The items of a dict subclass instance reached from a frame local (`obj`, with a source) as
  // a Dict of inputs in its storage's iteration order (guards/dict_order.h), under a key guard.
  // With `need_iteration_order`, null when its class iterates in Python code of its own (its
  // storage then says nothing about the order it yields).
  ValuePtr dict_subclass_items(const ValuePtr& obj, bool need_iteration_order);
  // Converts a trace-time result (no tensors inside) into a value: lists and
  // dicts become mutable List/Dict values, everything else a constant.
  ValuePtr from_result(PyObject* obj);

  // Records a torch op in the graph and runs it on meta tensors. `target` is
  // a callable (call_function) or, when `method` is non-empty, the method of
  // args[0] (call_method). Throws GraphBreak if the op cannot be traced.
  // Inside an autocast region the casts autocast would make are recorded first.
  ValuePtr call_op(PyObject* target, const std::string& method, const std::vector<ValuePtr>& args,
                   const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  // call_op without autocast's casts.
  ValuePtr record_op(PyObject* target, const std::string& method, const std::vector<ValuePtr>& args,
                     const std::vector<std::pair<std::string, ValuePtr>>& kwargs);

  // Switches grad mode both now (so meta ops see it) and in the graph.
  void set_grad_mode(bool enabled);
  bool grad_enabled() const { return grad_enabled_; }

  ir::Graph& graph() { return *graph_; }
  std::shared_ptr<ir::Graph> graph_ptr() { return graph_; }
  guards::GuardSet& guards() { return guards_; }
  const std::vector<PyRef>& example_inputs() const { return example_inputs_; }
  // Drops the placeholders of tensor inputs no node uses (and their example inputs), once the
  // graph is complete; their guards stay. Returns how many were dropped.
  int drop_unused_inputs();
  // Moves node `n` of the graph before `pos`, keeping the example inputs in the order of the
  // placeholders when `n` is one.
  void move_node_before(ir::Node* n, const ir::Node* pos);
  // `a is b` for two tensor inputs (placeholders) reached through different
  // sources, answered from the real objects and guarded; nullopt when either
  // is not an input.
  std::optional<bool> same_input_tensor(const ValuePtr& a, const ValuePtr& b);
  const ir::FrameView& frame() const { return frame_; }
  // Where the memory of a tensor input's meta storage (its `_cdata`) really is: the real
  // storage's `_cdata` and the byte offset of the meta storage's start in it. Inputs are traced
  // on meta tensors of their own, so this is how two inputs viewing one storage (`v = y[1:]`
  // handed to a resume function beside `y`) are seen to overlap. nullopt for other storages.
  struct RealStorage {
    long long storage = 0;
    long long byte_offset = 0;
  };
  std::optional<RealStorage> real_storage(long long meta_storage) const {
    auto it = real_storages_.find(meta_storage);
    if (it == real_storages_.end()) return std::nullopt;
    return it->second;
  }
  // Tensor inputs (placeholders) in graph order with the real tensors, borrowed.
  const std::vector<std::pair<ir::SourcePtr, PyObject*>>& tensor_inputs() const {
    return tensor_inputs_;
  }
  // The real tensor behind a tensor input (a placeholder read through its source), borrowed;
  // null for a tensor computed by the graph.
  PyObject* real_input(const ValuePtr& v) const {
    auto it = v->source ? input_tensors_.find(v->source->str()) : input_tensors_.end();
    return it == input_tensors_.end() ? nullptr : it->second;
  }

  // Side effects and the overlays that make traced reads see traced writes.
  std::map<std::pair<PyObject*, std::string>, ValuePtr> attr_overlay;
  std::map<std::string, ValuePtr> global_overlay;
  std::vector<PendingEffect> effects;
  std::vector<ValuePtr> sourced_containers;  // List/Dict values read from the frame
  std::vector<PyRef> keep_alive;             // objects whose address keys attr_overlay
  // index_bounds.cpp: an index computed after the graph's first effect -> its copy before it,
  // which every later check of the same index reads (one copy, one check).
  std::unordered_map<const ir::Node*, ir::Node*> index_copies;
  // weakref.ref(v) made by traced code (the real ref, kept alive here) -> v.
  std::map<PyObject*, std::pair<PyRef, ValuePtr>> weakref_targets;
  // autocast.cpp: regions entered by traced code (innermost last); whether any autocast is
  // on now, and a key of its state for caching per-op autocast policies.
  std::vector<AutocastRegion> autocast_regions;
  bool autocast_on = false;
  // Guard every nn.Module input by type and the attributes read, not by identity
  // (capture_frame's `structural_modules`). Modules on the value stack a resume
  // function receives are guarded so regardless (see wrap).
  bool structural_modules = false;
  // Attributes and globals (by source) holding an int or float that changed between calls
  // (a counter, `self.step += 1`): read as scalar inputs (capture/scalar_inputs.h), not as
  // constants. Set from capture's current_dynamic_numbers() when the context is made.
  std::unordered_set<std::string> dynamic_numbers;
  // A resume function's parameters that hold objects made in the call (capture/made_in_call.h):
  // a C instance read through one is guarded by type and the attributes read, not identity.
  std::unordered_set<std::string> made_in_call;
  // A with-block of a Python context manager (a class with __enter__/__exit__, a
  // contextlib.contextmanager) in the frame itself is inlined like one in a called function.
  // A break while it is open has no resume function that re-enters it, so a trace that broke
  // after entering one (`entered_top_manager`) is redone with this off: the with-block itself
  // is the break, as before.
  bool inline_top_managers = true;
  bool entered_top_manager = false;
  std::string autocast_key;

  // The handled-exception slot of each running tracer, innermost last (tracer.cpp).
  std::vector<const ValuePtr*> exc_info;
  // Every generator body the trace made, kept to the end so capture can tell whether one is
  // left suspended where CPython would run cleanup code when freeing it.
  std::vector<std::shared_ptr<Tracer>> generators;

  // Resuming inside inlined calls (capture.h, ResumePlan::nested). `direct_call`: set by a
  // CALL just before it dispatches; the inlined function that is that very call (its result is
  // the CALL's result) matches it, and only the first inline after it may. `stop_path`: the
  // trace stops in the frame at depth stop_path.size() - 1 before its instruction `index`, each
  // frame above it inside its call at `index`; `stopped` gets each one's state, innermost first.
  struct DirectCall {
    const Tracer* caller = nullptr;
    PyObject* func = nullptr;
    const Value* module = nullptr;  // a module call: forward, when no hook runs, is the call
  };
  DirectCall direct_call;
  struct StopAt {
    PyCodeObject* code = nullptr;
    int index = -1;
  };
  std::vector<StopAt> stop_path;
  struct Stopped {
    std::vector<ValuePtr> stack;
    std::vector<ValuePtr> locals;
  };
  std::vector<Stopped> stopped;
  bool stop_grad_mode = true;  // grad mode where the innermost frame stopped

  // The trace read a size of a tensor (shape, size(), len(), numel(), an op returning a number
  // or a sequence whose length follows from a size): its graph may hold the sizes of this call
  // and must not serve other sizes (frame/size_generic.h).
  bool reads_sizes = false;
  std::string reads_sizes_why;  // the first such read: "x.stride() at file.py:12"
  void read_size(const std::string& what) {
    if (!reads_sizes) reads_sizes_why = what + " at " + location;
    reads_sizes = true;
  }

  // Symbolic sizes (docs/internals/dynamic-shapes.md, layer 2): symbol k is dimension
  // sym_table[k].second of node sym_table[k].first's result; sym_relations are what the trace
  // decided from them. any_sym: some value carries an expression (skips the walks otherwise).
  std::vector<std::pair<ir::Node*, int>> sym_table;
  std::vector<ir::SymRelation> sym_relations;
  bool any_sym = false;
  // Numbers a resume function takes per call (capture/scalar_inputs.h): any_scalar is set once
  // a value has `scalar` (skips the walks otherwise).
  bool any_scalar = false;
  // The graph input holding scalar value `v`'s number at each call: a 0-d float64 or int64
  // tensor on `device` (borrowed), one per source and device.
  ValuePtr scalar_input_tensor(const ValuePtr& v, PyObject* device);
  // Off once an op wrote an operand while a folded tensor was among its operands: folded
  // values may be stale from then on (capture/constant_fold.h).
  bool folding_on = true;
  // The size `dim` of tensor value `t` as an int value carrying its symbol.
  ValuePtr size_value(const ValuePtr& t, int64_t dim);
  ValuePtr shape_value(const ValuePtr& t);  // x.shape / x.size(): a torch.Size tuple of them
  // `v` (and the values inside a tuple, list, dict or slice) is used as a plain number from
  // here on: the trace now holds only at sizes where each expression keeps its value
  // (a relation `expr == value` each).
  // Scalar values (Value::scalar) inside are guarded by value and become plain constants too,
  // unless `scalars` is false.
  void specialise(const ValuePtr& v, bool scalars = true);
  // Only the scalar values inside `v`: for instructions that follow size expressions but not
  // scalar inputs.
  void specialise_scalars(const ValuePtr& v);
  // Scalar value `x` (Value::scalar) as a constant from here on: guarded by value (the values
  // it was computed from, for a computed one: Value::scalar_fn).
  void pin_scalar(const ValuePtr& x);
  // Records `a <op> b` (op as COMPARE_OP's 0..5) for two int values, at least one symbolic.
  void relate(const ValuePtr& a, int op, const ValuePtr& b, bool outcome);

  std::string location;  // "file.py:42" of the instruction being traced
  std::string filename;
  int lineno = -1;
  int64_t instructions = 0;

 private:
  ValuePtr wrap_tensor(PyObject* t, const ir::SourcePtr& src);
  // A bound method (borrowed) read from `src`, as a Method value of its
  // guarded __self__; null for other objects.
  ValuePtr wrap_bound_method(PyObject* obj, const ir::SourcePtr& src);
  // A dict view (borrowed) read from `src`, as a view of its guarded dict; null for other
  // objects and for views of dicts whose iteration is not read from storage.
  ValuePtr wrap_dict_view(PyObject* obj, const ir::SourcePtr& src);
  PyRef to_meta(PyObject* real_tensor);
  ValuePtr result_value(PyObject* meta_result, ir::Node* node, const PyRef& device);

  ir::FrameView frame_;
  std::shared_ptr<ir::Graph> graph_;
  guards::GuardSet guards_;
  std::unordered_map<std::string, ValuePtr> inputs_by_source_;
  // Mutable objects read from the frame, by identity (holding them, so no
  // address is reused while capturing), with the Value made for the first source.
  std::unordered_map<PyObject*, std::pair<PyRef, ValuePtr>> values_by_object_;
  std::vector<PyRef> example_inputs_;
  // Source of a tensor input -> the real tensor (borrowed: example_inputs_ holds it).
  std::unordered_map<std::string, PyObject*> input_tensors_;
  // Tensor inputs by object: one tensor reached through two sources is one value.
  std::unordered_map<PyObject*, ValuePtr> tensors_by_object_;
  std::unordered_map<long long, RealStorage> real_storages_;  // see real_storage()
  std::vector<std::pair<ir::SourcePtr, PyObject*>> tensor_inputs_;
  bool grad_enabled_ = true;
  bool initial_grad_ = true;
};

// The frame's numbers that changed between its calls (GuardSet::changed_numbers), for the
// captures that run while `numbers` lives (frame/compile_frame.cpp sets it around a capture).
class DynamicNumbersScope {
 public:
  explicit DynamicNumbersScope(std::unordered_set<std::string> numbers);
  ~DynamicNumbersScope();
  DynamicNumbersScope(const DynamicNumbersScope&) = delete;
  DynamicNumbersScope& operator=(const DynamicNumbersScope&) = delete;

 private:
  std::unordered_set<std::string> previous_;
};

// Python object for a value, for meta execution (tensors -> meta tensors);
// throws GraphBreak for values that cannot be passed to a torch op.
PyRef to_meta_arg(const ValuePtr& v, bool for_device_kwarg = false);
// An object made by traced code (Object with flag) as a tuple of its attribute and item
// values whose named_type is a builder that remakes the object from them, so return values
// and side effects can carry it out of the graph. Throws GraphBreak for other values.
ValuePtr lower_created_object(const ValuePtr& v);
// True for immutable types whose values may be folded at trace time.
bool is_immutable_constant(PyObject* obj);
// True for a Python function defined inside another function (its qualname has "<locals>")
// held by a frame local or free variable (`src` is one, or an item of a container it holds): one
// object per run of the code that defines it (a closure made before a graph break reaches the
// resume function anew on every call), so it is guarded by its code, and its defaults and closure
// are read through `src`, never by identity. One held by a module or a global (a hook) is kept:
// guarded by identity.
bool guarded_by_code(PyObject* obj, const ir::SourcePtr& src);
// The torch functions that make a tensor from sizes or data (torch.zeros, arange, rand, the
// *_like ones), by short name: traced on the meta device unless a device is given.
const std::unordered_set<std::string>& factory_functions();

}  // namespace tl::capture
