#pragma once
// Where a value of the traced frame came from: L['x'], G['SCALE'],
// L['self'].layer1[0].conv1.weight. Guards and compiled entries re-read values
// through sources on every call, so a source must be cheap to evaluate.
#include <memory>
#include <string>

#include "core/py_ref.h"

namespace tl::ir {

enum class SourceKind {
  Local,    // frame slot `index` named `name` (arguments and locals)
  Closure,  // free variable: cell `index` of the function's __closure__, named `name`
  Global,   // f_globals[name]
  Builtin,  // f_builtins[name]
  Attr,     // getattr(base, name)
  Item,     // base[key]; key is an int or str constant
  Held,     // `key` itself: an object the guard keeps alive (another module's
            // globals dict, a closure cell); `name` says what it is
  Deref,    // base(): the referent of the weakref `base` (None once it died)
  // torch.scalar_tensor(base, dtype=key[0], device=key[1]): the Python number `base` as a 0-d
  // tensor, made at each fetch. The graph input of a number a resume function takes per call
  // (capture/scalar_inputs.h); `name` is the dtype's short name, for str().
  ScalarTensor,
};

struct Source;
using SourcePtr = std::shared_ptr<const Source>;

struct Source {
  SourceKind kind;
  SourcePtr base;    // Attr, Item, Deref
  std::string name;  // Local, Closure, Global, Builtin, Attr
  int index = -1;    // Local slot, Closure cell
  PyRef key;         // Item

  static SourcePtr local(int slot, std::string name);
  static SourcePtr closure(int cell, std::string name);
  static SourcePtr global(std::string name);
  static SourcePtr builtin(std::string name);
  static SourcePtr attr(SourcePtr base, std::string name);
  static SourcePtr item(SourcePtr base, PyRef key);  // key: int or str
  static SourcePtr held(PyRef obj, std::string what);
  static SourcePtr deref(SourcePtr weakref);
  // dtype_device: a tuple (torch.dtype, torch.device); dtype_name: "float64", "int64".
  static SourcePtr scalar_tensor(SourcePtr number, PyRef dtype_device, std::string dtype_name);

  // The readable form used in guards.txt and error messages.
  std::string str() const;
};

}  // namespace tl::ir
