#pragma once
// Pauses CPython's cyclic garbage collector for a scope of torchlite's own work (a capture, a
// compile for new sizes). That work allocates thousands of short-lived Python objects (meta
// tensors, tuples, dicts), and each 700 of them start a young collection; the young ones count
// towards the full collections, which walk every object of the process (~400k with
// transformers loaded: 0.1-0.5 s each). Measured on a size-generic GPT-2 (2 layers, CPU): a
// new length's compile started ~0.45 young collections and, every ~30 lengths, a full one that
// took 466 ms (bench/dynamic.py's "first call at an unseen length" pays it whenever it lands
// there). Paused, the objects are counted and examined once, by the first collection after
// the scope. Nothing is lost: cycles made inside are collected later; a scope inside another
// (or inside a user's gc.disable()) leaves the collector as it found it.
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
