#pragma once
// Symbolic values of the capture interpreter. One tagged struct rather than a
// class hierarchy: the interpreter switches on `kind` everywhere, and the few
// fields each kind uses are documented next to it.
#include <memory>
#include <string>
#include <vector>

#include "core/py_ref.h"
#include "ir/graph.h"
#include "ir/source.h"

namespace tl::capture {

enum class VKind {
  Const,         // obj: a Python object known at trace time (numbers, str, functions, classes...)
  Tensor,        // node + meta (trace-time meta tensor) + device (real torch.device)
  Tuple,         // items
  List,          // items; source set when it came from the frame (mutations are replayed)
  Dict,          // keys (constants) + items
  Module,        // obj: an nn.Module instance; flag: guarded by type and by each attribute read
                 // (CaptureContext::guarded_by_structure), not by identity and dict version
  Object,        // obj: another Python object read from the frame (attributes traced); flag: made
                 // by traced code (attrs holds its instance dict, mapping its dict items if the
                 // class subclasses dict)
  Method,        // self + obj (a Python function to inline with self) or method_name
                 // (tensor/list/dict/str)
  Function,      // obj: a code object made by MAKE_FUNCTION in traced code; items: defaults; cells
  Cell,          // cell_contents
  Iterator,      // items + pos, then `lazy` (items produced on demand: map, generator, live
                 // list/dict iterators); method_name: the Python type's name ("map")
  GradMode,      // flag: torch.no_grad()/enable_grad()/set_grad_enabled(flag) context manager
  GradModeExit,  // flag: the previous grad mode restored by __exit__
  Super,         // super(): self (the instance value) + obj (the class to search after)
  Partial,       // functools.partial: self (the callable), items (args), keys+kwdefaults (keywords)
  Set,           // obj: a fresh `set` of constants owned by this value (mutated in place)
  DictView,      // self: a Dict value; method_name: "keys", "values" or "items" (live)
  Deque,         // collections.deque: items (left to right) + maxlen; source set when it came
                 // from the frame (mutations replayed); state bumped by each mutation
};

struct Value;
class LazyIter;  // lazy_iter.h
using ValuePtr = std::shared_ptr<Value>;

struct Value {
  VKind kind = VKind::Const;
  PyRef obj;
  ir::SourcePtr source;
  // Tensor
  ir::Node* node = nullptr;
  PyRef meta;
  PyRef device;
  // Tuple, List, Dict values, Iterator, Function defaults
  std::vector<ValuePtr> items;
  std::vector<PyRef> keys;           // Dict keys; Function: kwdefault names
  std::vector<ValuePtr> kwdefaults;  // Function
  std::vector<ValuePtr> cells;       // Function closure cells
  PyRef globals;                     // Function: the globals of the frame that made it
  size_t pos = 0;                    // Iterator
  std::shared_ptr<LazyIter> lazy;    // Iterator: after items[pos..], null once exhausted
  // Method
  ValuePtr self;
  std::string method_name;
  // Cell
  ValuePtr cell_contents;
  bool flag = false;     // GradMode / GradModeExit: grad enabled; Method: a C slot of a base class
  int restore = -1;      // GradMode from set_grad_enabled(): the mode before the call
  bool mutated = false;  // List/Dict/Deque from the frame was changed by traced code
  PyRef maxlen;          // Deque: None or an int (not in `obj`, which other kinds compare)
  size_t state = 0;      // Deque: its mutations so far (as CPython's, for its iterators)
  PyRef named_type;      // Tuple: namedtuple / torch.Size type to rebuild, or null
  ValuePtr attrs;        // Object made by traced code: its __dict__ (a Dict value)
  ValuePtr mapping;      // Object made by traced code from a dict subclass: its items (a Dict)
  // Const int computed from tensor sizes: its expression over the capture's size symbols
  // (CaptureContext::size_value); obj is its value at this call's sizes. A Const slice with
  // such bounds: sym_slice, start/stop/step in items. Consumers that do not follow the
  // expression specialise it first (CaptureContext::specialise).
  ir::SymExprPtr sym;
  bool sym_slice = false;
  // Const str an f-string built from such ints on its way into a call (Tracer::
  // formats_into_call): the ints in items, specialised (CaptureContext::specialise) unless the
  // call is `torch._assert` whose condition held, which never reads its message (timm's
  // `_assert(H % p == 0, f"Input height ({H}) ...")`).
  bool unread_message = false;
  // Const float computed from such ints (`d ** -0.5`, `math.sqrt(d)`): its expression; obj is
  // its value at this call's sizes. Specialised like `sym`.
  ir::SymFloatPtr fsym;
  // Const float or int a resume function took as an argument (capture/scalar_inputs.h): `obj`
  // is this call's number, `source` reads each call's. A tensor op takes it as a 0-d tensor
  // input of the graph; any other use specialises it (CaptureContext::specialise: a guard by
  // value), so nothing reads the number as a constant while this is set.
  bool scalar = false;
  // A scalar value computed from others (no source; specialising it guards them): `scalar_fn`
  // (int or float: `int(x.sum().item())`; operator.add/sub/mul/truediv/neg: `1 - s`) of
  // `scalar_args` (scalar values and plain numbers).
  PyRef scalar_fn;
  std::vector<ValuePtr> scalar_args;
  // Tensor computed from constants alone: its real value (a small CPU tensor), and the
  // symbolic ints it was computed from (capture/constant_fold.h).
  PyRef folded;
  std::vector<ValuePtr> folded_sizes;
  ValuePtr same_object;  // Tensor returned by an op as one of its arguments (x.add_(1)): that
                         // argument's value, for `is` (the node still orders the mutation)

  static ValuePtr constant(PyRef obj, ir::SourcePtr src = nullptr);
  static ValuePtr tensor(ir::Node* node, PyRef meta, PyRef device);
  static ValuePtr tuple(std::vector<ValuePtr> items);
  static ValuePtr list(std::vector<ValuePtr> items);
  static ValuePtr of_kind(VKind kind);
  static ValuePtr cell(ValuePtr contents);

  bool is_const() const { return kind == VKind::Const; }
  bool is_tensor() const { return kind == VKind::Tensor; }
  bool is_sequence() const { return kind == VKind::Tuple || kind == VKind::List; }
  // "Tensor", "list", "int", ... for messages.
  std::string type_name() const;
};

// The float expression of an int or float constant (its `sym` or `fsym`, else its value);
// null for anything else, or an int too large for a float expression.
ir::SymFloatPtr float_expr(const ValuePtr& v);

}  // namespace tl::capture
