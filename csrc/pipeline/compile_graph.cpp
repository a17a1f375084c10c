#include "pipeline/compile_graph.h"

#include <atomic>
#include <sstream>

#include "core/dump_dir.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/secure_fs.h"
#include "pipeline/pass_registry.h"

namespace tl::pipeline {
namespace {

std::atomic<int> g_trace_folders{0};

// True when the trace-time tensor (borrowed) is a view of another tensor.
bool is_view(PyObject* example) {
  if (!example) return false;
  PyRef r = PyRef::steal(PyObject_CallMethod(example, "_is_view", nullptr));
  if (!r) throw PythonError();
  return r.get() == Py_True;
}

// Why the graph cannot have kernels, or "" when it can.
std::string kernel_blocker(const ir::Graph& graph) {
  for (auto& n : graph.nodes()) {
    if (!n->meta) continue;
    // Kernels write plain tensors: values autograd must track stay torch ops
    // until backward graphs are derived (the training issue).
    // (Inputs that require grad are fine: kernels only read them. So are
    // views of them: under no_grad a view of a parameter still reports
    // requires_grad, as in eager, and views are never kernel outputs.)
    if (n->meta->requires_grad && n->op != ir::OpKind::Placeholder && !is_view(n->example.get()))
      return "a value requires grad (" + n->name + ")";
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
      for (auto& k : part->kernels) out += "\n" + k.kernel.str() + "\n";
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

}  // namespace

std::string new_trace_folder(const std::string& debug_dir, const std::string& name) {
  std::string dir = process_dump_subdir(
      debug_dir, std::to_string(g_trace_folders++) + "_" + secure_fs::sanitize_name(name));
  return dir.empty() ? "" : dir + "/";  // NOTE: debug output never fails a compile
}

Executable compile_graph(std::shared_ptr<ir::Graph> graph, const PassContext& ctx) {
  Executable ex;
  ex.graph = graph;
  Trace trace(ctx);
  trace.graph("00_input.txt", *graph, nullptr);
  ex.no_kernels = kernel_blocker(*graph);
  // All on the CPU (LLVM build) or on one CUDA device (driver loaded); else op by op.
  std::optional<runtime::KernelDevice> device;
  if (ex.no_kernels.empty()) device = runtime::kernel_device(*graph);
  if (ex.no_kernels.empty() && !device)
    ex.no_kernels = "no kernels for this graph's devices in this build";
  if (!device) {
    trace.note("none: " + ex.no_kernels);
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
    p.run(*graph, st);
    ex.passes.push_back(p.name);
    if (ctx.settings.verify) verify_after(p.name, *graph, st);
    trace.note("  " + file + ": ran");
    trace.graph(file, *graph, st.partition.kernels.empty() ? nullptr : &st.partition);
  }
  if (st.partition.kernels.empty()) {
    ex.no_kernels = "nothing to fuse";
    return ex;
  }
  trace.kernels("lowered.txt", st.partition);
  log_kernels(st.partition);
  ex.kernels = std::make_unique<runtime::CompiledGraph>(graph, std::move(st.partition));
  return ex;
}

}  // namespace tl::pipeline
