#pragma once
// FX-style graph: an ordered list of nodes (placeholder, call_function,
// call_method, output). Targets are the real torch callables, so the graph can
// be run op by op, printed, and converted to torch.fx.GraphModule.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/py_ref.h"
#include "ir/source.h"
#include "ir/sym_expr.h"
#include "ir/sym_float.h"

namespace tl::ir {

struct Node;

// An argument of a node: a reference to an earlier node, a constant, or a
// tuple/list/dict of arguments (e.g. torch.cat([%1, %2])).
struct Arg {
  enum class Kind { Node, Const, Tuple, List, Dict };
  Kind kind = Kind::Const;
  Node* node = nullptr;
  PyRef value;              // Const: the constant; Dict: unused
  std::vector<Arg> items;   // Tuple, List, Dict values
  std::vector<PyRef> keys;  // Dict keys (constants)
  // Const computed from tensor sizes (docs/internals/dynamic-shapes.md): `value` is its value
  // at the capture's sizes; a size-generic entry recomputes it from the symbols at new sizes.
  // An int: `sym`; a slice: `sym_slice` with start, stop, step in `items`.
  SymExprPtr sym;
  bool sym_slice = false;
  SymFloatPtr fsym;  // a float computed from sizes (`d ** -0.5`), recomputed as `sym` is

  static Arg of_node(Node* n);
  static Arg constant(PyRef v);
  static Arg tuple(std::vector<Arg> items);
  static Arg list(std::vector<Arg> items);
  static Arg dict(std::vector<PyRef> keys, std::vector<Arg> values);
};

// True for a missing argument (null) or the constant None.
inline bool is_none_or_absent(const Arg* a) {
  return !a || (a->kind == Arg::Kind::Const && a->value.get() == Py_None);
}

// Shape, dtype, device, strides and requires_grad of a tensor-valued node,
// taken from the meta tensor the op produced at trace time.
struct TensorMeta {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  PyRef dtype;   // torch.dtype
  PyRef device;  // torch.device of the real value (not "meta")
  bool requires_grad = false;
  std::string str() const;  // "f32[8,128]"
};

enum class OpKind { Placeholder, CallFunction, CallMethod, Output };

struct Node {
  int id = 0;
  OpKind op = OpKind::CallFunction;
  std::string name;         // unique, readable: "x", "add_1"
  PyRef target;             // CallFunction: the callable
  std::string target_name;  // "torch.add", "relu" (method), "operator.getitem"
  std::vector<Arg> args;
  std::vector<std::pair<std::string, Arg>> kwargs;
  std::optional<TensorMeta> meta;  // set for tensor-valued nodes
  PyRef example;                   // the trace-time (meta) value
  SourcePtr source;                // Placeholder: where the input is read from
  std::string location;            // user's "file.py:42" that created the node
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Node* add_placeholder(const std::string& name, SourcePtr source);
  Node* add_call_function(PyRef target, std::vector<Arg> args,
                          std::vector<std::pair<std::string, Arg>> kwargs);
  Node* add_call_method(const std::string& method, std::vector<Arg> args,
                        std::vector<std::pair<std::string, Arg>> kwargs);
  // The graph returns a flat tuple of these values.
  Node* set_output(std::vector<Arg> outputs);

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<Node*> placeholders() const;
  Node* output() const { return output_; }
  size_t num_ops() const;  // call_function + call_method nodes

  // For rewriting passes: moves `n` to just before `pos` (a node built with
  // add_* lands at the end; this puts it where its users need it), and drops a
  // node nothing refers to any more (checked). Both renumber `id`s.
  void move_before(Node* n, const Node* pos);
  void erase(const Node* n);

  // One node a line: `%add : f32[8] = torch.add(%x, 1)`.
  std::string str() const;
  // Checks that every argument refers to an earlier node; throws InternalError
  // naming the node and the graph otherwise.
  void lint() const;

 private:
  Node* append(OpKind op, std::string base_name);
  std::vector<std::unique_ptr<Node>> nodes_;
  Node* output_ = nullptr;
  std::vector<std::pair<std::string, int>> name_counts_;
  std::unordered_set<std::string> names_;  // every name taken
};

// "torch.add", "torch.nn.functional.relu", "operator.getitem".
std::string callable_name(PyObject* fn);  // borrows fn
// Readable constant for the printer: repr() trimmed to one line.
std::string const_repr(PyObject* v);  // borrows v

}  // namespace tl::ir
