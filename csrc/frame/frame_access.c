// The only translation unit that includes CPython's internal headers: the
// frame struct lives in pycore_frame.h, and pycore_pystate.h only compiles as
// C (C11 atomics). See docs in frame_access.h and reference/frame-layer.md §1-2.
#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error \
    "torchlite's frame layer supports CPython 3.11 to 3.13 only (docs/internals/python-versions.md)"
#endif
#ifdef Py_GIL_DISABLED
// NOTE: the hook, the code cache and the tracer all rely on the GIL.
#error "torchlite does not support the free-threaded build (3.13t)"
#endif

#define Py_BUILD_CORE 1
#if PY_VERSION_HEX >= 0x030C0000
// NOTE: objimpl.h defines _PyGC_FINALIZED as a macro that pycore_gc.h redefines
// as a function (cpython#105268).
#undef _PyGC_FINALIZED
#endif
// NOTE: internal headers kept in the order this file was tested with (sorting reorders them).
// clang-format off
#include <internal/pycore_pystate.h>
#include <internal/pycore_frame.h>
#if PY_VERSION_HEX >= 0x030D0000
#include <internal/pycore_traceback.h>  // 3.13 moved _PyTraceback_Add here
#endif
// clang-format on

#include "frame/frame_access.h"

// 3.12 and later: the evaluator clears and pops the frame it is given.
#define TL_PY312 (PY_VERSION_HEX >= 0x030C0000)
// 3.13: the code object sits in f_executable, the position in instr_ptr.
#define TL_PY313 (PY_VERSION_HEX >= 0x030D0000)

static PyCodeObject* frame_code(TlFrame* frame) {
#if TL_PY313
  return _PyFrame_GetCode(frame);
#else
  return frame->f_code;
#endif
}

// Written with the GIL held, when the hook is installed.
static _PyFrameEvalFunction g_previous_eval = NULL;

// The frame this thread is handing to another PEP 523 evaluator (torch.compile's), while that
// evaluator has not yet started it. NOTE: two hooks that each installed over the other (ours
// inside a torch.compile region, Dynamo's inside our compiled call) each record the other as
// the evaluator to chain to; a frame that neither takes is then handed back and forth forever
// through tail calls, a hang with no stack growth (torch.cond, whose eager path runs Dynamo,
// did so after a mix of both compilers in one process). Seeing the frame it just handed on
// come back, the hook runs it with CPython's own evaluator: each hook has seen it once.
static _Thread_local TlFrame* t_handed_on = NULL;

void tl_frame_read(TlFrame* frame, TlFrameInfo* out) {
  PyCodeObject* code = frame_code(frame);
#if TL_PY312
  PyObject* func = frame->f_funcobj;
#else
  PyObject* func = (PyObject*)frame->f_func;
#endif
  out->code = code;
  out->func = func;
  out->localsplus = frame->localsplus;
  out->nlocalsplus = code->co_nlocalsplus;
  out->globals = frame->f_globals;
  out->builtins = frame->f_builtins;
  out->closure = (func && PyFunction_Check(func)) ? ((PyFunctionObject*)func)->func_closure : NULL;
}

int tl_frame_started(TlFrame* frame) {
#if TL_PY313
  // NOTE: 3.13 starts a frame with instr_ptr at the first code unit (3.12
  // starts prev_instr one before it, LASTI -1).
  return frame->instr_ptr > _PyCode_CODE(_PyFrame_GetCode(frame));
#else
  return _PyInterpreterFrame_LASTI(frame) >= 0;
#endif
}

int tl_frame_has_frame_object(TlFrame* frame) { return frame->frame_obj != NULL; }

int tl_tstate_tracing(PyThreadState* tstate) {
  return tstate->tracing > 0 || tstate->c_tracefunc != NULL;
}

void tl_install_eval_hook(_PyFrameEvalFunction hook) {
  PyInterpreterState* interp = PyInterpreterState_Get();
  _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
  if (current == hook) return;
  g_previous_eval = current;
  _PyInterpreterState_SetEvalFrameFunc(interp, hook);
}

void tl_uninstall_eval_hook(_PyFrameEvalFunction hook) {
  PyInterpreterState* interp = PyInterpreterState_Get();
  // NOTE: someone who installed a hook after ours keeps it.
  if (_PyInterpreterState_GetEvalFrameFunc(interp) != hook) return;
  _PyInterpreterState_SetEvalFrameFunc(
      interp, g_previous_eval ? g_previous_eval : _PyEval_EvalFrameDefault);
}

static _PyFrameEvalFunction g_test_chain_previous = NULL;

static PyObject* test_chaining_eval(PyThreadState* tstate, TlFrame* frame, int throwflag) {
  _PyFrameEvalFunction prev = g_test_chain_previous;
  return (prev ? prev : _PyEval_EvalFrameDefault)(tstate, frame, throwflag);
}

void tl_test_chaining_evaluator(int on) {
  PyInterpreterState* interp = PyInterpreterState_Get();
  _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
  if (on) {
    if (current == test_chaining_eval) return;
    g_test_chain_previous = current;
    _PyInterpreterState_SetEvalFrameFunc(interp, test_chaining_eval);
  } else if (current != g_test_chain_previous) {
    _PyInterpreterState_SetEvalFrameFunc(
        interp, g_test_chain_previous ? g_test_chain_previous : _PyEval_EvalFrameDefault);
    g_test_chain_previous = NULL;
  }
}

int tl_eval_hook_installed(_PyFrameEvalFunction hook) {
  return _PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) == hook;
}

#if TL_PY312
// ceval.c's PY_EVAL_C_STACK_UNITS (not in any header; 2 in 3.12 and 3.13): what each entry into
// _PyEval_EvalFrameDefault takes from c_recursion_remaining.
#define TL_EVAL_C_STACK_UNITS 2
#endif

// Hands the frame to the foreign evaluator `prev`, remembering it (t_handed_on). Not a tail
// call, so the mark is cleared when `prev` returns; only frames run while another PEP 523 user
// is installed take this path.
static PyObject* eval_foreign(_PyFrameEvalFunction prev, PyThreadState* tstate, TlFrame* frame,
                              int throwflag) {
  TlFrame* outer = t_handed_on;
  t_handed_on = frame;
  PyObject* result = prev(tstate, frame, throwflag);
  t_handed_on = outer;
  return result;
}

PyObject* tl_eval_default(PyThreadState* tstate, TlFrame* frame, int throwflag) {
  _PyFrameEvalFunction prev = g_previous_eval;
  if (prev == NULL || frame == t_handed_on) prev = _PyEval_EvalFrameDefault;
#if TL_PY312
  // Without a hook CPython runs a Python-to-Python call inside the caller's
  // evaluator, at no C-recursion cost; under one, each call enters the
  // evaluator anew and pays TL_EVAL_C_STACK_UNITS, so recursion would stop
  // near C_RECURSION_LIMIT / 2 (747 on 3.12.1) whatever sys.setrecursionlimit
  // says. Giving the units back for the frame's duration leaves the Python
  // limit in charge, as in eager; the hook keeps the C stack itself safe
  // (c_stack.h). Frames C code calls get the refund too, so pure C recursion
  // below them may go a little deeper than eager's, never past the budget a
  // thread starts with.
  tstate->c_recursion_remaining += TL_EVAL_C_STACK_UNITS;
  PyObject* result = prev == _PyEval_EvalFrameDefault
                         ? prev(tstate, frame, throwflag)
                         : eval_foreign(prev, tstate, frame, throwflag);
  tstate->c_recursion_remaining -= TL_EVAL_C_STACK_UNITS;
  return result;
#else
  // NOTE: a tail call: the hook's pass-through adds no C frame of its own.
  if (prev == _PyEval_EvalFrameDefault) return prev(tstate, frame, throwflag);
  return eval_foreign(prev, tstate, frame, throwflag);
#endif
}

#if TL_PY312
static int frame_opens_chunk(PyThreadState* tstate, TlFrame* frame) {
  _PyStackChunk* chunk = tstate->datastack_chunk;
  return chunk == NULL || (PyObject**)frame == &chunk->data[0];
}
#endif

int tl_frame_can_skip_eval(PyThreadState* tstate, TlFrame* frame) {
#if TL_PY312
  return frame->owner == FRAME_OWNED_BY_THREAD && frame->frame_obj == NULL &&
         !frame_opens_chunk(tstate, frame);
#else
  return 1;
#endif
}

int tl_frame_release_unevaluated(PyThreadState* tstate, TlFrame* frame) {
#if TL_PY312
  // Re-implements ceval.c's clear_thread_frame for a frame that never ran:
  // _PyFrame_ClearExceptCode + Py_DECREF(f_code) + _PyThreadState_PopFrame,
  // none of which libpython exports.
  PyCodeObject* code = frame_code(frame);
  PyObject** base = (PyObject**)frame;
  if (frame->owner != FRAME_OWNED_BY_THREAD || frame->frame_obj != NULL ||
      frame_opens_chunk(tstate, frame) || base + code->co_framesize != tstate->datastack_top ||
      frame->stacktop < 0) {
    return -1;
  }
  // NOTE: like clear_thread_frame, keep a unit of C recursion in hand while
  // finalizers run.
  tstate->c_recursion_remaining--;
  for (int i = 0; i < frame->stacktop; i++) {
    Py_XDECREF(frame->localsplus[i]);
  }
  Py_XDECREF(frame->f_locals);
  Py_DECREF(frame->f_funcobj);
  Py_DECREF(code);
  tstate->c_recursion_remaining++;
  // Finalizers run above may have pushed and popped frames; the top is back
  // at our frame's end.
  tstate->datastack_top = base;
  return 0;
#else
  return 0;
#endif
}

int tl_c_recursion_limit(void) {
#if TL_PY313
  return Py_C_RECURSION_LIMIT;
#elif TL_PY312
  return C_RECURSION_LIMIT;
#else
  return 0;
#endif
}

void tl_traceback_add(const char* funcname, const char* filename, int lineno) {
  _PyTraceback_Add(funcname, filename, lineno);
}

Py_ssize_t tl_datastack_top(PyThreadState* tstate) { return (Py_ssize_t)tstate->datastack_top; }
