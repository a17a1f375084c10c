#pragma once
// The plain C interface to CPython's _PyInterpreterFrame. frame_access.c is the
// one file that includes CPython's internal headers (pycore_pystate.h only
// compiles as C); everything else sees a frame as an opaque pointer.
// All functions require the GIL. Pointers they return are borrowed from the
// frame and stay valid until the frame is evaluated or released.
#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

struct _PyInterpreterFrame;
typedef struct _PyInterpreterFrame TlFrame;

// Everything the hook needs from a frame that has not started yet, read in
// one call. All pointers are borrowed.
typedef struct {
  PyCodeObject* code;
  PyObject* func;               // the function object (may be NULL on odd frames)
  PyObject* const* localsplus;  // co_nlocalsplus slots; free-variable slots are NULL
  int nlocalsplus;
  PyObject* globals;
  PyObject* builtins;
  PyObject* closure;  // func.__closure__ or NULL
} TlFrameInfo;

void tl_frame_read(TlFrame* frame, TlFrameInfo* out);
// Nonzero once the frame has executed an instruction (a resumed frame).
int tl_frame_started(TlFrame* frame);
int tl_frame_has_frame_object(TlFrame* frame);
// Nonzero while a trace or profile callback runs on this thread, or a trace
// function (debugger, coverage) is set: those must see the real frames.
int tl_tstate_tracing(PyThreadState* tstate);

// Installs `hook` for the whole interpreter, remembering the evaluator it
// replaces; tl_uninstall_eval_hook puts that one back if `hook` is still
// the installed one.
void tl_install_eval_hook(_PyFrameEvalFunction hook);
void tl_uninstall_eval_hook(_PyFrameEvalFunction hook);
int tl_eval_hook_installed(_PyFrameEvalFunction hook);
// Evaluates the frame with the evaluator that was installed before ours
// (normally _PyEval_EvalFrameDefault). Returns a new reference or NULL with
// an exception set. The evaluator takes over the frame's teardown on 3.12 and 3.13.
// On 3.12 and 3.13 the frame's C-recursion charge is refunded while it runs (see the
// definition for why); on 3.11 this is a tail call.
PyObject* tl_eval_default(PyThreadState* tstate, TlFrame* frame, int throwflag);

// 3.12, 3.13: nonzero when the hook may skip evaluating the frame and release it
// itself with tl_frame_release_unevaluated. That is refused when a
// PyFrameObject exists (its data would have to be handed over) or when the
// frame opens a data-stack chunk (popping it frees the chunk through a
// non-exported allocator). 3.11: always nonzero (the caller releases).
int tl_frame_can_skip_eval(PyThreadState* tstate, TlFrame* frame);
// 3.12, 3.13: clears (decrefs locals, function, code) and pops a frame the hook did
// not evaluate; the frame must be on top of the data stack. 3.11: no-op (the
// caller, _PyEval_Vector, clears and pops). Returns 0, or -1 when the frame
// is not in a state it can release (a bug: the frame is then leaked).
int tl_frame_release_unevaluated(PyThreadState* tstate, TlFrame* frame);

// Adds a traceback entry for (funcname, filename, lineno) to the exception
// being raised, as CPython's own C code does (3.13 made the function internal).
void tl_traceback_add(const char* funcname, const char* filename, int lineno);

// The interpreter's C recursion budget (3.12 C_RECURSION_LIMIT, 3.13 Py_C_RECURSION_LIMIT; 0
// on 3.11).
int tl_c_recursion_limit(void);
// Test support: the thread's data-stack top, as an integer.
Py_ssize_t tl_datastack_top(PyThreadState* tstate);
// Test support: a second PEP 523 evaluator that behaves as torch.compile's shim does
// (on: records the installed evaluator and installs itself; every frame goes to the recorded
// one; off: puts the recorded one back unless it is installed, and forgets it).
void tl_test_chaining_evaluator(int on);

#ifdef __cplusplus
}
#endif
