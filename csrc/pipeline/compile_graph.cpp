#include "pipeline/compile_graph.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <sstream>

#include "core/counters.h"
#include "core/dump_dir.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/secure_fs.h"
#include "passes/cuda_layouts.h"
#include "passes/group_kernels.h"
#include "passes/memory_plan.h"
#include "pipeline/pass_registry.h"

namespace tl::pipeline {
namespace {

std::atomic<int> g_trace_folders{0};
std::mutex g_training_mu;
TrainingCompiler g_training_compiler;  // guarded by g_training_mu

PyRef attr_of(PyObject* obj, const char* name) {
  PyRef r = PyRef::steal(PyObject_GetAttrString(obj, name));
  if (!r) throw PythonError();
  return r;
}

// True when the trace-time tensor (borrowed) is a view of another tensor.
bool is_view(PyObject* example) {
  PyRef r = PyRef::steal(PyObject_CallMethod(example, "_is_view", nullptr));
  if (!r) throw PythonError();
  return r.get() == Py_True;
}

// True when `n`'s trace-time value is one of its inputs' values itself: a
// no-op cast (`w.float()` of a float tensor, `.contiguous()`, `.to(same)`)
// returns its input, whose requires_grad flag it then reports.
bool is_input_itself(const ir::Node& n) {
  bool found = false;
  std::function<void(const ir::Arg&)> visit = [&](const ir::Arg& a) {
    if (a.kind == ir::Arg::Kind::Node && a.node->example.get() == n.example.get()) found = true;
    for (const ir::Arg& item : a.items) visit(item);
  };
  for (const ir::Arg& a : n.args) visit(a);
  for (const auto& kv : n.kwargs) visit(kv.second);
  return found;
}

// True when the graph returns `n` (directly or in a container).
bool is_returned(const ir::Graph& graph, const ir::Node& n) {
  if (!graph.output()) return false;
  std::function<bool(const ir::Arg&)> visit = [&](const ir::Arg& a) {
    if (a.kind == ir::Arg::Kind::Node && a.node == &n) return true;
    for (const ir::Arg& item : a.items)
      if (visit(item)) return true;
    return false;
  };
  for (const ir::Arg& a : graph.output()->args)
    if (visit(a)) return true;
  return false;
}

const char kTracked[] = "a value requires grad (";

// Why the graph cannot have kernels, or "" when it can.
std::string kernel_blocker(const ir::Graph& graph) {
  for (auto& n : graph.nodes())
    if (autograd_tracks(*n)) return kTracked + n->name + ")";
  for (auto& n : graph.nodes()) {
    // NOTE: a returned no-op cast must be its input itself (eager's identity and
    // requires_grad), which a kernel's fresh output is not.
    if (n->meta && n->meta->requires_grad && n->op != ir::OpKind::Placeholder && n->example &&
        !is_view(n->example.get()) && is_returned(graph, *n))
      return "returns a value that requires grad (" + n->name + ")";
  }
  return "";
}

std::string setting_text(const Settings& s, const SettingSpec& spec) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) return v ? "True" : "False";
        if constexpr (std::is_same_v<T, int64_t>) return std::to_string(v);
        if constexpr (std::is_same_v<T, std::string>) return "'" + v + "'";
        if constexpr (std::is_same_v<T, std::optional<bool>>)
          return v ? (*v ? "True" : "False") : "None";
      },
      get_setting(s, spec));
}

// Under trace: pipeline.txt (mode, settings, each pass ran or skipped and
// why) and the graph after every pass; nothing when ctx.trace_dir is "".
class Trace {
 public:
  explicit Trace(const PassContext& ctx) : dir_(ctx.trace_dir) {
    if (dir_.empty()) return;
    log_ << "mode: " << ctx.mode << "\nsettings:";
    for (const SettingSpec& spec : setting_specs())
      if (spec.scope == SettingScope::Compile)
        log_ << " " << spec.name << "=" << setting_text(ctx.settings, spec);
    log_ << "\npasses:\n";
  }
  ~Trace() {
    if (!dir_.empty()) write_dump(dir_ + "pipeline.txt", log_.str());
  }
  void note(const std::string& line) { log_ << line << "\n"; }
  void graph(const std::string& file, const ir::Graph& g, const passes::Partition* part) {
    if (dir_.empty()) return;
    std::string out = g.str();
    if (part)
      for (auto& k : part->kernels) out.append("\n").append(k.kernel.str()).append("\n");
    write_dump(dir_ + file, out);
  }
  void kernels(const std::string& file, const passes::Partition& part) {
    if (dir_.empty()) return;
    std::string out;
    for (auto& k : part.kernels) out += k.kernel.str() + "\n";
    write_dump(dir_ + file, out);
  }

 private:
  std::string dir_;
  std::ostringstream log_;
};

// Milliseconds since `t0`, for the trace's timings.
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string ms_text(double ms) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << ms << " ms";
  return os.str();
}

std::string numbered(size_t index, const std::string& name) {
  std::string nn = std::to_string(index);
  return std::string(nn.size() < 2 ? "0" : "") + nn + "_" + name + ".txt";
}

// Under verify: the graph's and kernels' invariants, the message naming the pass.
void verify_after(const std::string& pass, const ir::Graph& graph, const PassState& st) {
  try {
    graph.lint();
    for (auto& k : st.partition.kernels) k.kernel.verify();
  } catch (const Error& e) {
    throw Error(ErrorKind::Internal,
                "TORCHLITE_VERIFY: the graph is broken after pass '" + pass + "':\n" + e.what());
  }
}

void log_kernels(const passes::Partition& part) {
  if (!log_enabled("kernels")) return;
  std::string names;
  for (auto& k : part.kernels) names += (names.empty() ? "" : ", ") + k.kernel.name;
  log_event("kernels", std::to_string(part.kernels.size()) + " fused kernel(s): " + names);
}

// The compiled forward+backward of a graph autograd records, or null.
PyRef training_fn(const std::shared_ptr<ir::Graph>& graph, const PassContext& ctx, std::string& why,
                  std::string& cuda_graphs) {
  TrainingCompiler compiler;
  {
    std::lock_guard<std::mutex> lock(g_training_mu);
    compiler = g_training_compiler;
  }
  if (!ctx.settings.compiled_backward) {
    why = "compiled_backward is off";
    return PyRef();
  }
  if (!compiler) {
    why = "no training compiler registered";
    return PyRef();
  }
  return compiler(graph, ctx, why, cuda_graphs);
}

// True when some tensor of `graph` lives on the CPU.
bool on_cpu(const ir::Graph& graph) {
  for (auto& n : graph.nodes()) {
    if (!n->meta || !n->meta->device) continue;
    PyRef text = PyRef::steal(PyObject_Str(n->meta->device.get()));
    const char* c = text ? PyUnicode_AsUTF8(text.get()) : nullptr;
    if (!c) throw PythonError();
    if (std::string(c) == "cpu") return true;
  }
  return false;
}

// Under settings.cuda_graphs: turns CUDA graphs on for `ex` or says why not.
void use_cuda_graphs(CompileResult& ex, const PassContext& ctx, Trace& trace) {
  if (!ctx.settings.cuda_graphs) return;
  runtime::CompiledGraph* kernels = ex.executable->compiled();
  bool cuda = kernels ? kernels->device().cuda : !on_cpu(*ex.graph);
  std::string why = runtime::cuda_graph_blocker(*ex.graph, cuda, ctx.pool_outputs_from);
  if (why.empty() && !kernels) why = "the graph has no fused kernels (" + ex.no_kernels + ")";
  if (why.empty()) {
    auto pool = ctx.graph_pool ? ctx.graph_pool : std::make_shared<runtime::CudaGraphPool>();
    kernels->enable_cuda_graphs(pool, static_cast<int>(ctx.settings.cuda_graphs_limit),
                                ctx.trace_dir, ctx.cuda_graph_warmups, ctx.pool_outputs_from,
                                ctx.copy_inputs_from);
    ex.cuda_graphs =
        ctx.cuda_graph_warmups > 1
            ? "recorded after " + std::to_string(ctx.cuda_graph_warmups) + " warm-up calls"
            : "recorded after a warm-up call";
  } else {
    ex.cuda_graphs = "not used: " + why;
  }
  trace.note("cuda graphs: " + ex.cuda_graphs);
  if (log_enabled("cudagraphs")) log_event("cudagraphs", "graph: " + ex.cuda_graphs);
}

}  // namespace

// (compile_graph.h) True when autograd must track `n`'s value, which kernels (writing plain
// tensors) cannot give it. NOTE: decided from what autograd actually recorded
// on the trace-time meta value, not from its requires_grad flag: under
// no_grad or inference mode nothing records, yet a parameter passed through
// a no-op cast or a view still reports requires_grad (Gemma's RMSNorm does
// `1 + weight.float()`); such values are only read by kernels.
bool autograd_tracks(const ir::Node& n) {
  if (!n.meta || !n.meta->requires_grad || n.op == ir::OpKind::Placeholder) return false;
  if (!n.example) return true;
  // NOTE: views are never kernel outputs. Asked first: reading the grad_fn of a view made
  // under no_grad whose base was then written in place raises (`x[1:] = x[:-1] + 0` on a
  // leaf that requires grad, under no_grad).
  if (is_view(n.example.get())) return false;
  if (attr_of(n.example.get(), "grad_fn").get() != Py_None) return true;
  if (is_input_itself(n)) return false;
  return true;  // a fresh leaf that requires grad (requires_grad=True, requires_grad_())
}

void set_training_compiler(TrainingCompiler compiler) {
  std::lock_guard<std::mutex> lock(g_training_mu);
  g_training_compiler = std::move(compiler);
}

std::unique_ptr<runtime::Executable> op_by_op(std::shared_ptr<const ir::Graph> graph) {
  ir::Schedule schedule = passes::op_by_op_schedule(*graph);
  return runtime::Executable::op_by_op(std::move(graph), schedule);
}

std::string new_trace_folder(const std::string& debug_dir, const std::string& name) {
  std::string dir = process_dump_subdir(
      debug_dir, std::to_string(g_trace_folders++) + "_" + secure_fs::sanitize_name(name));
  return dir.empty() ? "" : dir + "/";  // NOTE: debug output never fails a compile
}

void mark_static_axes(ir::Kernel& k, const std::vector<int64_t>& static_sizes) {
  k.static_axes.clear();
  k.static_constants.clear();
  if (!k.runtime_sizes || k.grouped || static_sizes.empty()) return;
  k.static_axes.assign(k.shape.size(), 0);
  for (size_t d = 0; d < k.shape.size(); ++d)
    k.static_axes[d] = std::binary_search(static_sizes.begin(), static_sizes.end(), k.shape[d]);
  k.static_constants.assign(k.exprs.size(), 0);
  for (size_t i = 0; i < k.exprs.size(); ++i) {
    const ir::Expr& e = k.exprs[i];
    k.static_constants[i] = e.op == ir::ExprOp::Constant && !ir::is_floating(e.type) &&
                            std::binary_search(static_sizes.begin(), static_sizes.end(), e.ivalue);
  }
}

CompileResult compile_graph(std::shared_ptr<ir::Graph> graph, const PassContext& ctx) {
  CompileResult ex;
  ex.graph = graph;
  Trace trace(ctx);
  trace.graph("00_input.txt", *graph, nullptr);
  ex.no_kernels = kernel_blocker(*graph);
  if (ex.no_kernels.rfind(kTracked, 0) == 0) {
    // NOTE: graphs autograd records skip the pass list, but a stride-0 attention mask sends
    // SDPA to its float32 math path in training too (BERT-base bf16: 2x the step time, 3 GB of
    // saved fp32 scores); op by op and the joint trace both call torch's SDPA with this graph's
    // arguments, so the dense mask lets torch pick its fused kernel and that kernel's backward.
    if (int made = passes::dense_attention_masks(*graph))
      trace.note("training: " + std::to_string(made) + " stride-0 attention mask(s) made dense");
    std::string why, halves_graphs;
    ex.training_fn = training_fn(graph, ctx, why, halves_graphs);
    ex.training = ex.training_fn ? "compiled forward and backward" : "op by op: " + why;
    trace.note(ex.training_fn ? "training: compiled forward and backward (see joint.txt)"
                              : "training: op by op (" + why + ")");
    if (ex.training_fn) ex.no_kernels = "compiled forward and backward";
    ex.executable =
        ex.training_fn ? runtime::Executable::callable(ex.training_fn) : op_by_op(graph);
    if (ctx.settings.cuda_graphs)
      ex.cuda_graphs = ex.training_fn
                           ? halves_graphs
                           : "not used: the graph records autograd and runs op by op (" + why + ")";
    return ex;
  }
  // Kernels on the graph's CUDA device (driver loaded) or else the CPU (LLVM
  // build); values elsewhere stay extern nodes (the partition pass).
  std::optional<runtime::KernelDevice> device;
  if (ex.no_kernels.empty()) device = runtime::kernel_device(*graph);
  if (device && !device->cuda && !ctx.settings.cpu_kernels) {
    device.reset();
    ex.no_kernels = "cpu_kernels is off";
  }
  if (ex.no_kernels.empty() && !device)
    ex.no_kernels = "no kernels for this graph's devices in this build";
  if (!device) {
    trace.note("none: " + ex.no_kernels);
    ex.executable = op_by_op(graph);
    use_cuda_graphs(ex, ctx, trace);
    return ex;
  }
  const unsigned mask = device->cuda ? kCuda : kCpu;
  PassState st{ctx, graph, *device, {}};
  std::vector<Pass> all = registered_passes();
  for (size_t i = 0; i < all.size(); ++i) {
    const Pass& p = all[i];
    std::string file = numbered(i + 1, p.name);
    if (!(p.devices & mask)) {
      trace.note("  " + file + ": skipped (not for " + (device->cuda ? "cuda" : "cpu") + ")");
      continue;
    }
    if (p.enabled && !p.enabled(ctx.settings)) {
      trace.note("  " + file + ": skipped (off in settings)");
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    p.run(*graph, st);
    double ms = ms_since(t0);
    ex.passes.push_back(p.name);
    ex.pass_ms.push_back(ms);
    if (ctx.settings.verify) verify_after(p.name, *graph, st);
    trace.note("  " + file + ": ran (" + ms_text(ms) + ")");
    trace.graph(file, *graph, st.partition.kernels.empty() ? nullptr : &st.partition);
  }
  if (st.partition.kernels.empty()) {
    ex.no_kernels = "nothing to fuse";
    ex.executable = op_by_op(graph);
    use_cuda_graphs(ex, ctx, trace);
    return ex;
  }
  // NOTE: every kernel takes its sizes at run time: a division by a number read from the dims
  // costs some instructions, a kernel compiled per size costs an NVRTC or LLVM compile (tens of
  // ms) at every new size (an embedding's gather, a mask built from arange, Llama's repeat_kv).
  // Index math that divides by a size (coordinates of a reshaped transposed or expanded view,
  // cat, pad) divides by its magic numbers from the dims array on both devices (CUDA
  // tl_idiv_magic, CPU Emitter::magic_divide): as loaded numbers divided plainly, those CPU
  // kernels ran ~3x slower than with literals (bench/runtime_divisors.py --device cpu).
  for (auto& fk : st.partition.kernels) fk.kernel.runtime_sizes = ctx.runtime_sizes;
  {
    // NOTE: neighbouring copies (the channels-last weight copies passes/conv_weights.h places
    // at the graph's start) are grouped even with group_kernels off: one launch for all.
    size_t saved = passes::group_kernels(st.partition, !ctx.settings.group_kernels);
    counters().launches_grouped += static_cast<int64_t>(saved);
    if (saved || ctx.settings.group_kernels)
      trace.note("group_kernels: " + std::to_string(saved) + " launches saved");
  }
  // NOTE: after group_kernels: the members of a group share one text over other sizes.
  for (auto& fk : st.partition.kernels) mark_static_axes(fk.kernel, ctx.static_sizes);
  trace.kernels("lowered.txt", st.partition);
  log_kernels(st.partition);
  size_t n_kernels = st.partition.kernels.size();
  ex.n_kernels = n_kernels;
  auto t0 = std::chrono::steady_clock::now();
  auto kernels = std::make_unique<runtime::CompiledGraph>(graph, std::move(st.partition));
  ex.kernels_ms = ms_since(t0);
  trace.note("kernels: " + std::to_string(n_kernels) + " built in " + ms_text(ex.kernels_ms) +
             " (code generation, compile or disk cache, link)");
  if (ctx.settings.autotune && kernels->device().cuda) {
    kernels->enable_autotune(ctx.trace_dir, ctx.settings.autotune_blocks);
    trace.note(
        "autotune: kernels' launches (grids; pointwise block sizes) timed on the first run "
        "(autotune.txt)");
  }
  ex.executable = runtime::Executable::kernels(std::move(kernels));
  use_cuda_graphs(ex, ctx, trace);
  return ex;
}

}  // namespace tl::pipeline
