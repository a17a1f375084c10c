#pragma once
// What a compiled frame does around its graph: how the return value is rebuilt
// from the graph's outputs, and which side effects are replayed, in order.
// Plain data written by capture and executed by the runtime.
#include <string>
#include <vector>

#include "core/py_ref.h"
#include "ir/source.h"
#include "ir/sym_expr.h"

namespace tl::ir {

// A value to rebuild after the graph ran.
struct Residual {
  enum class Kind {
    GraphOutput,  // output `index` of the graph
    Const,        // a trace-time constant (immutable, guarded)
    Source,       // re-read from the frame (an input object returned as is)
    Tuple,
    List,
    Dict,         // keys[i] -> items[i]
    NamedTuple,   // type_(*items): namedtuple / torch.Size / structseq
    Slice,        // slice(items[0], items[1], items[2])
    Iterator,     // iter(value(*items)) (value null: iter(items[0])) advanced past `index` items;
                  // an item of this kind is made the same way (a loop's iterator at a break)
    ResumeLocal,  // in an Iterator: the object passed for the resume's local `index` (a list or
                  // dict made by the trace that a local holds too: one object, not two)
    Function,     // function `index` of the frame's MadeClosures (one object however often named)
    Deque,        // collections.deque(items, maxlen=value) (value: None or an int)
    SymSize,      // an int computed from the inputs' sizes: `sym` evaluated at this call's sizes,
                  // symbol k being size sym_dims[k].second of the tensor sym_dims[k].first reads
                  // (a size handed to CPython at a graph break, never the trace's number)
  };
  Kind kind = Kind::Const;
  int index = -1;
  PyRef value;  // Const: the value; NamedTuple: the type
  SourcePtr source;
  std::vector<Residual> items;
  std::vector<PyRef> keys;
  SymExprPtr sym;                                   // SymSize
  std::vector<std::pair<SourcePtr, int>> sym_dims;  // SymSize: null source for a symbol unused
};

// Closure cells and functions that traced code made and that outlive the trace (locals and
// stack at a graph break, the result, side effects). They are made once per run, before any
// residual names them, so every reference to one is the same object: a function made before a
// break and the code after it share each cell, and see every later write.
struct MadeClosures {
  struct CellRef {
    enum class Kind {
      Made,       // cells[index]
      FrameFree,  // the frame's free variable `index` (its __closure__ cell)
      Object,     // `object`: a cell of a function the trace read (kept alive)
      Fetched,    // the cell `source` reads (`L['f'].__closure__[0]`)
    };
    Kind kind = Kind::Made;
    int index = -1;
    PyRef object;
    SourcePtr source;
  };
  struct Cell {
    bool bound = false;  // unbound: an empty cell
    Residual contents;
  };
  struct Function {
    PyRef code;
    PyRef globals;        // the globals of the frame that made it
    Residual defaults;    // a Tuple, or none (Const None)
    Residual kwdefaults;  // a Dict, or none (Const None)
    std::vector<CellRef> closure;
  };
  // At a graph break the first cells are the frame's own cell variables, in slot order (they
  // become the first free variables of the code that goes on, bytecode/rewriter.h). Functions
  // are listed after the functions their defaults name.
  std::vector<Cell> cells;
  std::vector<Function> functions;
  bool empty() const { return cells.empty() && functions.empty(); }
};

// A mutation the traced code made to something that outlives the frame.
struct SideEffect {
  enum class Kind {
    SetAttr,       // setattr(target, name, value)
    SetGlobal,     // globals[name] = value
    ReplaceList,   // target[:] = value
    ReplaceDict,   // target.clear(); target.update(value)
    ReplaceDeque,  // target.clear(); target.extend(value) (its maxlen is guarded)
    DelAttr,       // delattr(target, name)
    SetCell,       // the frame's free variable `index`: its cell's contents = value (unbound:
                   // DeleteCell)
    DeleteCell,
    BaseSetItem,  // target[key] = value through the first C base of target's type (dict or
                  // OrderedDict): `super().__setitem__` of a dict subclass
  };
  Kind kind = Kind::SetAttr;
  SourcePtr target;  // SetAttr, Replace*, DelAttr
  std::string name;  // SetAttr, SetGlobal, DelAttr
  int index = -1;    // SetCell, DeleteCell
  PyRef key;         // BaseSetItem
  Residual value;
};

}  // namespace tl::ir
