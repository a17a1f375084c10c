#include "runtime/cuda/backend.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/counters.h"
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

  void enable_autotune(std::string trace_dir,
                       const std::vector<const ir::Kernel*>& kernels) override {
    autotune_ = true;
    grids_.assign(loaded_.size(), 0);
    chosen_.assign(loaded_.size(), 0);
    scalar_.assign(loaded_.size(), 0);
    tuned_.assign(loaded_.size(), 0);
    variants_.assign(loaded_.size(), {});
    tune_trace_dir_ = std::move(trace_dir);
    build_block_variants(kernels);
    gpu_name_ = gpu_identity(device_);
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
        if (!ensure_context()) return false;
        if (b_.autotune_ && !b_.tuned_[idx]) b_.tune(idx, outer, stream_, bufs);
        const LoadedKernel& l = b_.autotune_ ? b_.build(idx, b_.chosen_[idx]) : k;
        unsigned grid = b_.autotune_ && b_.grids_[idx] ? b_.grids_[idx] : l.grid;
        void* fn = b_.autotune_ && b_.scalar_[idx] ? l.fn : entry(l, bufs);
        cuda::launch(fn, grid, l.block, l.shared_bytes, stream_, launch_args(l, bufs, args_),
                     l.name, l.dependent_launch);
      } catch (const Error& e) {
        set_python_error(e);  // reported like a failing torch op, naming the kernel's node
        return false;
      }
      return true;
    }

    // Members sharing one code with a group entry go in launches of up to group.members
    // kernels, each a table passed by value; any other member is launched alone.
    bool launch_group(const std::vector<size_t>& ks, std::vector<std::vector<char*>>& bufs,
                      const std::vector<int64_t>& outer) override {
      std::vector<char> done(ks.size(), 0);
      for (size_t i = 0; i < ks.size(); ++i) {
        if (done[i]) continue;
        const LoadedKernel& head = b_.loaded_[ks[i]];
        std::vector<size_t> members;
        for (size_t j = i; j < ks.size(); ++j)
          if (!done[j] && head.group_fn && b_.loaded_[ks[j]].group_fn == head.group_fn &&
              bufs[j].size() == static_cast<size_t>(head.group.buffers))
            members.push_back(j), done[j] = 1;
        counters().kernel_launches++;
        if (members.size() < 2) {  // members[0] is i when there is one
          done[i] = 1;
          if (!launch(ks[i], bufs[i], outer[i], 1)) return false;
          continue;
        }
        for (size_t from = 0; from < members.size(); from += head.group.members) {
          size_t to = std::min(members.size(), from + static_cast<size_t>(head.group.members));
          if (from > 0) counters().kernel_launches++;
          if (!launch_table(head, ks, bufs, outer, members, from, to)) return false;
        }
      }
      return true;
    }

   private:
    bool launch_table(const LoadedKernel& head, const std::vector<size_t>& ks,
                      std::vector<std::vector<char*>>& bufs, const std::vector<int64_t>& outer,
                      const std::vector<size_t>& members, size_t from, size_t to) {
      const auto& g = head.group;
      table_.assign(static_cast<size_t>(g.bytes), 0);
      unsigned char* t = table_.data();
      uint64_t block = 0;
      for (size_t m = from; m < to; ++m) {
        const size_t j = members[m], slot = m - from;
        std::memcpy(t + slot * g.buffers * 8, bufs[j].data(), g.buffers * sizeof(char*));
        const std::vector<unsigned char>& dims = b_.loaded_[ks[j]].dims;
        if (!dims.empty())
          std::memcpy(t + g.dims_at + slot * dims.size(), dims.data(), dims.size());
        const uint32_t first = static_cast<uint32_t>(block);
        std::memcpy(t + g.first_at + slot * 4, &first, 4);
        int64_t blocks = (outer[j] + g.points_per_block - 1) / g.points_per_block;
        block += static_cast<uint64_t>(std::clamp<int64_t>(blocks, 1, g.max_blocks));
      }
      if (block > 0x7fffffffu) {  // NOTE: far past any optimizer's size: launched one by one
        for (size_t m = from; m < to; ++m)
          if (!launch(ks[members[m]], bufs[members[m]], outer[members[m]], 1)) return false;
        return true;
      }
      const uint32_t total = static_cast<uint32_t>(block);
      for (int slot = static_cast<int>(to - from); slot <= g.members; ++slot)
        std::memcpy(t + g.first_at + slot * 4, &total, 4);
      try {
        if (!ensure_context()) return false;
        void* arg = t;
        cuda::launch(head.group_fn, total, head.block, 0, stream_, &arg, head.name,
                     head.dependent_launch);
      } catch (const Error& e) {
        set_python_error(e);
        return false;
      }
      return true;
    }

    bool ensure_context() {
      if (context_) return true;
      PyRef index = PyRef::steal(PyLong_FromLong(b_.device_));
      PyRef stream =
          index ? PyRef::steal(PyObject_CallOneArg(b_.get_stream_.get(), index.get())) : PyRef();
      if (!stream) return false;
      stream_ = PyLong_AsVoidPtr(stream.get());
      if (PyErr_Occurred()) return false;
      context_.emplace(b_.device_);
      return true;
    }

    CudaBackend& b_;
    std::vector<unsigned char> table_;
    void* stream_ = nullptr;
    std::optional<ContextScope> context_;  // the graph's device, for the whole run
    std::vector<void*> args_;
  };

  // The kernel parameters of one launch of `k` in `args`: the buffers' pointers, then its dims
  // (runtime sizes: passed by value, so a launch queued or recorded keeps its own copy).
  static void** launch_args(const LoadedKernel& k, std::vector<char*>& bufs,
                            std::vector<void*>& args) {
    args.resize(bufs.size());
    for (size_t i = 0; i < bufs.size(); ++i) args[i] = &bufs[i];
    if (!k.dims.empty()) args.push_back(const_cast<unsigned char*>(k.dims.data()));
    return args.data();
  }

  // The vector entry where every packed pointer is 16-byte aligned, else the scalar one.
  static void* entry(const LoadedKernel& k, const std::vector<char*>& bufs) {
    if (!k.vector_fn) return k.fn;
    for (int p : k.aligned_params)
      if (reinterpret_cast<uintptr_t>(bufs[p]) % 16 != 0) return k.fn;
    return k.vector_fn;
  }

  // Build `v` of kernel `idx`: 0 the code generator's, else variants_[idx][v - 1].
  const LoadedKernel& build(size_t idx, size_t v) const {
    return v == 0 ? loaded_[idx] : variants_[idx][v - 1];
  }

  // Kernels again at the other block sizes their text can take (CudaKernel::other_blocks:
  // pointwise kernels' threads a block; reductions' rows a block, threads a row or a tile's
  // slices a row), compiled together on the compile pool per block size (disk cache first). A
  // failure leaves the one build.
  void build_block_variants(const std::vector<const ir::Kernel*>& kernels) {
    std::vector<int> blocks;
    for (size_t i = 0; i < kernels.size() && i < loaded_.size(); ++i)
      if (loaded_[i].grid > 0 && !loaded_[i].tune_key.empty())
        for (int b : loaded_[i].other_blocks)
          if (std::find(blocks.begin(), blocks.end(), b) == blocks.end()) blocks.push_back(b);
    std::sort(blocks.begin(), blocks.end());
    for (int block : blocks) {
      std::vector<const ir::Kernel*> these;
      std::vector<size_t> index;
      for (size_t i = 0; i < kernels.size() && i < loaded_.size(); ++i) {
        const LoadedKernel& k = loaded_[i];
        if (k.grid > 0 && !k.tune_key.empty() &&
            std::find(k.other_blocks.begin(), k.other_blocks.end(), block) != k.other_blocks.end())
          these.push_back(kernels[i]), index.push_back(i);
      }
      std::vector<LoadedKernel> built;
      try {
        built = compile_block_variants(these, device_, block);
      } catch (const Error& e) {
        note_tuning("block " + std::to_string(block) + " builds failed: " + e.what());
        continue;
      }
      for (size_t j = 0; j < built.size() && j < index.size(); ++j)
        if (built[j].block != loaded_[index[j]].block)
          variants_[index[j]].push_back(std::move(built[j]));
    }
  }

  // One launch configuration tried: a build (0: the code generator's) and its entry.
  struct Trial {
    size_t build;
    bool scalar;  // the scalar entry of a build whose vector entry these buffers could take
  };

  // Every generated kernel is a grid-stride loop (points, rows or tiles), so any grid is
  // correct; trial launches change nothing as long as the kernel writes only buffers it does not
  // read (fresh outputs: a kernel storing into its own input, passes/store_in_place.h, is not
  // tried). Reductions only try fewer blocks (more rows a block) than their build's one a row
  // or tile; every kernel also tries its other builds' block sizes, and one with a 16-byte
  // vector entry its scalar entry (one element a step) at the code generator's block. A
  // failure keeps the code generator's launch.
  void tune(size_t idx, int64_t outer, void* stream, std::vector<char*>& bufs) {
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
    std::vector<Trial> trials;
    for (size_t v = 0; v <= variants_[idx].size(); ++v) trials.push_back({v, false});
    if (entry(k, bufs) != k.fn) trials.push_back({0, true});
    std::vector<LaunchVariant> variants;
    for (const Trial& t : trials) {
      const LoadedKernel& b = build(idx, t.build);
      const int64_t full = (outer + b.block - 1) / b.block;  // one point a thread
      const unsigned max_grid =
          pointwise_[idx] ? static_cast<unsigned>(std::clamp<int64_t>(full, 1, 1 << 30)) : b.grid;
      std::string label = trials.size() == 1 ? "" : "block " + std::to_string(b.block);
      if (t.scalar) label += " scalar";
      variants.push_back({label, b.grid, max_grid});
    }
    try {
      LaunchChoice c = choose_launch(k.tune_key, gpu_name_, variants, [&](size_t v, unsigned g) {
        const LoadedKernel& b = build(idx, trials[v].build);
        void* fn = trials[v].scalar ? b.fn : entry(b, bufs);
        std::vector<void*> arg_list;
        void** args = launch_args(b, bufs, arg_list);
        return launch_timer([&](unsigned grid) {
          cuda::launch(fn, grid, b.block, b.shared_bytes, stream, args, b.name, b.dependent_launch);
        })(g);
      });
      chosen_[idx] = trials[c.variant].build;
      scalar_[idx] = trials[c.variant].scalar;
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
  // autotune: per kernel, the build, entry and grid chosen (0: the code generator's), its
  // other builds, and whether it was tried.
  bool autotune_ = false;
  std::vector<unsigned> grids_;
  std::vector<size_t> chosen_;
  std::vector<char> scalar_;  // launch the chosen build's scalar entry
  std::vector<std::vector<LoadedKernel>> variants_;
  std::vector<char> tuned_;
  std::string tune_trace_dir_, tune_report_, gpu_name_;
};

}  // namespace

std::unique_ptr<KernelBackend> make_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

}  // namespace tl::runtime::cuda
