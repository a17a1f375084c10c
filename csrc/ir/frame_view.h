#pragma once
// A borrowed view of a frame's inputs at entry, before its first instruction
// runs: argument slots hold raw values (MAKE_CELL has not run), free variables
// are read from the function's closure. Guards, capture and compiled entries
// all read the frame through this view; it never owns anything.
#include <Python.h>

namespace tl::ir {

struct FrameView {
  PyObject* const* locals = nullptr;  // localsplus slots; entries may be NULL
  int nlocals = 0;                    // number of slots in `locals`
  PyObject* closure = nullptr;        // tuple of cells (func.__closure__) or NULL
  PyObject* globals = nullptr;        // dict
  PyObject* builtins = nullptr;       // dict
};

}  // namespace tl::ir
