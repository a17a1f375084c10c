// The frame hook: decides per frame whether to run it as is, run a cached
// compiled entry, or capture it. Decision path and ownership rules are in
// reference/frame-layer.md §1-3.
//
// The hook is installed for the whole interpreter while any thread is in a
// compiled region, so it also sees every frame of threads that never called
// torchlite. Those, and frames that need nothing, leave through a tail call to
// the evaluator: the hook adds no C frame of its own to a recursion. Every
// frame first checks the C stack left and moves to a fresh segment when it
// runs low (c_stack.h), so a deep recursion returns as in eager instead of
// overflowing the thread's stack; 3.12's C-recursion charge of each call is
// refunded in tl_eval_default.
#include "frame/eval_hook.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "capture/context.h"
#include "core/counters.h"
#include "core/errors.h"
#include "core/log.h"
#include "frame/c_stack.h"
#include "frame/code_cache.h"
#include "frame/compile_frame.h"
#include "frame/dynamic_policy.h"
#include "frame/entry_reaper.h"
#include "frame/frame_access.h"

namespace tl::frame {
namespace {

constexpr std::uintptr_t kFloorUnknown = UINTPTR_MAX;

// NOTE: trivially constructible and destructible, so reading it is one TLS
// address lookup, with no guard or wrapper call, on every Python call.
struct ThreadState {
  const ConfigPtr* active = nullptr;
  // Below this address the stack has less than stack_reserve() left;
  // kFloorUnknown until the thread's first frame through the hook.
  std::uintptr_t stack_floor = kFloorUnknown;
};
thread_local ThreadState t_state;

int g_calls_inside = 0;  // compiled calls in progress, all threads (GIL)

// Types whose instances make a frame worth capturing. Resolved from torch
// once torch is imported; before that no tensor can exist.
// NOTE: never destroyed: a static destructor would decref after Py_Finalize.
std::vector<PyRef>& g_tensor_types = *new std::vector<PyRef>();
bool g_tensor_types_fixed = false;  // resolved, or set for testing

// Directory prefixes of code never intercepted: torch's and torchlite's, and the standard
// library's (without site-packages below it, which is user code).
std::vector<std::string> g_skip_prefixes;
bool g_skip_prefixes_final = false;  // torch was found

int g_stub_compiler = 0;  // test support, see use_stub_compiler_for_testing

constexpr int kGeneratorFlags = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR;

// Returns a new reference to sys.modules[name] or nullptr; never imports.
PyRef loaded_module(const char* name) {
  PyRef key = PyRef::steal(PyUnicode_InternFromString(name));
  PyRef mod = PyRef::steal(key ? PyImport_GetModule(key.get()) : nullptr);
  if (!mod) PyErr_Clear();
  return mod;
}

// Returns a new reference to obj.a.b... or nullptr (error cleared).
PyRef get_attr_path(PyRef obj, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (!obj) break;
    obj = PyRef::steal(PyObject_GetAttrString(obj.get(), n));
  }
  if (!obj) PyErr_Clear();
  return obj;
}

void resolve_tensor_types() {
  if (g_tensor_types_fixed) return;
  PyRef torch = loaded_module("torch");
  if (!torch) return;
  PyRef tensor = get_attr_path(torch, {"Tensor"});
  PyRef module = get_attr_path(torch, {"nn", "Module"});
  if (!tensor || !module) return;  // torch is still importing
  g_tensor_types = {tensor, module};
  g_tensor_types_fixed = true;
}

bool is_tensor_like(PyObject* v) {
  for (const PyRef& t : g_tensor_types) {
    if (PyObject_TypeCheck(v, reinterpret_cast<PyTypeObject*>(t.get()))) return true;
  }
  return false;
}

// Top-level arguments, and one level into list/tuple/dict arguments. Runs no
// Python code.
bool holds_tensor(PyObject* v) {
  if (is_tensor_like(v)) return true;
  if (PyTuple_Check(v) || PyList_Check(v)) {
    PyObject** items = PySequence_Fast_ITEMS(v);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
    for (Py_ssize_t i = 0; i < n; i++) {
      if (is_tensor_like(items[i])) return true;
    }
  } else if (PyDict_Check(v)) {
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(v, &pos, &key, &value)) {
      if (is_tensor_like(value)) return true;
    }
  }
  return false;
}

bool has_tensor_args(const TlFrameInfo& fi) {
  resolve_tensor_types();
  if (g_tensor_types.empty()) return false;
  const PyCodeObject* code = fi.code;
  int nargs = code->co_argcount + code->co_kwonlyargcount +
              ((code->co_flags & CO_VARARGS) ? 1 : 0) + ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
  nargs = std::min(nargs, fi.nlocalsplus);
  for (int i = 0; i < nargs; i++) {
    PyObject* v = fi.localsplus[i];
    if (v && holds_tensor(v)) return true;
  }
  return false;
}

// Adds `name`'s package directory (with a trailing slash) to the prefixes.
// NOTE: "os" gives the standard library's root.
bool add_package_prefix(const char* name) {
  PyRef file = get_attr_path(loaded_module(name), {"__file__"});
  const char* path = file && PyUnicode_Check(file.get()) ? PyUnicode_AsUTF8(file.get()) : nullptr;
  if (!path) {
    PyErr_Clear();
    return false;
  }
  std::string s(path);
  size_t slash = s.rfind('/');
  if (slash == std::string::npos) return false;
  g_skip_prefixes.push_back(s.substr(0, slash + 1));
  return true;
}

bool is_internal_code(PyCodeObject* code) {
  if (!g_skip_prefixes_final) {
    g_skip_prefixes.clear();
    add_package_prefix("torchlite");
    add_package_prefix("os");
    g_skip_prefixes_final = add_package_prefix("torch");
  }
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  if (!file) throw PythonError();
  // NOTE: forward() of torch's own layers (nn.TransformerEncoderLayer, ...) is model
  // code a user compiles; module.py (Module.__call__ and its hook machinery) is not.
  std::string_view f(file);
  if (f.find("/torch/nn/modules/") != std::string_view::npos && !f.ends_with("/module.py"))
    return false;
  // NOTE: a standard-library frame (contextlib, weakref, inspect, typing...) reached from
  // eager code (DDP's and FSDP's hooks, a graph break) is plumbing, not model code: it runs
  // as is, as with Dynamo's skip list; called from a traced frame it is still inlined.
  // Installed packages live below the standard library's folder and are user code.
  if (f.find("/site-packages/") != std::string_view::npos ||
      f.find("/dist-packages/") != std::string_view::npos) {
    return std::any_of(g_skip_prefixes.begin(), g_skip_prefixes.end(), [&](const std::string& p) {
      return f.starts_with(p) && p.find("-packages/") != std::string::npos;
    });
  }
  return std::any_of(g_skip_prefixes.begin(), g_skip_prefixes.end(),
                     [&](const std::string& p) { return std::string_view(file).starts_with(p); });
}

std::string utf8(PyObject* s) {
  const char* c = s ? PyUnicode_AsUTF8(s) : nullptr;
  if (!c) PyErr_Clear();
  return c ? c : "?";
}

std::string basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void warn_cache_limit(PyCodeObject* code, int limit, const std::string& reason) {
  std::string msg = "torchlite: " + utf8(code->co_name) + " (" + basename(utf8(code->co_filename)) +
                    ":" + std::to_string(code->co_firstlineno) + ") hit cache_size_limit (" +
                    std::to_string(limit) + "); last guard failure: " + reason +
                    "; running eagerly from now on. Raise torchlite.config.cache_size_limit or "
                    "mark the input dynamic.";
  if (PyErr_WarnEx(PyExc_RuntimeWarning, msg.c_str(), 1) < 0) throw PythonError();
}

constexpr int kLoopBodyLimit = 64;

// True for a generated loop body or resume function (bytecode/ names them
// "f (loop body at line N)", "f (resumed at line N)"; a user's qualname
// cannot hold a parenthesis).
bool is_generated(PyCodeObject* code) {
  return utf8(code->co_qualname).find(" (") != std::string::npos;
}

// Test support: a graph-break entry guarded by the type of each argument.
CacheEntry stub_compile(const TlFrameInfo& fi, const ConfigPtr& config) {
  if (g_stub_compiler == 2) TL_THROW(Value) << "stub compiler failed on " << utf8(fi.code->co_name);
  CacheEntry e;
  const PyCodeObject* code = fi.code;
  int nargs = std::min(code->co_argcount + code->co_kwonlyargcount, fi.nlocalsplus);
  for (int i = 0; i < nargs; i++) {
    PyObject* v = fi.localsplus[i];
    if (!v) continue;
    std::string name = utf8(PyTuple_GetItem(code->co_localsplusnames, i));
    e.guards.add_type_match(ir::Source::local(i, name), reinterpret_cast<PyObject*>(Py_TYPE(v)));
  }
  e.config = config;
  return e;
}

// The entry to run for this frame, or nullptr to run it eagerly (cache size
// limit). Captures on a miss. Throws PythonError/Error.
// `served`: what the entry's serves() kept for the run that follows (null: not kept).
std::shared_ptr<CacheEntry> lookup_or_compile(ExtraState& st, const TlFrameInfo& fi,
                                              const ir::FrameView& view, const ConfigPtr& config,
                                              bool* captured = nullptr, Served* served = nullptr) {
  auto chain = st.chains.find(config->id);  // compile_frame.cpp, choose_eager
  if (chain != st.chains.end() && !chain->second.eager_reason.empty()) return nullptr;
  std::string reason;
  if (drop_dead_entries(st)) reason = "an object its entry matched by identity was freed";
  // NOTE: index loop over copies: a guard may run Python code that lets
  // another thread change the list.
  for (size_t i = 0; i < st.entries.size(); i++) {
    std::shared_ptr<CacheEntry> e = st.entries[i];
    if (e->config->id != config->id) continue;
    if (e->guards.check(view, true, served ? &served->inputs : nullptr) &&
        (!e->compiled || e->compiled->serves(view, served))) {
      counters().cache_hits++;
      move_to_front(st, e.get());
      return e;
    }
    if (served) *served = Served();  // NOTE: what this entry's guards read is not the next's
    if (reason.empty()) reason = e->guards.failure_reason();
    for (std::string& changed : e->guards.changed_numbers(view)) {
      if (st.dynamic_numbers.insert(changed).second && log_enabled("recompiles"))
        log_event("recompiles", utf8(fi.code->co_name) + ": " + changed +
                                    " changed between calls: taken per call from now on");
    }
  }
  int n = count_entries(st, config->id);
  // NOTE: the limit counts entries for this frame's ID-matched objects only
  // (one module class's forward, shared by many layer instances, gets an entry
  // per instance); kMaxEntriesPerCode bounds the total.
  constexpr int kMaxEntriesPerCode = 256;
  int limit = config->cache_size_limit;
  if (n >= limit && is_generated(fi.code)) {
    // A loop body, and the resume functions after breaks inside it, are
    // specialised on the loop variable: `for i in range(n)` gets one version
    // per i. Up to 64 iterations compile (each version is a small capture;
    // identical kernels are shared) before the rest run eagerly.
    limit = std::max(limit, kLoopBodyLimit);
  }
  bool over = count_entries_for_objects(st, config->id, view) >= limit || n >= kMaxEntriesPerCode;
  if (over && config->dynamic != 0 && evict_for_new_size(st, config->id, reason)) {
    over = false;
    n--;
    if (log_enabled("recompiles"))
      log_event("recompiles", utf8(fi.code->co_name) +
                                  ": at the cache size limit, the least recently used size's entry "
                                  "makes room (its kernels take runtime sizes)");
  }
  if (over) {
    counters().eager_fallbacks++;
    if (!st.warned_limit) {
      st.warned_limit = true;
      warn_cache_limit(fi.code, limit, reason);
    }
    return nullptr;
  }
  if (n > 0) {
    counters().recompiles++;
    if (log_enabled("recompiles")) {
      log_event("recompiles", utf8(fi.code->co_name) + " " + utf8(fi.code->co_filename) + ":" +
                                  std::to_string(fi.code->co_firstlineno) + ": " + reason);
    }
  }
  st.miss_on_size = reason.find("size mismatch") != std::string::npos ||
                    reason.find("rank mismatch") != std::string::npos;
  std::shared_ptr<CacheEntry> e;
  // NOTE: Python's cyclic collector runs during capture and compile as during any other code.
  // Paused, it lost the young collections this work's objects would start, and with them the
  // full collections they count towards: reference cycles made before the first call (an
  // FSDP2 model dropped before the next one's first step, with its parameters and gradients)
  // outlived that step (bench/distributed.py on 2 H100s: 19.5 GB more at its peak).
  e = std::make_shared<CacheEntry>(g_stub_compiler ? stub_compile(fi, config) : [&] {
    capture::DynamicNumbersScope numbers(st.dynamic_numbers);
    return compile_frame(fi.code, fi.func, view, config, st.fresh_objects);
  }());
  if (!e->config) e->config = config;
  watch_guarded_objects(fi.code, *e, view);
  insert_entry(st, e);
  if (captured) *captured = true;
  return e;
}

// After the first run of an entry captured in this call: when the run itself
// invalidated the entry's guards (a cache dict filled on the first call, an
// attribute set for the first time), captures again now, from the state the
// next call will see, so that an identical second call hits the cache. Errors
// are left for that call to raise.
void capture_for_next_call(PyCodeObject* code, const ir::FrameView& view,
                           const std::shared_ptr<CacheEntry>& entry, const TlFrameInfo& fi,
                           const ConfigPtr& config) {
  ActiveConfigScope none(nullptr);
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  try {
    ExtraState* st = find_extra(code);
    if (st && !entry->guards.check(view, false) && entry->guards.failed_in_kept_object()) {
      if (log_enabled("recompiles"))
        log_event("recompiles", utf8(code->co_name) +
                                    ": the first run changed what its guards "
                                    "check; capturing again for the next call");
      lookup_or_compile(*st, fi, view, config);
    }
  } catch (const std::exception&) {
    PyErr_Clear();
  }
  PyErr_Restore(t, v, tb);
}

// Releases a frame the hook did not evaluate and returns `result` (stolen),
// or nullptr with InternalError set if the frame could not be released.
PyObject* finish_unevaluated(PyThreadState* ts, TlFrame* frame, PyObject* result) {
  if (tl_frame_release_unevaluated(ts, frame) == 0) return result;
  Py_XDECREF(result);
  try {
    TL_CHECK(false) << "could not release a frame the hook did not evaluate";
  } catch (const Error& e) {
    set_python_error(e);
  }
  return nullptr;
}

// What intercept() decided: run the frame as is (run_as_is), or return
// `result` (a new reference, or nullptr with an exception set) having
// released the frame unevaluated.
struct Interception {
  bool run_as_is;
  PyObject* result;
};

[[gnu::noinline]] Interception intercept(PyThreadState* ts, TlFrame* frame, const TlFrameInfo& fi,
                                         const ConfigPtr* config) {
  ir::FrameView view{fi.localsplus, fi.nlocalsplus, fi.closure, fi.globals, fi.builtins};
  std::shared_ptr<CacheEntry> entry;
  bool captured = false;
  Served served;  // what the entry's serves() read, for its run
  {
    // Nothing that guards, capture or warnings run is intercepted.
    ActiveConfigScope none(nullptr);
    try {
      ExtraState* st = get_extra(fi.code);
      if (!st->skip_known) {
        st->skip = is_internal_code(fi.code);
        st->skip_known = true;
      }
      if (!st->skip) entry = lookup_or_compile(*st, fi, view, *config, &captured, &served);
    } catch (const std::exception& e) {
      set_python_error(e);
      return {false, finish_unevaluated(ts, frame, nullptr)};
    }
  }
  // A graph break (or no entry) runs the frame as is, still intercepting the
  // frames it calls.
  if (!entry || !entry->compiled) return {true, nullptr};
  std::shared_ptr<CompiledFrame> compiled = entry->compiled;
  PyObject* result = nullptr;
  {
    ActiveConfigScope none(nullptr);
    try {
      result = compiled->run(view, &served);
    } catch (const std::exception& e) {
      set_python_error(e);
    }
  }
  // Nothing visible happened (CompiledFrame::run): the frame runs as is.
  if (!result && !PyErr_Occurred()) return {true, nullptr};
  if (captured && result) capture_for_next_call(fi.code, view, entry, fi, *config);
  return {false, finish_unevaluated(ts, frame, result)};
}

PyObject* eval_hook(PyThreadState* ts, TlFrame* frame, int throwflag);

// What to do with a frame of a thread inside a compiled region.
[[gnu::noinline]] Interception route(PyThreadState* ts, TlFrame* frame, int throwflag,
                                     const ConfigPtr* config) {
  // NOTE: a hook installed over ours (torch.compile's, inside our compiled call) that
  // chains to us for the frames it runs owns them, its compiler's own frames (fake
  // tensors) included: capturing them here would run kernels on tensors with no data.
  if (throwflag || !tl_eval_hook_installed(eval_hook)) return {true, nullptr};
  TlFrameInfo fi;
  tl_frame_read(frame, &fi);
  if ((fi.code->co_flags & kGeneratorFlags) || tl_frame_started(frame) || tl_tstate_tracing(ts) ||
      !tl_frame_can_skip_eval(ts, frame)) {
    return {true, nullptr};
  }
  ExtraState* st = find_extra(fi.code);
  if (st && st->skip && st->epoch == current_epoch()) return {true, nullptr};
  if (!has_tensor_args(fi)) return {true, nullptr};
  return intercept(ts, frame, fi, config);
}

// NOTE: the frame runs as is through a tail call, outside route(): GCC makes
// no tail call from a function whose locals' addresses escape (fi), and each
// frame kept would cost C stack on every Python call of a recursion.
PyObject* eval_active(PyThreadState* ts, TlFrame* frame, int throwflag, const ConfigPtr* config) {
  Interception r = route(ts, frame, throwflag, config);
  if (r.run_as_is) return tl_eval_default(ts, frame, throwflag);
  return r.result;
}

PyObject* eval_in_place(PyThreadState* ts, TlFrame* frame, int throwflag) {
  const ConfigPtr* config = t_state.active;
  if (!config) return tl_eval_default(ts, frame, throwflag);
  return eval_active(ts, frame, throwflag, config);
}

// Bytes of C stack a frame needs in hand when the hook sees it: room for the
// C code one Python frame runs before the next reaches the hook (torch's
// dispatcher, capture, LLVM) and, on 3.12, for the pure C recursion that
// c_recursion_remaining still allows (a unit is at most a few C frames).
std::size_t stack_reserve() {
  return std::max<std::size_t>(std::size_t{1} << 20, std::size_t(tl_c_recursion_limit()) * 256);
}

struct HookCall {
  PyThreadState* ts;
  TlFrame* frame;
  int throwflag;
  PyObject* result;
};

void eval_on_segment(void* p) noexcept {
  auto* c = static_cast<HookCall*>(p);
  t_state.stack_floor = c_stack_floor(stack_reserve());
  c->result = eval_in_place(c->ts, c->frame, c->throwflag);
}

bool below_floor(std::uintptr_t floor) {
  return reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)) < floor;
}

// The stack is low, or this is the thread's first frame through the hook.
[[gnu::noinline, gnu::cold]] PyObject* eval_on_fresh_stack(PyThreadState* ts, TlFrame* frame,
                                                           int throwflag) {
  ThreadState& t = t_state;
  if (t.stack_floor == kFloorUnknown) {
    t.stack_floor = c_stack_floor(stack_reserve());
    if (!below_floor(t.stack_floor)) return eval_in_place(ts, frame, throwflag);
  }
  std::uintptr_t floor = t.stack_floor;
  HookCall call{ts, frame, throwflag, nullptr};
  bool ran = run_on_fresh_stack(eval_on_segment, &call);
  t_state.stack_floor = floor;
  // NOTE: with no address space for a segment, run in place as before.
  return ran ? call.result : eval_in_place(ts, frame, throwflag);
}

// The installed _PyFrameEvalFunction. Returns a new reference or NULL.
PyObject* eval_hook(PyThreadState* ts, TlFrame* frame, int throwflag) {
  ThreadState& t = t_state;
  if (below_floor(t.stack_floor)) [[unlikely]] {
    return eval_on_fresh_stack(ts, frame, throwflag);
  }
  if (!t.active) return tl_eval_default(ts, frame, throwflag);
  return eval_active(ts, frame, throwflag, t.active);
}

}  // namespace

const ConfigPtr* active_config() { return t_state.active; }

ActiveConfigScope::ActiveConfigScope(const ConfigPtr* config) : previous_(t_state.active) {
  t_state.active = config;
}
ActiveConfigScope::~ActiveConfigScope() { t_state.active = previous_; }

void enter_compiled_region() {
  if (g_calls_inside++ == 0) tl_install_eval_hook(eval_hook);
}

void leave_compiled_region() {
  if (--g_calls_inside == 0) tl_uninstall_eval_hook(eval_hook);
}

bool hook_installed() { return tl_eval_hook_installed(eval_hook); }

void reset_caches() {
  bump_epoch();
  g_skip_prefixes_final = false;
}

void use_stub_compiler_for_testing(int mode) { g_stub_compiler = mode; }

void set_tensor_types_for_testing(PyObject* types) {
  g_tensor_types.clear();
  g_tensor_types_fixed = false;
  Py_ssize_t n = PyTuple_Size(types);
  if (n < 0) throw PythonError();
  for (Py_ssize_t i = 0; i < n; i++) {
    g_tensor_types.push_back(PyRef::borrow(PyTuple_GET_ITEM(types, i)));
  }
  if (n > 0) g_tensor_types_fixed = true;
}

}  // namespace tl::frame
