#include "frame/compile_frame.h"

#include <algorithm>
#include <functional>
#include <mutex>
#include <sstream>

#include "bytecode/decode.h"
#include "bytecode/resume.h"
#include "capture/capture.h"
#include "core/counters.h"
#include "core/dump_dir.h"
#include "core/errors.h"
#include "core/log.h"
#include "frame/captured_frame.h"
#include "frame/code_cache.h"
#include "frame/dynamic_policy.h"
#include "frame/resume_frame.h"
#include "frame/size_generic.h"
#include "pipeline/compile_graph.h"

namespace tl::frame {
namespace {

std::mutex g_mu;  // guards the hooks below (set from Python, read while compiling)
GraphWrapper g_wrap_graph = nullptr;
PyObject* g_backend_bridge = nullptr;  // owned

std::string utf8(PyObject* s) {
  const char* c = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : nullptr;
  if (!c) {
    PyErr_Clear();
    return "?";
  }
  return c;
}

// Writes one folder for the capture (the pipeline adds its passes' files);
// returns it ("" when it could not be made).
std::string dump(PyCodeObject* code, const capture::CaptureResult& res, const std::string& dir) {
  std::string base = pipeline::new_trace_folder(
      dir, utf8(code->co_name) + "_line" + std::to_string(code->co_firstlineno));
  if (base.empty()) return "";
  try {
    write_dump(base + "bytecode.txt", bytecode::disassemble(bytecode::decode(code), code));
  } catch (const std::exception&) {
    PyErr_Clear();
  }
  if (!res.graph_break || res.resume) write_dump(base + "graph_0.txt", res.graph->str());
  write_dump(base + "guards.txt", res.guards.str());
  std::ostringstream timings;
  timings << "function: " << utf8(code->co_qualname) << "\nfile: " << utf8(code->co_filename) << ":"
          << code->co_firstlineno << "\ncapture_ms: " << res.capture_ms << "\n";
  if (res.graph_break)
    timings << "graph_break: " << res.graph_break->kind << " at " << res.graph_break->filename
            << ":" << res.graph_break->lineno << ": " << res.graph_break->reason << "\n";
  else
    timings << "ops: " << res.graph->num_ops() << "\n";
  write_dump(base + "capture.txt", timings.str());
  return base;
}

// `resumed`: a graph break after which the frame goes on in a resume function.
void record(PyObject* recorder, PyCodeObject* code, const capture::CaptureResult& res, bool resumed,
            const std::string& eager_frame = "") {
  PyRef d = PyRef::steal(PyDict_New());
  if (!d) throw PythonError();
  auto set = [&](const char* k, PyObject* v) {
    PyRef owned = PyRef::steal(v);
    if (!owned || PyDict_SetItemString(d.get(), k, owned.get()) < 0) throw PythonError();
  };
  set("code_name", PyUnicode_FromString(utf8(code->co_qualname).c_str()));
  set("filename", PyUnicode_FromString(utf8(code->co_filename).c_str()));
  set("firstlineno", PyLong_FromLong(code->co_firstlineno));
  set("guards", PyUnicode_FromString(res.guards.str().c_str()));
  set("capture_ms", PyFloat_FromDouble(res.capture_ms));
  set("resumed", PyBool_FromLong(resumed));
  set("no_resume", PyUnicode_FromString(res.no_resume.c_str()));
  set("eager_frame", PyUnicode_FromString(eager_frame.c_str()));
  if (res.graph_break) {
    set("break", Py_BuildValue("{s:s,s:s,s:s,s:i,s:s}", "kind", res.graph_break->kind.c_str(),
                               "reason", res.graph_break->reason.c_str(), "filename",
                               res.graph_break->filename.c_str(), "lineno", res.graph_break->lineno,
                               "hint", res.graph_break->hint.c_str()));
  } else {
    set("break", Py_NewRef(Py_None));
  }
  if (res.graph_break && !(resumed && res.graph->num_ops() > 0)) {
    set("graph", Py_NewRef(Py_None));
    set("ops", PyLong_FromLong(0));
  } else {
    GraphWrapper wrap;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      wrap = g_wrap_graph;
    }
    set("graph", wrap ? wrap(res.graph) : Py_NewRef(Py_None));
    set("ops", PyLong_FromSize_t(res.graph->num_ops()));
  }
  if (PyList_Append(recorder, d.get()) < 0) throw PythonError();
}

// Adds `key: text` to the explain record just made (the pipeline's CUDA graph
// decision, how the graph trains).
void add_to_record(PyObject* recorder, const char* key, const std::string& text) {
  Py_ssize_t n = PyList_Size(recorder);
  if (n <= 0 || !PyDict_Check(PyList_GET_ITEM(recorder, n - 1))) return;
  PyRef value = PyRef::steal(PyUnicode_FromString(text.c_str()));
  if (!value || PyDict_SetItemString(PyList_GET_ITEM(recorder, n - 1), key, value.get()) < 0)
    throw PythonError();
}

PyRef compile_with_backend(const capture::CaptureResult& res, const CompileConfig& config) {
  PyRef bridge;
  GraphWrapper wrap;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    bridge = PyRef::borrow(g_backend_bridge);
    wrap = g_wrap_graph;
  }
  TL_CHECK(bridge && wrap) << "torchlite's Python package did not register its backend bridge";
  PyRef graph = PyRef::steal(wrap(res.graph));
  if (!graph) throw PythonError();
  PyRef inputs = PyRef::steal(PyList_New(res.example_inputs.size()));
  for (size_t i = 0; i < res.example_inputs.size(); ++i)
    PyList_SET_ITEM(inputs.get(), i, PyRef(res.example_inputs[i]).release());
  PyRef fn = PyRef::steal(PyObject_CallFunctionObjArgs(
      bridge.get(), graph.get(), config.backend.get(), inputs.get(), nullptr));
  if (!fn) throw PythonError();
  if (!PyCallable_Check(fn.get()))
    TL_THROW(Type) << "backend '" << config.backend_name << "' returned a non-callable "
                   << Py_TYPE(fn.get())->tp_name;
  return fn;
}

// NOTE: a frame that breaks again and again with a few ops between the breaks
// (an RNN cell stepped in a Python loop, a break in every iteration) runs each
// tiny graph through a compiled entry, a bridge and a resume function: slower
// than eager. Past kEagerAfterBreaks breaks in one frame (its resume functions
// and loop bodies included) with at most kTinyGraphOps ops per graph on
// average, the frame runs eagerly; the frames it calls are still compiled.
constexpr int kEagerAfterBreaks = 8;
constexpr double kTinyGraphOps = 3.0;

// Adds this capture of `code` to its root frame's tally and returns the reason
// the root now runs eagerly, or "" while it does not.
std::string choose_eager(PyCodeObject* code, const capture::CaptureResult& res,
                         const bytecode::BridgeCode* codes, bool has_ops, int config_id) {
  ExtraState* st = get_extra(code);
  PyCodeObject* root_code = st->root ? st->root : code;
  ExtraState::Chain& chain = get_extra(root_code)->chains[config_id];
  if (codes)
    for (const PyRef& r : codes->resumes)
      get_extra(reinterpret_cast<PyCodeObject*>(r.get()))->root = root_code;
  if (res.graph_break && codes) chain.breaks++;
  if (has_ops) {
    chain.graphs++;
    chain.ops += res.graph->num_ops();
  }
  if (!chain.eager_reason.empty() || chain.breaks < kEagerAfterBreaks) return "";
  if (static_cast<double>(chain.ops) / std::max(1, chain.graphs) > kTinyGraphOps) return "";
  chain.eager_reason = std::to_string(chain.breaks) + " graph breaks with " +
                       std::to_string(chain.ops) + " ops in " + std::to_string(chain.graphs) +
                       " graphs between them: the frame runs eagerly from its next call";
  if (log_enabled("graph_breaks"))
    log_event("graph_breaks", utf8(root_code->co_qualname) + ": " + chain.eager_reason);
  return chain.eager_reason;
}

// An entry that runs no graph op whose outcome could depend on a size (the frame runs
// eagerly, or its trace ran no op and read no size) serves every size of its inputs once the
// policy makes the frame dynamic: nothing in it was decided from a size, so a new size costs
// no capture. NOTE: an eager entry's decision to run eagerly may itself follow from a size (a
// branch to unsupported code); at another size the frame then runs eagerly where a capture
// might have compiled it: slower, never wrong.
// The relations its trace relied on between the inputs' sizes become SIZE_RELATION guards;
// an opless entry whose trace read a computed tensor's size stays exact. An eager entry
// relaxes even then (it runs eagerly whatever the sizes).
//
// An eager entry relaxes from the frame's first capture (unless dynamic=False), and for every
// size, 0 and 1 included: it compiles nothing that constant sizes would make faster, and
// a generation loop's wrapper frame (a prompt of 7 tokens, then 1 a step) would otherwise
// capture again at the second call only to run eagerly again.
void relax_sizes_of_opless_entry(PyCodeObject* code, const CompileConfig& config,
                                 capture::CaptureResult& res, const char* why, bool eager) {
  bool dynamic = choose_dynamic(code, config, res).runtime_sizes;  // NOTE: checks mark ranges
  if (eager && config.dynamic != 0) {
    size_t n = res.guards.make_all_sizes_dynamic(0);
    if (n && log_enabled("recompiles"))
      log_event("recompiles", utf8(code->co_qualname) + ": one entry for every size of its " +
                                  std::to_string(n) + " tensor(s) (" + why + ")");
    return;
  }
  if (!dynamic) return;
  if (!relations_to_guards(res) && !eager) return;
  size_t n = res.guards.make_all_sizes_dynamic();
  if (n && log_enabled("recompiles"))
    log_event("recompiles", utf8(code->co_qualname) + ": one entry for every size of its " +
                                std::to_string(n) + " tensor(s) (" + why + ")");
}

// Some argument of `g`'s nodes is computed from a size symbol (an int, a slice or a float the
// trace took from sizes). Symbols read but never passed to an op nor specialised (no relation)
// leave nothing of the trace's sizes in the graph: a resume function's int argument taken as a
// size (capture.cpp `size_argument`) and handed on at its own break or left unused.
bool uses_symbols(const ir::Graph& g) {
  std::function<bool(const ir::Arg&)> symbolic = [&](const ir::Arg& a) {
    if (a.sym || a.sym_slice || a.fsym) return true;
    for (const ir::Arg& i : a.items)
      if (symbolic(i)) return true;
    return false;
  };
  for (const auto& n : g.nodes()) {
    for (const ir::Arg& a : n->args)
      if (symbolic(a)) return true;
    for (const auto& [k, a] : n->kwargs)
      if (symbolic(a)) return true;
  }
  return false;
}

// How the frame goes on after its break, for the graph_breaks log.
std::string after_break(const capture::CaptureResult& res, const bytecode::BridgeCode* codes) {
  if (!codes) return "the frame runs eagerly (" + res.no_resume + ")";
  if (!res.resume->nested.empty())
    return "the frame and the " + std::to_string(res.resume->nested.size()) +
           " inlined call(s) down to the break each go on in a resume function";
  if (!res.resume->region) return "the frame goes on in a resume function";
  if (codes->loop_body)
    return "the graph before the loop runs compiled; CPython runs the loop, each iteration "
           "calling the loop-body function";
  if (!codes->no_loop_body.empty())
    return "the graph before it runs compiled, the rest of the frame eagerly (the loop's body "
           "cannot run as a function: " +
           codes->no_loop_body + ")";
  return "the graph before it runs compiled, the rest of the frame eagerly (break inside a try "
         "block)";
}

}  // namespace

void set_graph_wrapper(GraphWrapper wrapper) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_wrap_graph = wrapper;
}

void set_backend_bridge(PyObject* bridge) {
  std::lock_guard<std::mutex> lock(g_mu);
  Py_XINCREF(bridge);
  Py_XDECREF(g_backend_bridge);
  g_backend_bridge = bridge;
}

CacheEntry compile_frame(PyCodeObject* code, PyObject* func, const ir::FrameView& frame,
                         const std::shared_ptr<const CompileConfig>& config,
                         bool structural_modules) {
  CacheEntry entry;
  entry.config = config;
  // A bridge runs natively (it holds the breaking instruction); no guards.
  if (bytecode::is_bridge(code)) return entry;
  counters().frames++;
  capture::CaptureResult res = capture::capture_frame(code, func, frame, structural_modules);
  entry.input_sizes = input_sizes_of(res);
  counters().capture_ns += static_cast<int64_t>(res.capture_ms * 1e6);
  // NOTE: kernels' .ll and .cu files go to <debug_dir>/kernels (core/flags.h).
  std::string dump_folder =
      config->settings.trace ? dump(code, res, config->settings.debug_dir) : "";
  if (log_enabled("guards"))
    log_event("guards", utf8(code->co_qualname) + ":\n" + res.guards.str());

  const bytecode::BridgeCode* codes = nullptr;
  if (res.graph_break) {
    const auto& b = *res.graph_break;
    counters().graph_breaks++;
    std::string where = b.filename + ":" + std::to_string(b.lineno);
    if (config->fullgraph) {
      if (config->recorder && config->recorder.get() != Py_None)
        record(config->recorder.get(), code, res, false);
      TL_THROW(Unsupported) << "torchlite: graph break in " << utf8(code->co_qualname) << " at "
                            << where << " (fullgraph=True): " << b.reason << " [" << b.kind
                            << "]\nHint: "
                            << (b.hint.empty() ? "move this out of the compiled function, or "
                                                 "compile with fullgraph=False to run it eagerly."
                                               : b.hint);
    }
    if (res.resume) {
      try {
        // NOTE: a break inside inlined calls: the bridge calls the next level's where the call
        // was (ResumePlan::nested).
        const auto& nested = res.resume->nested;
        codes = nested.empty()
                    ? &bytecode::bridge_for({code, res.resume->index, res.resume->region,
                                             res.resume->stack, res.resume->local_slots})
                    : &bytecode::call_through_bridge(code, res.resume->index, res.resume->stack,
                                                     res.resume->local_slots);
      } catch (const bytecode::CannotResume& e) {
        res.no_resume = e.what();
      }
    }
    if (log_enabled("graph_breaks"))
      log_event("graph_breaks", "graph break in " + utf8(code->co_qualname) + " at " + where +
                                    ": " + b.reason + " [" + b.kind + "]; " +
                                    after_break(res, codes));
  }
  const bool has_ops = res.graph && (!res.graph_break || res.graph->num_ops() > 0);
  std::string eager_frame =
      choose_eager(code, res, codes, has_ops && (!res.graph_break || codes), config->id);
  if (config->recorder && config->recorder.get() != Py_None)
    record(config->recorder.get(), code, res, codes != nullptr, eager_frame);
  if (res.graph_break && !codes) {
    relax_sizes_of_opless_entry(code, *config, res, "the frame runs eagerly", true);
    entry.guards = std::move(res.guards);
    return entry;
  }
  // NOTE: an empty graph before a break is not a graph (nothing to compile or count).
  if (log_enabled("graph") && has_ops)
    log_event("graph", utf8(code->co_qualname) + ":\n" + res.graph->str());
  std::unique_ptr<runtime::Executable> executable;
  std::shared_ptr<SizeInstances> generic;
  if (has_ops) {
    DynamicChoice dyn = choose_dynamic(code, *config, res);
    entry.runtime_sizes = dyn.runtime_sizes;
    // NOTE: kept before compile_graph's passes rewrite the graph: new sizes replay it.
    std::string blocker = !dyn.runtime_sizes ? "static sizes"
                          : codes && !res.resume
                              ? "a graph break"
                              : size_generic_blocker(res, *config, codes != nullptr);
    std::shared_ptr<const ir::Graph> captured = blocker.empty() ? clone_graph(*res.graph) : nullptr;
    // NOTE: before compile_graph: its passes insert and erase nodes of res.graph (a symbol's
    // node may be gone after them), while new sizes replay the clone.
    std::vector<std::pair<size_t, int>> positions;
    bool relations_in_guards = false;
    if (captured) {
      positions = symbol_positions(res);
      relations_in_guards = relations_to_guards(res);
    }
    if (dyn.runtime_sizes && !blocker.empty() && log_enabled("recompiles"))
      log_event("recompiles",
                utf8(code->co_qualname) + ": sizes stay exact in the guards (" + blocker + ")");
    if (config->backend && config->backend.get() != Py_None)
      executable = runtime::Executable::callable(compile_with_backend(res, *config));
    else {
      if (dyn.runtime_sizes && log_enabled("recompiles"))
        log_event("recompiles", utf8(code->co_qualname) +
                                    ": kernels take their sizes at run time (" + dyn.why + ")");
      pipeline::PassContext pass_ctx{config->settings, config->mode, dump_folder,
                                     config->graph_pool, dyn.runtime_sizes};
      if (dyn.runtime_sizes) pass_ctx.static_sizes = static_sizes_of(res, captured != nullptr);
      pipeline::CompileResult ex = pipeline::compile_graph(res.graph, pass_ctx);
      if (config->recorder && config->recorder.get() != Py_None) {
        if (!ex.cuda_graphs.empty())
          add_to_record(config->recorder.get(), "cuda_graphs", ex.cuda_graphs);
        if (!ex.training.empty()) add_to_record(config->recorder.get(), "training", ex.training);
        // NOTE: whether the graph runs fused kernels and what compiling it cost, so a sweep can
        // tell a model checked through its kernels from one that ran op by op.
        double pass_ms = 0;
        for (double ms : ex.pass_ms) pass_ms += ms;
        add_to_record(config->recorder.get(), "kernels",
                      ex.n_kernels     ? std::to_string(ex.n_kernels) + " kernels"
                      : ex.training_fn ? ex.training
                                       : "op by op: " + ex.no_kernels);
        add_to_record(config->recorder.get(), "compile_ms",
                      std::to_string(static_cast<int64_t>(pass_ms + ex.kernels_ms)));
      }
      executable = std::move(ex.executable);
      // NOTE: a graph with nothing to fuse runs op by op: the captured graph (before the passes)
      // holds no number derived from a size when its trace read none, so it serves every size
      // as it is, raising eager's own error where an op does.
      if (captured && !executable->compiled() && !ex.training_fn && !uses_symbols(*captured) &&
          res.sym_relations.empty()) {
        std::string dims = make_sizes_dynamic(res, dyn.all_dims);
        if (!dims.empty()) {
          executable = pipeline::op_by_op(captured);
          if (log_enabled("recompiles"))
            log_event("recompiles", utf8(code->co_qualname) + ": one entry for every size of " +
                                        dims + " (op by op: " + ex.no_kernels + ")");
        }
      } else if (captured && !executable->compiled() && log_enabled("recompiles")) {
        log_event("recompiles", utf8(code->co_qualname) +
                                    ": sizes stay exact in the guards (op by op: " + ex.no_kernels +
                                    ")");
      }
      if (captured && executable->compiled()) {
        std::string dims = make_sizes_dynamic(res, dyn.all_dims);
        if (!dims.empty()) {
          pipeline::PassContext instance_ctx{config->settings, config->mode, "", config->graph_pool,
                                             true};
          instance_ctx.static_sizes = pass_ctx.static_sizes;
          generic = std::make_shared<SizeInstances>(captured, std::move(instance_ctx),
                                                    utf8(code->co_qualname));
          generic->remember_first(res.example_inputs);
          generic->set_symbols(res, std::move(positions), relations_in_guards);
          if (log_enabled("recompiles"))
            log_event("recompiles",
                      utf8(code->co_qualname) + ": one entry for every size of " + dims);
          // NOTE: explain() and the trace show the guards as they are checked, and the
          // relations of sizes the entry serves only where they hold.
          std::string shown = res.guards.str();
          if (!res.guards.has_size_relations())
            for (const ir::SymRelation& r : res.sym_relations)
              shown += "SIZE_RELATION " + r.str() + "  # " + r.where + "\n";
          shown += generic->per_size_checks();
          if (config->recorder && config->recorder.get() != Py_None)
            add_to_record(config->recorder.get(), "guards", shown);
          if (!dump_folder.empty()) write_dump(dump_folder + "guards.txt", shown);
        }
      }
    }
    counters().graphs++;
  } else {
    executable = pipeline::op_by_op(res.graph);
  }
  if ((!res.graph || res.graph->num_ops() == 0) && !res.reads_sizes)
    relax_sizes_of_opless_entry(code, *config, res, "no op", false);
  if (codes) {
    auto resume_frame = std::make_shared<ResumeFrame>(
        res.graph, std::move(res.side_effects), std::move(res.closures), std::move(executable),
        utf8(code->co_name), utf8(code->co_filename), std::move(*res.resume), *codes, config);
    if (generic) resume_frame->set_size_instances(std::move(generic));
    entry.compiled = std::move(resume_frame);
  } else {
    auto captured_frame = std::make_shared<CapturedFrame>(
        res.graph, std::move(res.result), std::move(res.side_effects), std::move(res.closures),
        std::move(executable), utf8(code->co_name), utf8(code->co_filename));
    if (generic) captured_frame->set_size_instances(std::move(generic));
    entry.compiled = std::move(captured_frame);
  }
  entry.guards = std::move(res.guards);
  if (auto* captured = dynamic_cast<CapturedFrame*>(entry.compiled.get()))
    entry.guards.bind_inputs(captured->input_sources());
  return entry;
}

}  // namespace tl::frame
