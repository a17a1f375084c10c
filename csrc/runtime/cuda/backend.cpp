#include "runtime/cuda/backend.h"

#include <algorithm>
#include <optional>

#include "core/dump_dir.h"
#include "core/errors.h"
#include "core/py_import.h"
#include "runtime/cuda/compile.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda_autotune.h"

namespace tl::runtime::cuda {
namespace {

class CudaBackend : public KernelBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  void compile(const std::vector<const ir::Kernel*>& kernels) override {
    loaded_ = compile_kernels(kernels, device_);
    for (const ir::Kernel* k : kernels) {
      pointwise_.push_back(k->reduction_axes == 0);
      n_inputs_.push_back(k->inputs.size());
    }
    // NOTE: the raw stream, not torch.cuda.current_stream(): no Stream object per call.
    get_stream_ = import_attr("torch._C", "_cuda_getCurrentRawStream");
  }

  std::unique_ptr<KernelRun> start_run() override { return std::make_unique<Run>(*this); }

  void enable_autotune(std::string trace_dir) override {
    autotune_ = true;
    grids_.assign(loaded_.size(), 0);
    tuned_.assign(loaded_.size(), 0);
    tune_trace_dir_ = std::move(trace_dir);
    try {
      PyRef name = PyRef::steal(
          PyObject_CallFunction(import_attr("torch.cuda", "get_device_name").get(), "i", device_));
      const char* c = name ? PyUnicode_AsUTF8(name.get()) : nullptr;
      gpu_name_ = c ? c : "";
    } catch (const PythonError&) {
    }
    PyErr_Clear();
    DeviceInfo d = device_info(device_);
    gpu_name_ += " sm_" + std::to_string(d.sm_major) + std::to_string(d.sm_minor) + " " +
                 std::to_string(d.multiprocessors) + " SMs";
  }

 private:
  class Run : public KernelRun {
   public:
    explicit Run(CudaBackend& b) : b_(b) {}
    // Launches on torch's current stream of the graph's device (asynchronous, as
    // torch's own ops).
    bool launch(size_t idx, std::vector<char*>& bufs, int64_t outer, int64_t red) override {
      const LoadedKernel& k = b_.loaded_[idx];
      if (k.grid == 0) return true;
      try {
        if (!context_) {
          PyRef index = PyRef::steal(PyLong_FromLong(b_.device_));
          PyRef stream = index
                             ? PyRef::steal(PyObject_CallOneArg(b_.get_stream_.get(), index.get()))
                             : PyRef();
          if (!stream) return false;
          stream_ = PyLong_AsVoidPtr(stream.get());
          if (PyErr_Occurred()) return false;
          context_.emplace(b_.device_);
        }
        void* fn = k.vector_fn;
        for (int p : k.aligned_params)
          if (reinterpret_cast<uintptr_t>(bufs[p]) % 16 != 0) fn = nullptr;
        args_.resize(bufs.size());
        for (size_t i = 0; i < bufs.size(); ++i) args_[i] = &bufs[i];
        if (b_.autotune_ && !b_.tuned_[idx])
          b_.tune_grid(idx, outer, fn ? fn : k.fn, stream_, args_.data(), bufs);
        unsigned grid = b_.autotune_ && b_.grids_[idx] ? b_.grids_[idx] : k.grid;
        cuda::launch(fn ? fn : k.fn, grid, k.block, k.shared_bytes, stream_, args_.data(), k.name,
                     k.dependent_launch);
      } catch (const Error& e) {
        set_python_error(e);  // reported like a failing torch op, naming the kernel's node
        return false;
      }
      return true;
    }

   private:
    CudaBackend& b_;
    void* stream_ = nullptr;
    std::optional<ContextScope> context_;  // the graph's device, for the whole run
    std::vector<void*> args_;
  };

  // Every generated kernel is a grid-stride loop (points, rows or tiles), so any grid is
  // correct; trial launches change nothing as long as the kernel writes only buffers it does not
  // read (fresh outputs: a kernel storing into its own input, passes/store_in_place.h, is not
  // tried). Reductions only try fewer blocks (more rows a block) than the code generator's one
  // a row or tile. A failure keeps the code generator's grid.
  void tune_grid(size_t idx, int64_t outer, void* fn, void* stream, void** args,
                 const std::vector<char*>& bufs) {
    tuned_[idx] = 1;
    const LoadedKernel& k = loaded_[idx];
    if (k.tune_key.empty()) return;
    std::string line = "kernel " + k.name + ": ";
    const size_t n_in = std::min(n_inputs_[idx], bufs.size());
    for (size_t o = n_in; o < bufs.size(); ++o)
      if (std::find(bufs.begin(), bufs.begin() + n_in, bufs[o]) != bufs.begin() + n_in) {
        note_tuning(line + "not tuned (writes a buffer it reads)");
        return;
      }
    const int64_t full = (outer + k.block - 1) / k.block;  // one point a thread
    const unsigned max_grid =
        pointwise_[idx] ? static_cast<unsigned>(std::clamp<int64_t>(full, 1, 1 << 30)) : k.grid;
    try {
      GridChoice c = choose_grid(
          k.tune_key, gpu_name_, k.grid, max_grid, launch_timer([&](unsigned g) {
            cuda::launch(fn, g, k.block, k.shared_bytes, stream, args, k.name, k.dependent_launch);
          }));
      grids_[idx] = c.grid;
      line += c.report;
    } catch (const PythonError&) {
      if (fatal_python_error_pending()) throw;
      PyErr_Clear();
      line += "not tuned (a timing call failed)";
    } catch (const Error& e) {
      line += std::string("not tuned: ") + e.what();
    }
    note_tuning(line);
  }

  void note_tuning(const std::string& line) {
    if (tune_trace_dir_.empty()) return;
    tune_report_ += line + "\n";
    write_dump(tune_trace_dir_ + "autotune.txt", tune_report_);
  }

  int device_;
  std::vector<LoadedKernel> loaded_;
  std::vector<char> pointwise_;   // per kernel: no reduction axes
  std::vector<size_t> n_inputs_;  // per kernel: its first n buffers are inputs
  PyRef get_stream_;
  // autotune: per kernel, the grid chosen (0: the code generator's), and whether it was tried.
  bool autotune_ = false;
  std::vector<unsigned> grids_;
  std::vector<char> tuned_;
  std::string tune_trace_dir_, tune_report_, gpu_name_;
};

}  // namespace

std::unique_ptr<KernelBackend> make_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

}  // namespace tl::runtime::cuda
