#include "core/flags.h"

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "core/dump_dir.h"
#include "core/errors.h"

namespace tl {
namespace {

using S = Settings;
constexpr auto kCompile = SettingScope::Compile;
constexpr auto kProcess = SettingScope::Process;

// NOTE: default_text is what README.md's environment table says; a test checks the two agree.
const std::vector<SettingSpec> kSpecs = {
    {"functionalize", &S::functionalize, kCompile, "TORCHLITE_FUNCTIONALIZE", "on",
     "Rewrite in-place ops on intermediates (relu_, +=) out of place so they fuse."},
    {"fold_batch_norm", &S::fold_batch_norm, kCompile, "TORCHLITE_FOLD_BATCH_NORM", "off",
     "Fold inference batch norm into the convolution before it."},
    {"channels_last", &S::channels_last, kCompile, "TORCHLITE_CHANNELS_LAST",
     "on for CUDA f16/bf16 and large or depthwise-separable CPU f32",
     "True: graphs with two or more convolutions (or one whose consumers read channels "
     "innermost) run channels-last; False: never; None: on for "
     "CUDA f16/bf16, and on the CPU for f32 graphs whose largest convolution output is 16 MB or "
     "more or whose convolutions are estimated faster channels-last (depthwise-separable "
     "networks: passes/channels_last.h, cpu_conv_cost)."},
    {"cache_conv_weights", &S::cache_conv_weights, kCompile, "TORCHLITE_CACHE_CONV_WEIGHTS", "off",
     "A convolution that runs channels-last reads a channels-last copy of its k x k weight "
     "parameter made once per parameter version (an in-place update or `.data = t` makes a new "
     "one) instead of converting it in every call. Opt-in (as torch.compile's freezing): writes "
     "through `w.data`, numpy or DLPack views bypass the version counter and would leave the "
     "copy stale."},
    // NOTE: no environment variable (a README row the coordinator adds): options= or config.
    {"convert_conv_weights", &S::convert_conv_weights, kCompile, nullptr, "on",
     "A convolution that runs channels-last reads a channels-last copy of its contiguous k x k "
     "weight made at the start of each call, all of a graph's weights in one launch "
     "(passes/conv_weights.h), instead of torch converting it inside every convolution. Always "
     "the weight's current values; off: torch converts them."},
    {"verify", &S::verify, kCompile, "TORCHLITE_VERIFY", "off",
     "Check the graph after every compiler pass and name the pass that broke it."},
    {"compiled_backward", &S::compiled_backward, kCompile, "TORCHLITE_COMPILED_BACKWARD", "on",
     "On: graphs autograd records run a compiled forward and a backward traced from torch's "
     "own derivative formulas (graphs it cannot handle run op by op, explain says why); off: "
     "they all run op by op through torch's autograd."},
    {"group_kernels", &S::group_kernels, kCompile, "TORCHLITE_GROUP_KERNELS", "off",
     "Independent pointwise kernels with the same body over different tensors run as one launch "
     "(the compiled optimizer step turns it on for its per-parameter updates)."},
    {"recompute_in_backward", &S::recompute_in_backward, kCompile,
     "TORCHLITE_RECOMPUTE_IN_BACKWARD", "on",
     "Backward recomputes cheap pointwise values from saved ones where that stores fewer bytes; "
     "off: the forward saves every value backward reads."},
    {"recompute_matmul_inputs", &S::recompute_matmul_inputs, kCompile,
     "TORCHLITE_RECOMPUTE_MATMUL_INPUTS", "on",
     "Backward recomputes a matmul's input made by cheap pointwise ops from values it has "
     "already (GELU's output, a norm's output, dropped attention probabilities), as "
     "AOTAutograd's min cut does: less memory held for backward, one more backward kernel; off: "
     "the forward saves it (it stores it anyway)."},
    {"cache_size_limit", &S::cache_size_limit, kCompile, nullptr, "8",
     "Cache entries (guard sets) per code object; past this the code runs eagerly."},
    {"cuda_graphs", &S::cuda_graphs, kCompile, "TORCHLITE_CUDA_GRAPHS", "off",
     "Record compiled CUDA graphs into CUDA graphs after a warm-up call and replay them (one "
     "memory pool per model; mode='reduce-overhead' turns it on). Outputs are copied out."},
    {"cuda_graphs_limit", &S::cuda_graphs_limit, kCompile, nullptr, "8",
     "Recordings of one compiled graph (its inputs read in place changed address); past this "
     "it runs without CUDA graphs."},
    {"autotune", &S::autotune, kCompile, "TORCHLITE_AUTOTUNE", "off",
     "Time launch configurations of generated CUDA kernels on the first run and keep the "
     "fastest, cached on disk (mode='max-autotune' turns it on)."},
    {"autotune_blocks", &S::autotune_blocks, kCompile, "TORCHLITE_AUTOTUNE_BLOCKS", "on",
     "Under autotune, also build kernels at other block sizes (pointwise: 128 and 512 "
     "threads; reductions: half and twice theirs) and time them; off: only grids (and the "
     "scalar entry) are tried."},
    {"cpu_kernels", &S::cpu_kernels, kCompile, "TORCHLITE_CPU_KERNELS", "on",
     "Off: graphs on the CPU run op by op through torch, as in a build without LLVM (the GPU "
     "machine's CPU path; for tests of that path on an LLVM build)."},
    {"pad_matmuls", &S::pad_matmuls, kCompile, "TORCHLITE_PAD_MATMULS",
     "on for CUDA f16/bf16 where cheaper",
     "None: matrix products (mm, addmm: every linear of a training step, forward and backward) "
     "whose sizes are not multiples of 8 are computed on zero-padded operands and narrowed back "
     "on CUDA in float16/bfloat16 where a cost model says the padding pays (cuBLAS's align-1 "
     "kernels are 3-5x slower); True: every such floating product on any device; False: never "
     "(half-precision inference linears included)."},
    {"matmul_layouts", &S::matmul_layouts, kCompile, "TORCHLITE_MATMUL_LAYOUTS", "on",
     "Operands of batched products (bmm, matmul of 3+-d values: attention's q @ k.T) that torch "
     "would copy into a layout bmm reads are copied by a generated kernel before the product, "
     "fused into the kernel producing them; off: torch's copies."},
    {"merge_duplicates", &S::merge_duplicates, kCompile, "TORCHLITE_MERGE_DUPLICATES", "on",
     "Calls of one op on the same operands with equal constants (a mask or position bias every "
     "layer of a model rebuilds) are computed once, in graphs that write no tensor in place; "
     "values the graph returns keep their own copies; off: every call runs."},
    {"small_products", &S::small_products, kCompile, "TORCHLITE_SMALL_PRODUCTS", "on",
     "Linears whose weight has at most 8 columns and 16 rows, over at least 1024 input rows "
     "(CaiT's talking-heads projections), are computed as multiply-adds in float32 by generated "
     "kernels, fused with their neighbours, instead of a cuBLAS/MKL product on a dense copy; "
     "off: torch's product."},
    {"decompose_attention", &S::decompose_attention, kCompile, "TORCHLITE_DECOMPOSE_ATTENTION",
     "on for CUDA math-path calls",
     "None: scaled_dot_product_attention with a floating attn_mask (an additive bias: T5's "
     "position bias, ALiBi, relative position biases) and no grad, dropout or is_causal, that "
     "torch would run on its float32 math path on CUDA (no fused kernel takes it), runs as a "
     "batched product in the inputs' dtype, one generated scale + bias + softmax kernel and a "
     "second product; True: every such call on every device (CPU tests, A/B timing); False: "
     "torch's call."},
    {"trace", &S::trace, kProcess, "TORCHLITE_TRACE", "off",
     "Dump graphs (after every pass), guards, lowered IR, kernels and timings to debug_dir."},
    {"debug_dir", &S::debug_dir, kProcess, "TORCHLITE_DEBUG_DIR", "`./torchlite_debug`",
     "Where trace writes: each process makes a fresh private folder `run-<pid>-XXXXXX` in it "
     "(docs/security.md)."},
    {"logs", &S::logs, kProcess, "TORCHLITE_LOGS", "empty",
     "Comma-separated log channels: graph_breaks, recompiles, guards, graph, kernels, "
     "cudagraphs."},
    {"cache_dir", &S::cache_dir, kProcess, "TORCHLITE_CACHE_DIR", "`~/.cache/torchlite`",
     "On-disk kernel cache (CPU objects, CUDA cubins), made 0700; an untrusted folder is not "
     "used (docs/security.md); empty turns it off."},
    {"cache_max_mb", &S::cache_max_mb, kProcess, "TORCHLITE_CACHE_MAX_MB", "`4096`",
     "Size cap of the on-disk kernel cache (MB); least recently used entries are evicted past "
     "it. 0: no cap."},
    {"disable", &S::disable, kProcess, "TORCHLITE_DISABLE", "off",
     "torchlite.compile returns its input unchanged."},
    {"check_meta", &S::check_meta, kProcess, "TORCHLITE_CHECK_META", "off",
     "Capture infers common ops' meta results in C++; on: each such answer is checked against "
     "torch's meta kernel and a difference raises InternalError (slow: for tests)."},
    {"cpu_pool_mb", &S::cpu_pool_mb, kProcess, "TORCHLITE_CPU_POOL_MB", "`1024`",
     "Idle memory kept by the CPU pool of large kernel outputs (MB; 0 turns it off). Read when "
     "the pool is first used."},
    {"cpu_vector_bits", &S::cpu_vector_bits, kProcess, "TORCHLITE_CPU_VECTOR_BITS",
     "`512` on AVX-512 CPUs",
     "256: CPU kernels keep LLVM's vector width; 0: 512 on AVX-512. Read at the first CPU "
     "compile."},
    {"nvrtc", &S::nvrtc, kProcess, "TORCHLITE_NVRTC", "search",
     "Path of libnvrtc.so to use. Read when NVRTC is first loaded."},
    {"cuda_home", &S::cuda_home, kProcess, "CUDA_HOME", "unset",
     "A CUDA toolkit whose lib64/ is searched for libnvrtc (after the nvidia wheels)."},
};

std::mutex g_mu;
std::optional<Settings> g_process;

std::string env(const char* name) {
  const char* v = name ? std::getenv(name) : nullptr;
  return v ? v : "";
}

std::optional<bool> parse_bool(const std::string& v) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return std::nullopt;
}

template <class>
constexpr bool kFalse = false;

// Sets the field from its variable's text; unparsable text keeps the default.
void apply_env(Settings& s, const SettingSpec& spec, const std::string& text) {
  std::visit(
      [&](auto field) {
        using T = std::remove_reference_t<decltype(s.*field)>;
        if constexpr (std::is_same_v<T, bool>) {
          if (auto b = parse_bool(text)) s.*field = *b;
        } else if constexpr (std::is_same_v<T, std::optional<bool>>) {
          s.*field = parse_bool(text);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          char* end = nullptr;
          long long n = std::strtoll(text.c_str(), &end, 10);
          if (end && *end == '\0') s.*field = n;
        } else if constexpr (std::is_same_v<T, std::string>) {
          s.*field = text;
        } else {
          static_assert(kFalse<T>);
        }
      },
      spec.field);
}

}  // namespace

const std::vector<SettingSpec>& setting_specs() { return kSpecs; }

const SettingSpec* find_setting(std::string_view name) {
  for (const SettingSpec& s : kSpecs)
    if (name == s.name) return &s;
  return nullptr;
}

SettingValue get_setting(const Settings& s, const SettingSpec& spec) {
  return std::visit([&](auto field) { return SettingValue(s.*field); }, spec.field);
}

void set_setting(Settings& s, const SettingSpec& spec, const SettingValue& v) {
  std::visit(
      [&](auto field) {
        using T = std::remove_reference_t<decltype(s.*field)>;
        if (!std::holds_alternative<T>(v))
          TL_THROW(Type) << "torchlite setting '" << spec.name << "' takes a "
                         << setting_type_name(spec);
        s.*field = std::get<T>(v);
      },
      spec.field);
}

const char* setting_type_name(const SettingSpec& spec) {
  static const char* kNames[] = {"bool", "int", "str", "bool|None"};
  return kNames[spec.field.index()];
}

std::string kernel_dump_dir(const Settings& s) {
  return s.trace ? process_dump_subdir(s.debug_dir, "kernels") : "";
}

Settings settings_from_env() {
  Settings s;
  // NOTE: HOME only supplies the default; TORCHLITE_CACHE_DIR wins.
  if (std::string home = env("HOME"); !home.empty())
    s.cache_dir = (std::filesystem::path(home) / ".cache" / "torchlite").string();
  for (const SettingSpec& spec : kSpecs) {
    if (!spec.env) continue;
    // NOTE: an empty variable counts as unset, as it always has for TORCHLITE_CACHE_DIR.
    if (std::string text = env(spec.env); !text.empty()) apply_env(s, spec, text);
  }
  return s;
}

Settings process_settings() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_process) g_process = settings_from_env();
  return *g_process;
}

void set_process_settings(const Settings& s) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_process = s;
}

}  // namespace tl
