// NVRTC through dlopen: the prototypes below are the handful of entry points
// torchlite calls (their C ABI has been stable since CUDA 7), so no CUDA
// header is needed to build.
#include "runtime/cuda/nvrtc.h"

#include <Python.h>
#include <dlfcn.h>
#include <link.h>

#include <filesystem>
#include <mutex>
#include <vector>

#include "core/errors.h"
#include "core/flags.h"

namespace tl::runtime::cuda {

namespace {

using Program = void*;  // nvrtcProgram
struct Api {
  const char* (*GetErrorString)(int);
  int (*Version)(int*, int*);
  int (*CreateProgram)(Program*, const char*, const char*, int, const char* const*,
                       const char* const*);
  int (*CompileProgram)(Program, int, const char* const*);
  int (*DestroyProgram)(Program*);
  int (*GetProgramLogSize)(Program, size_t*);
  int (*GetProgramLog)(Program, char*);
  int (*GetPTXSize)(Program, size_t*);
  int (*GetPTX)(Program, char*);
  int (*GetCUBINSize)(Program, size_t*);
  int (*GetCUBIN)(Program, char*);
};

struct Loaded {
  void* handle = nullptr;
  Api api{};
  std::string path;
  std::string searched;  // why it failed, when handle is null
};

// Library file names, newest first (cu13 wheels ship .so.13, cu12 .so.12).
const char* const kNames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2",
                              "libnvrtc.so"};

// site-packages folders that hold an `nvidia` wheel tree: the one torch was
// loaded from (found through the shared objects already mapped, which needs
// no GIL), then sys.path when the calling thread holds the GIL.
std::vector<std::string> wheel_roots() {
  std::vector<std::string> roots;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        std::string p = info->dlpi_name ? info->dlpi_name : "";
        auto at = p.find("/torch/lib/");
        auto* out = static_cast<std::vector<std::string>*>(data);
        if (at != std::string::npos) out->push_back(p.substr(0, at));
        return 0;
      },
      &roots);
  if (Py_IsInitialized() && PyGILState_Check()) {
    PyObject* path = PySys_GetObject("path");  // borrowed
    for (Py_ssize_t i = 0; path && PyList_Check(path) && i < PyList_GET_SIZE(path); ++i) {
      PyObject* item = PyList_GET_ITEM(path, i);  // borrowed
      if (!PyUnicode_Check(item)) continue;
      const char* s = PyUnicode_AsUTF8(item);
      if (s && *s)
        roots.push_back(s);
      else
        PyErr_Clear();
    }
  }
  return roots;
}

std::vector<std::string> candidates() {
  std::vector<std::string> out;
  const Settings settings = process_settings();
  if (!settings.nvrtc.empty()) out.push_back(settings.nvrtc);
  for (const auto& root : wheel_roots()) {
    out.push_back(root + "/nvidia/cu13/lib/libnvrtc.so.13");
    out.push_back(root + "/nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
    out.push_back(root + "/nvidia/cuda_nvrtc/lib/libnvrtc.so.11.2");
  }
  std::vector<std::string> dirs;
  if (!settings.cuda_home.empty()) dirs.push_back(settings.cuda_home + "/lib64");
  dirs.push_back("/usr/local/cuda/lib64");
  for (const auto& d : dirs)
    for (const char* n : kNames) out.push_back(d + "/" + n);
  for (const char* n : kNames) out.push_back(n);  // bare name: the loader path
  return out;
}

template <typename F>
bool bind(void* h, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(h, name));
  return fn != nullptr;
}

bool bind_all(void* h, Api& a) {
  return bind(h, "nvrtcGetErrorString", a.GetErrorString) && bind(h, "nvrtcVersion", a.Version) &&
         bind(h, "nvrtcCreateProgram", a.CreateProgram) &&
         bind(h, "nvrtcCompileProgram", a.CompileProgram) &&
         bind(h, "nvrtcDestroyProgram", a.DestroyProgram) &&
         bind(h, "nvrtcGetProgramLogSize", a.GetProgramLogSize) &&
         bind(h, "nvrtcGetProgramLog", a.GetProgramLog) &&
         bind(h, "nvrtcGetPTXSize", a.GetPTXSize) && bind(h, "nvrtcGetPTX", a.GetPTX) &&
         bind(h, "nvrtcGetCUBINSize", a.GetCUBINSize) && bind(h, "nvrtcGetCUBIN", a.GetCUBIN);
}

// NVRTC opens libnvrtc-builtins.so.<version> by name when it compiles; the
// wheels' folder is not on the loader path, so outside a process that imported
// torch (which preloads it) that fails. A library already loaded under that
// name satisfies the lookup, so the one beside libnvrtc is loaded first.
void preload_builtins(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("libnvrtc-builtins.so.", 0) != 0) continue;  // skips the .alt. variant
    dlopen(e.path().c_str(), RTLD_NOW | RTLD_GLOBAL);           // NOTE: kept for the process's life
  }
}

Loaded load() {
  Loaded l;
  std::string tried;
  for (const auto& c : candidates()) {
    bool is_path = c.find('/') != std::string::npos;
    if (is_path && !std::filesystem::exists(c)) continue;
    tried += (tried.empty() ? "" : ", ") + c;
    if (is_path) preload_builtins(std::filesystem::path(c).parent_path());
    void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    if (!bind_all(h, l.api)) {
      dlclose(h);
      continue;
    }
    l.handle = h;
    l.path = c;
    return l;
  }
  l.searched =
      "NVRTC was not found (searched $TORCHLITE_NVRTC, the nvidia wheels next to torch and on "
      "sys.path, $CUDA_HOME/lib64, /usr/local/cuda/lib64 and the loader path; tried: " +
      (tried.empty() ? std::string("nothing existed") : tried) +
      "). Install it with `pip install nvidia-cuda-nvrtc` or set TORCHLITE_NVRTC to libnvrtc.so.";
  return l;
}

// Loaded once; a failed search is retried on the next call (the user may have
// installed the wheel or imported torch since).
const Loaded& nvrtc() {
  static std::mutex mu;
  static Loaded* ok = nullptr;
  static Loaded last_failure;
  std::lock_guard<std::mutex> lock(mu);
  if (ok) return *ok;
  Loaded l = load();
  if (l.handle) {
    ok = new Loaded(std::move(l));  // never freed: the library stays mapped for the process
    return *ok;
  }
  last_failure = std::move(l);
  return last_failure;
}

const Api& api() {
  const Loaded& l = nvrtc();
  if (!l.handle) TL_THROW(Unsupported) << l.searched;
  return l.api;
}

std::string program_log(const Api& a, Program p) {
  size_t n = 0;
  if (a.GetProgramLogSize(p, &n) != 0 || n == 0) return {};
  std::string log(n, '\0');
  if (a.GetProgramLog(p, log.data()) != 0) return {};
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

std::string numbered(const std::string& src) {
  std::string out;
  int line = 1;
  size_t pos = 0;
  while (pos < src.size()) {
    size_t end = src.find('\n', pos);
    if (end == std::string::npos) end = src.size();
    std::string num = std::to_string(line++);
    out += std::string(num.size() < 4 ? 4 - num.size() : 0, ' ') + num + "  " +
           src.substr(pos, end - pos) + "\n";
    pos = end + 1;
  }
  return out;
}

// Destroys the program on every path out of nvrtc_compile.
struct ProgramGuard {
  const Api& a;
  Program p = nullptr;
  ~ProgramGuard() {
    if (p) a.DestroyProgram(&p);
  }
};

}  // namespace

bool nvrtc_available(std::string* why) {
  const Loaded& l = nvrtc();
  if (!l.handle && why) *why = l.searched;
  return l.handle != nullptr;
}

NvrtcVersion nvrtc_version() {
  NvrtcVersion v;
  api().Version(&v.major, &v.minor);
  return v;
}

std::string nvrtc_compile(const std::string& source, const std::string& kernel_name,
                          const std::string& arch) {
  return nvrtc_compile(source, kernel_name, arch, {});
}

std::string nvrtc_compile(const std::string& source, const std::string& kernel_name,
                          const std::string& arch, const std::vector<std::string>& extra_options) {
  const Api& a = api();
  bool ptx = arch.rfind("compute_", 0) == 0;
  TL_CHECK(ptx || arch.rfind("sm_", 0) == 0) << "nvrtc_compile: bad architecture '" << arch << "'";
  ProgramGuard g{a};
  std::string file = kernel_name + ".cu";
  int rc = a.CreateProgram(&g.p, source.c_str(), file.c_str(), 0, nullptr, nullptr);
  TL_CHECK(rc == 0) << "nvrtcCreateProgram failed for " << kernel_name << ": "
                    << a.GetErrorString(rc);
  std::string arch_opt = "--gpu-architecture=" + arch;
  // NOTE: no --use_fast_math: it flushes denormals and approximates division and
  // transcendentals, and results must match eager torch.
  std::vector<const char*> opts = {arch_opt.c_str(), "--std=c++17", "-default-device"};
  for (const auto& o : extra_options) opts.push_back(o.c_str());
  rc = a.CompileProgram(g.p, static_cast<int>(opts.size()), opts.data());
  if (rc != 0) {
    TL_THROW(Value) << "NVRTC failed to compile kernel " << kernel_name << " for " << arch << " ("
                    << a.GetErrorString(rc) << "):\n"
                    << program_log(a, g.p) << "\n--- source ---\n"
                    << numbered(source);
  }
  size_t n = 0;
  rc = ptx ? a.GetPTXSize(g.p, &n) : a.GetCUBINSize(g.p, &n);
  TL_CHECK(rc == 0) << "NVRTC: no image for " << kernel_name << ": " << a.GetErrorString(rc);
  std::string image(n, '\0');
  rc = ptx ? a.GetPTX(g.p, image.data()) : a.GetCUBIN(g.p, image.data());
  TL_CHECK(rc == 0) << "NVRTC: reading the image of " << kernel_name << ": "
                    << a.GetErrorString(rc);
  if (ptx && !image.empty() && image.back() == '\0') image.pop_back();
  return image;
}

}  // namespace tl::runtime::cuda
