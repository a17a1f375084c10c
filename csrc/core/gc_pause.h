#pragma once
// Pauses CPython's cyclic garbage collector for a scope of torchlite's own work (a capture, a
// compile for new sizes). That work allocates thousands of short-lived Python objects (meta
// tensors, tuples, dicts), and each 700 of them start a young collection; the young ones count
// towards the full collections, which walk every object of the process (~400k with
// transformers loaded: 0.1-0.5 s each). A collection started in the middle of a capture or a
// compile for new sizes examines its half-built objects for nothing; paused, the objects are
// counted and examined once, by the first collection after the scope. Nothing is lost: cycles
// made inside are collected later; a scope inside another (or inside a user's gc.disable())
// leaves the collector as it found it.
#include <Python.h>

namespace tl {

class GcPause {
 public:
  GcPause() : was_enabled_(PyGC_Disable() == 1) {}
  ~GcPause() {
    if (was_enabled_) PyGC_Enable();
  }
  GcPause(const GcPause&) = delete;
  GcPause& operator=(const GcPause&) = delete;

 private:
  bool was_enabled_;
};

}  // namespace tl
