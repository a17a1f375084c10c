#pragma once
// `opt.step()` of a torch.optim optimizer in traced code is a graph break of kind
// `optimizer_step`. At it CPython calls torchlite's compiled step (torchlite/_optimizer.py: fused
// kernels that update the parameters and state in place) for the optimizers torchlite compiles,
// else torch's own step, eagerly and whole: its Python loops and in-place updates of real
// parameters are never traced.
#include <Python.h>

#include <optional>

#include "capture/capture.h"
#include "capture/value.h"

namespace tl::capture {

enum class StepRoute {
  Compiled,  // torchlite's compiled step (SGD, Adam, AdamW)
  Eager,     // torch's own step, with torchlite off while it runs
};

// The route of a traced call of `fn` when it is an optimizer's step: `opt.step` bound from a
// torch.optim class, a bound step of one (`func.__get__(opt)`), or the wrapper an LR
// scheduler puts on the instance; nullopt for anything else. Asks torchlite._optimizer; only
// functions named `step` get that far.
std::optional<StepRoute> optimizer_step_route(const ValuePtr& fn);

// What CPython calls at the break instead of the step value `fn` on the stack
// (optimizer_step_route(fn) is set): built by `build` (the residual of a value).
template <class Build>
ResumeValue optimizer_step_call(const ValuePtr& fn, Build&& build);

// ---- details

// (self, func) of a step value: self null for a function or bound method read as a constant.
std::pair<PyObject*, PyObject*> optimizer_step_parts(const ValuePtr& fn);
// torchlite._optimizer's callable for `func` (bound to `self`, or null) on `route`: the router
// into the compiled step, or func made a torchlite.disable'd function. New reference.
PyRef optimizer_step_callable(PyObject* self, PyObject* func, StepRoute route);

template <class Build>
ResumeValue optimizer_step_call(const ValuePtr& fn, Build&& build) {
  auto [self, func] = optimizer_step_parts(fn);
  StepRoute route = *optimizer_step_route(fn);
  ResumeValue out;
  if (fn->kind == VKind::Method) {  // func bound to the optimizer: bound to it again
    out.value = build(fn->self);
    out.func = optimizer_step_callable(self, func, route);
  } else if (route == StepRoute::Compiled) {  // the router bound to the wrapper / bound step
    out.value = build(fn);
    out.func = optimizer_step_callable(nullptr, fn->obj.get(), route);
  } else {  // the wrapper or bound step itself, called with torchlite off
    out.value.kind = ir::Residual::Kind::Const;
    out.value.value = optimizer_step_callable(nullptr, fn->obj.get(), route);
  }
  return out;
}

}  // namespace tl::capture
