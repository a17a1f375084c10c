#pragma once
// The one table of torchlite's settings: name, type, default, environment
// variable and doc of each. The environment is read here and nowhere else in
// csrc/ (tests/python/api/test_settings.py greps for getenv). Python's
// torchlite.config starts from settings_from_env() and hands its values back
// with set_process_settings(); compile-scope values also travel per
// torchlite.compile() call (mode presets, options=) in the frame's
// CompileConfig and reach passes only through pipeline::PassContext.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tl {

struct Settings {
  // Compile scope: per torchlite.compile() call (options= may override them).
  bool functionalize = true;
  bool fold_batch_norm = false;
  std::optional<bool> channels_last;  // nullopt: the device's default (prefers_channels_last)
  bool cache_conv_weights = false;    // channels-last conv weights kept per parameter version
  bool convert_conv_weights = true;   // else converted by the graph, one grouped launch
  bool verify = false;
  bool compiled_backward = true;
  bool recompute_in_backward = true;
  bool recompute_matmul_inputs = true;  // passes/partition_joint.h
  bool group_kernels = false;           // horizontal fusion (passes/group_kernels.h)
  int64_t cache_size_limit = 8;
  bool cuda_graphs = false;         // mode="reduce-overhead" / "max-autotune" turn it on
  int64_t cuda_graphs_limit = 8;    // recordings of one graph before it runs without
  bool autotune = false;            // mode="max-autotune" / "max-autotune-no-cudagraphs"
  bool autotune_blocks = true;      // autotune also tries kernels' other block sizes
  bool cpu_kernels = true;          // off: CPU graphs run op by op, as in a build without LLVM
  std::optional<bool> pad_matmuls;  // nullopt: CUDA f16/bf16 products where padding pays
  bool matmul_layouts = true;       // batched products' operands copied by kernels, not by torch
  bool merge_duplicates = true;     // identical calls on the same operands computed once
  bool small_products = true;       // linears of a few rows and columns as pointwise kernels
  std::optional<bool> decompose_attention;  // nullopt: float-masked attention on CUDA
  // Process scope: the runtime reads them (torchlite.config or the environment only).
  bool trace = false;
  std::string debug_dir = "./torchlite_debug";
  std::string logs;
  std::string cache_dir;  // "" turns the disk cache off
  int64_t cache_max_mb = 4096;
  bool disable = false;
  bool check_meta = false;
  int64_t cpu_pool_mb = 1024;
  int64_t cpu_vector_bits = 0;  // 0: 512 on AVX-512 hosts, else LLVM's choice
  std::string nvrtc;
  std::string cuda_home;
};

enum class SettingScope { Compile, Process };

using SettingField = std::variant<bool Settings::*, int64_t Settings::*, std::string Settings::*,
                                  std::optional<bool> Settings::*>;
using SettingValue = std::variant<bool, int64_t, std::string, std::optional<bool>>;

struct SettingSpec {
  const char* name;    // torchlite.config.<name>, options={"<name>": ...}
  SettingField field;  // its type is the field's type
  SettingScope scope;
  const char* env;           // environment variable, or nullptr
  const char* default_text;  // the default as the README's table states it
  const char* doc;
};

const std::vector<SettingSpec>& setting_specs();
const SettingSpec* find_setting(std::string_view name);  // nullptr when unknown

SettingValue get_setting(const Settings& s, const SettingSpec& spec);
// Throws tl::Error (TypeError) when `v` does not hold the setting's type.
void set_setting(Settings& s, const SettingSpec& spec, const SettingValue& v);
const char* setting_type_name(const SettingSpec& spec);  // "bool", "int", "str", "bool|None"

// Where kernels' .ll/.cu files are dumped under trace: <process dump folder>/kernels
// (core/dump_dir.h); "" without trace or when debug_dir is not trusted.
std::string kernel_dump_dir(const Settings& s);

// Defaults overridden by the environment (the only getenv of csrc/).
Settings settings_from_env();

// What the runtime reads: settings_from_env() until torchlite.config is
// applied (torchlite._install.sync), then torchlite.config's values.
Settings process_settings();
void set_process_settings(const Settings& s);

}  // namespace tl
