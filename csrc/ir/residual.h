#pragma once
// What a compiled frame does around its graph: how the return value is rebuilt
// from the graph's outputs, and which side effects are replayed, in order.
// Plain data written by capture and executed by the runtime.
#include <string>
#include <vector>

#include "core/py_ref.h"
#include "ir/source.h"

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
  };
  Kind kind = Kind::Const;
  int index = -1;
  PyRef value;  // Const: the value; NamedTuple: the type
  SourcePtr source;
  std::vector<Residual> items;
  std::vector<PyRef> keys;
};

// A mutation the traced code made to something that outlives the frame.
struct SideEffect {
  enum class Kind {
    SetAttr,      // setattr(target, name, value)
    SetGlobal,    // globals[name] = value
    ReplaceList,  // target[:] = value
    ReplaceDict,  // target.clear(); target.update(value)
    DelAttr,      // delattr(target, name)
  };
  Kind kind = Kind::SetAttr;
  SourcePtr target;  // SetAttr, ReplaceList, ReplaceDict, DelAttr
  std::string name;  // SetAttr, SetGlobal, DelAttr
  Residual value;
};

}  // namespace tl::ir
