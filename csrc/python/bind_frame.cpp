// torchlite._C frame layer: configs, CompiledFunction/DisabledFunction (plain
// CPython types from frame/callables.h, so calls stay vectorcalls), reset and
// test hooks.
#include "capture/meta_cache.h"
#include "frame/c_stack.h"
#include "frame/callables.h"
#include "frame/code_cache.h"
#include "frame/eval_hook.h"
#include "frame/frame_access.h"
#include "passes/conv_weights.h"
#include "python/bindings.h"
#include "runtime/buffer_pool.h"
#include "runtime/cuda/compile.h"
#include "runtime/weight_layouts.h"

namespace py = pybind11;

namespace tl::python {
namespace {

// METH_O: a plain CPython function, so graphs call it by vectorcall (no pybind11 dispatch).
PyObject* channels_last_weight(PyObject*, PyObject* w) { return runtime::channels_last_weight(w); }

PyMethodDef channels_last_weight_def = {
    "channels_last_weight", channels_last_weight, METH_O,
    "channels_last_weight(w) -> w.contiguous(memory_format=torch.channels_last), the copy kept "
    "while w is unchanged (same object, data pointer and version): the channels-last weight of "
    "a convolution (runtime/weight_layouts.h)."};

// A test entry: returns a fixed object without running the frame.
class ConstantFrame : public frame::CompiledFrame {
 public:
  explicit ConstantFrame(PyObject* value) : value_(PyRef::borrow(value)) {}
  PyObject* run(const ir::FrameView&, frame::Served*) override { return Py_NewRef(value_.get()); }

 private:
  PyRef value_;
};

// The code object behind a code object, function, method or torchlite
// wrapper; the result keeps it alive.
py::object code_of(py::handle obj) {
  PyObject* o = obj.ptr();
  if (PyObject* fn = frame::wrapped_function(o)) return code_of(fn);
  if (PyCode_Check(o)) return py::reinterpret_borrow<py::object>(o);
  if (PyMethod_Check(o)) return code_of(PyMethod_GET_FUNCTION(o));
  if (PyFunction_Check(o)) return py::reinterpret_borrow<py::object>(PyFunction_GET_CODE(o));
  py::object code = py::getattr(obj, "__code__", py::none());
  if (!PyCode_Check(code.ptr())) {
    throw py::type_error("expected a function or code object, got " +
                         py::repr(obj).cast<std::string>());
  }
  return code;
}

PyCodeObject* as_code(const py::object& code) {
  return reinterpret_cast<PyCodeObject*>(code.ptr());
}

const frame::ConfigPtr& config_arg(py::handle config) {
  const frame::ConfigPtr* c = frame::config_of(config.ptr());
  if (!c) throw py::type_error("expected a torchlite._C.Config");
  return *c;
}

}  // namespace

void bind_frame(py::module_& m) {
  if (frame::init_callable_types() < 0) throw py::error_already_set();
  m.add_object("Config", py::reinterpret_borrow<py::object>(
                             reinterpret_cast<PyObject*>(frame::config_type())));
  m.add_object("CompiledFunction", py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(
                                       frame::compiled_function_type())));
  m.add_object("DisabledFunction", py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(
                                       frame::disabled_function_type())));

  m.def(
      "make_config",
      [](py::object backend, const std::string& backend_name, bool fullgraph, int cache_size_limit,
         py::object recorder, py::object settings, const std::string& mode, py::object dynamic) {
        int dyn = dynamic.is_none() ? -1 : (py::cast<bool>(dynamic) ? 1 : 0);
        PyObject* c = frame::new_config(backend.ptr(), backend_name, fullgraph, cache_size_limit,
                                        recorder.ptr(), settings_from_dict(settings), mode, dyn);
        if (!c) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(c);
      },
      py::arg("backend"), py::arg("backend_name"), py::arg("fullgraph"),
      py::arg("cache_size_limit"), py::arg("recorder"), py::arg("settings") = py::none(),
      py::arg("mode") = "default", py::arg("dynamic") = py::none(),
      "The options of one torchlite.compile() call; backend None is the builtin runner.\n"
      "settings: {name: value} over the process settings (None: those alone).\n"
      "dynamic: None (automatic), True or False (docs/internals/dynamic-shapes.md).");
  m.def(
      "reset",
      [] {
        frame::reset_caches();
        capture::clear_meta_cache();
        runtime::release_idle_blocks();
        runtime::cuda::unload_dead_modules();
        runtime::forget_weight_layouts();
      },
      "Drops every cache entry and skip decision (lazily, on the next call of each code) and "
      "forgets traced meta results, frees the CPU buffer pool's idle blocks, unloads CUDA "
      "modules no compiled graph uses and drops the channels-last weight copies.");
  py::object module_name = m.attr("__name__");
  PyObject* fn = PyCFunction_NewEx(&channels_last_weight_def, nullptr, module_name.ptr());
  if (!fn) throw py::error_already_set();
  m.add_object("channels_last_weight", py::reinterpret_steal<py::object>(fn));
  passes::set_channels_last_weight(PyRef::borrow(fn));
  m.def("weight_layouts_cached", &runtime::weight_layouts_cached,
        "Channels-last weight copies held now (runtime/weight_layouts.h).");
  m.def("meta_cache_hits", &capture::meta_cache_hits,
        "Meta-tensor op results reused while tracing, since the process started.");
  m.def(
      "cpu_pool_stats",
      [] {
        runtime::PoolStats s = runtime::pool_stats();
        py::dict d;
        d["idle_bytes"] = s.idle_bytes;
        d["live_bytes"] = s.live_bytes;
        d["reused"] = s.reused;
        d["fresh"] = s.fresh;
        d["trimmed"] = s.trimmed;
        d["refused"] = s.refused;
        return d;
      },
      "The CPU buffer pool (large kernel outputs): bytes idle and in tensors, how many "
      "allocations reused an idle block or mapped a new one, idle blocks freed (by age, memory "
      "pressure or a failed allocation) and blocks freed on return instead of kept.");
  m.def("trim_cpu_pool", &runtime::trim_idle_blocks, py::arg("older_than_seconds"),
        "Frees the CPU buffer pool's blocks idle for at least this long; returns the bytes freed "
        "(a background thread does this for blocks idle 10 s).");
  m.def("set_cpu_pool_trim_seconds", &runtime::set_idle_trim_seconds, py::arg("seconds"),
        "Tests only: the age at which the trimmer thread frees idle CPU pool blocks.");
  m.def("memory_headroom", &runtime::memory_headroom,
        "Bytes the process may still allocate (available memory, cgroup and address-space "
        "limits): the CPU buffer pool keeps no more idle memory than this.");
  m.def(
      "cache_entry_count",
      [](py::object obj) { return frame::cache_entry_count(as_code(code_of(obj))); },
      py::arg("code_or_function"));
  m.def("is_hook_installed", &frame::hook_installed);

  // Test support.
  m.def(
      "_test_insert_constant_entry",
      [](py::object fn, py::object config, py::object value) {
        py::object code = code_of(fn);
        frame::ExtraState* st = frame::get_extra(as_code(code));
        auto e = std::make_shared<frame::CacheEntry>();
        e->compiled = std::make_shared<ConstantFrame>(value.ptr());
        e->config = config_arg(config);
        frame::insert_entry(*st, std::move(e));
      },
      py::arg("fn"), py::arg("config"), py::arg("value"),
      "Caches an entry with no guards that returns `value` without running fn's body.");
  m.def(
      "_test_set_tensor_types",
      [](py::tuple types) { frame::set_tensor_types_for_testing(types.ptr()); }, py::arg("types"),
      "Instances of these types count as tensors; () restores torch's.");
  m.def("_test_use_stub_compiler", &frame::use_stub_compiler_for_testing, py::arg("mode"),
        "1: on a miss, cache a graph break guarded by argument types instead of capturing; "
        "2: every capture raises ValueError; 0: capture normally.");
  m.def("_test_datastack_top", [] { return tl_datastack_top(PyThreadState_Get()); });
  m.def("_test_chaining_evaluator", &tl_test_chaining_evaluator, py::arg("on"),
        "Installs (1) or removes (0) a second frame evaluator that, as torch.compile's, hands "
        "every frame to the evaluator it replaced.");
  m.def("_test_c_recursion_limit", &tl_c_recursion_limit);
  m.def(
      "_test_c_stack_address",
      [] {
        // NOTE: a C function's frame address; differences between calls at
        // two Python depths give the C stack each Python frame uses.
        return reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
      },
      "The C stack position of this call (an integer).");
  m.def("_test_c_stack_switches", &frame::c_stack_switches,
        "Fresh C stack segments the hook moved this thread to, since it started.");
}

}  // namespace tl::python
