#include "runtime/cpu/backend.h"

#include "core/counters.h"
#include "core/errors.h"
#include "core/py_import.h"
#include "runtime/cpu/jit.h"
#include "runtime/cpu/parallel.h"

namespace tl::runtime::cpu {
namespace {

class CpuBackend : public KernelBackend {
 public:
  CpuBackend() : get_num_threads_(import_attr("torch", "get_num_threads")) {}

  void compile(const std::vector<const ir::Kernel*>& kernels) override {
    compiled_ = compile_kernels(kernels);
  }

  std::unique_ptr<KernelRun> start_run() override { return std::make_unique<Run>(*this); }

 private:
  class Run : public KernelRun {
   public:
    explicit Run(const CpuBackend& b) : b_(b) {}
    bool launch(size_t k, std::vector<char*>& bufs, int64_t outer, int64_t red) override {
      KernelFn fn = b_.compiled_.fns[k];
      const std::vector<int64_t>& dims = b_.compiled_.dims[k];
      // NOTE: the kernel only reads its dims array (kernel_emitter.h).
      if (!dims.empty()) bufs.push_back(reinterpret_cast<char*>(const_cast<int64_t*>(dims.data())));
      if (outer * red < kSerialElements) {
        fn(0, outer, bufs.data());
        return true;
      }
      if (num_threads_ < 0) read_threads();  // once per run, and only when some kernel is big
      // NOTE: the GIL is released while a large kernel runs, as torch's ops do.
      Py_BEGIN_ALLOW_THREADS parallel_run(fn, outer, red, bufs.data(), num_threads_);
      Py_END_ALLOW_THREADS return true;
    }

    bool launch_group(const std::vector<size_t>& ks, std::vector<std::vector<char*>>& bufs,
                      const std::vector<int64_t>& outer) override {
      counters().kernel_launches++;
      std::vector<GroupPiece> members;
      int64_t work = 0;
      for (size_t i = 0; i < ks.size(); ++i) {
        const std::vector<int64_t>& dims = b_.compiled_.dims[ks[i]];
        if (!dims.empty())
          bufs[i].push_back(reinterpret_cast<char*>(const_cast<int64_t*>(dims.data())));
        members.push_back({b_.compiled_.fns[ks[i]], bufs[i].data(), 0, outer[i]});
        work += outer[i];
      }
      if (work < kSerialElements) {
        parallel_run_group(members, 1);
        return true;
      }
      if (num_threads_ < 0) read_threads();
      Py_BEGIN_ALLOW_THREADS parallel_run_group(members, num_threads_);
      Py_END_ALLOW_THREADS return true;
    }

   private:
    void read_threads() {
      PyRef n = PyRef::steal(PyObject_CallNoArgs(b_.get_num_threads_.get()));
      num_threads_ = n ? static_cast<int>(PyLong_AsLong(n.get())) : 1;
      if (PyErr_Occurred()) PyErr_Clear(), num_threads_ = 1;
    }

    const CpuBackend& b_;
    int num_threads_ = -1;
  };

  PyRef get_num_threads_;
  CompiledKernels compiled_;  // its owner keeps the code mapped
};

}  // namespace

std::unique_ptr<KernelBackend> make_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace tl::runtime::cpu
