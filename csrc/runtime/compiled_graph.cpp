#include "runtime/compiled_graph.h"

#include <optional>

#include "core/errors.h"
#include "runtime/node_call.h"
#ifdef TORCHLITE_HAVE_LLVM
#include "runtime/cpu/jit.h"
#include "runtime/cpu/parallel.h"
#endif

namespace tl::runtime {

namespace {
using KernelPtr = void (*)(int64_t begin, int64_t end, char* const* bufs);

// The positional arguments of torch.empty_strided for one kernel output.
struct Alloc {
  PyRef sizes, strides, dtype, device;
};

PyRef int_tuple(const std::vector<int64_t>& v) {
  PyRef t = PyRef::steal(PyTuple_New(v.size()));
  if (!t) throw PythonError();
  for (size_t i = 0; i < v.size(); ++i) {
    PyObject* item = PyLong_FromLongLong(v[i]);
    if (!item) throw PythonError();
    PyTuple_SET_ITEM(t.get(), i, item);
  }
  return t;
}

PyRef torch_attr(const char* name) {
  PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
  PyRef attr = torch ? PyRef::steal(PyObject_GetAttrString(torch.get(), name)) : PyRef();
  if (!attr) throw PythonError();
  return attr;
}

const ir::TensorMeta& cpu_meta(const ir::Node* n, const std::string& kernel) {
  TL_CHECK(n && n->meta) << "kernel " << kernel << " reads or writes "
                         << (n ? n->name : "a null node") << ", which has no tensor metadata";
  PyObject* dev = n->meta->device.get();
  PyRef type = dev ? PyRef::steal(PyObject_GetAttrString(dev, "type")) : PyRef();
  const char* s = type ? PyUnicode_AsUTF8(type.get()) : nullptr;
  PyErr_Clear();
  if (!s || std::string(s) != "cpu")
    TL_THROW(Value) << "the CPU kernel " << kernel << " got " << n->name
                    << " on a device other than the CPU";
  return *n->meta;
}
}  // namespace

struct CompiledGraph::Step {
  std::optional<NodeCall> call;  // an extern node, or a kernel:
  int kernel = -1;
  KernelPtr fn = nullptr;
  std::vector<int> in_slots, out_slots;
  std::vector<Alloc> allocs;
  int64_t outer = 1, red = 1;
  const ir::Node* node = nullptr;  // reported when the step fails
  std::vector<int> release_after;  // slots whose last use is this step
};

CompiledGraph::CompiledGraph(std::shared_ptr<const ir::Graph> graph, passes::Partition partition)
    : graph_(std::move(graph)), partition_(std::move(partition)) {
  SlotMap slots;
  for (auto& n : graph_->nodes())
    if (n->op == ir::OpKind::Placeholder) slots[n.get()] = static_cast<int>(n_inputs_++);
  n_values_ = n_inputs_;
  auto slot_of = [&](const ir::Node* n, const std::string& kernel) {
    auto it = slots.find(n);
    TL_CHECK(it != slots.end()) << "kernel " << kernel << " reads " << (n ? n->name : "null")
                                << " before any step produces it";
    return it->second;
  };
  for (auto& item : partition_.order) {
    Step s;
    int idx = static_cast<int>(steps_.size());
    if (item.extern_node) {
      s.call.emplace(*item.extern_node, slots);
      s.node = item.extern_node;
      changes_grad_mode_ |= s.call->changes_grad_mode();
      for (int slot : s.call->used_slots()) values_.use(slot, idx);
      s.out_slots.push_back(static_cast<int>(n_values_++));
      slots[item.extern_node] = s.out_slots.back();
    } else {
      TL_CHECK(item.kernel >= 0 && item.kernel < static_cast<int>(partition_.kernels.size()))
          << "plan item names kernel " << item.kernel;
      const passes::FusedKernel& fk = partition_.kernels[item.kernel];
      const ir::Kernel& k = fk.kernel;
      TL_CHECK(fk.inputs.size() == k.inputs.size() && fk.outputs.size() == k.outputs.size())
          << "kernel " << k.name << ": graph values do not match its buffers";
      s.kernel = item.kernel;
      for (auto* in : fk.inputs) {
        cpu_meta(in, k.name);
        s.in_slots.push_back(slot_of(in, k.name));
        values_.use(s.in_slots.back(), idx);
      }
      for (auto* out : fk.outputs) {
        const ir::TensorMeta& m = cpu_meta(out, k.name);
        s.allocs.push_back({int_tuple(m.sizes), int_tuple(m.strides), m.dtype, m.device});
        s.out_slots.push_back(static_cast<int>(n_values_++));
        slots[out] = s.out_slots.back();
      }
      s.node = fk.outputs.empty() ? nullptr : fk.outputs[0];
      for (size_t d = 0; d < k.shape.size(); ++d)
        (d + k.reduction_axes < k.shape.size() ? s.outer : s.red) *= k.shape[d];
    }
    steps_.push_back(std::move(s));
  }
  values_.set_outputs(*graph_, [&](const ir::Node* n) { return slot_of(n, "output"); },
                      static_cast<int>(steps_.size()));
  std::vector<std::vector<int>> produced;
  for (auto& s : steps_) produced.push_back(s.out_slots);
  auto release = values_.release_lists(produced, static_cast<int>(n_inputs_));
  for (size_t i = 0; i < steps_.size(); ++i) steps_[i].release_after = std::move(release[i]);

  if (partition_.kernels.empty()) return;
#ifdef TORCHLITE_HAVE_LLVM
  std::vector<const ir::Kernel*> kernels;
  for (auto& fk : partition_.kernels) kernels.push_back(&fk.kernel);
  std::vector<cpu::KernelFn> fns = cpu::compile_kernels(kernels);
  for (auto& s : steps_)
    if (s.kernel >= 0) s.fn = fns[s.kernel];
#else
  TL_THROW(NotImplemented) << "this torchlite build has no LLVM, so it cannot compile CPU kernels";
#endif
  empty_strided_ = torch_attr("empty_strided");
  get_num_threads_ = torch_attr("get_num_threads");
  data_ptr_name_ = PyRef::steal(PyUnicode_InternFromString("data_ptr"));
  alloc_kwnames_ = PyRef::steal(Py_BuildValue("(ss)", "dtype", "device"));
  if (!data_ptr_name_ || !alloc_kwnames_) throw PythonError();
}

CompiledGraph::~CompiledGraph() = default;

// Allocates the outputs, reads every data pointer once, runs the kernel.
// Returns false with the Python error set.
bool CompiledGraph::run_kernel(const Step& s, std::vector<PyRef>& values, int& num_threads) {
  std::vector<char*> bufs;
  bufs.reserve(s.in_slots.size() + s.out_slots.size());
  auto data_ptr = [&](PyObject* t) {
    PyObject* argv[2] = {nullptr, t};
    PyRef p = PyRef::steal(PyObject_VectorcallMethod(
        data_ptr_name_.get(), argv + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
    bufs.push_back(p ? static_cast<char*>(PyLong_AsVoidPtr(p.get())) : nullptr);
    return p && !PyErr_Occurred();
  };
  for (int slot : s.in_slots)
    if (!data_ptr(values[slot].get())) return false;
  for (size_t i = 0; i < s.out_slots.size(); ++i) {
    const Alloc& a = s.allocs[i];
    PyObject* argv[5] = {nullptr, a.sizes.get(), a.strides.get(), a.dtype.get(), a.device.get()};
    PyRef out = PyRef::steal(PyObject_Vectorcall(
        empty_strided_.get(), argv + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, alloc_kwnames_.get()));
    if (!out || !data_ptr(out.get())) return false;
    values[s.out_slots[i]] = std::move(out);
  }
  if (s.outer == 0) return true;
#ifdef TORCHLITE_HAVE_LLVM
  if (s.outer * s.red < cpu::kSerialElements) {
    s.fn(0, s.outer, bufs.data());
    return true;
  }
  if (num_threads < 0) {  // read once per run, and only when some kernel is big
    PyRef n = PyRef::steal(PyObject_CallNoArgs(get_num_threads_.get()));
    num_threads = n ? static_cast<int>(PyLong_AsLong(n.get())) : 1;
    if (PyErr_Occurred()) PyErr_Clear(), num_threads = 1;
  }
  // NOTE: the GIL is released while a large kernel runs, as torch's ops do.
  Py_BEGIN_ALLOW_THREADS
  cpu::parallel_run(s.fn, s.outer, s.red, bufs.data(), num_threads);
  Py_END_ALLOW_THREADS
#endif
  return true;
}

std::vector<PyRef> CompiledGraph::run(PyObject* const* inputs, size_t n_inputs) {
  TL_CHECK(n_inputs == n_inputs_) << "graph expects " << n_inputs_ << " inputs, got " << n_inputs;
  failed_node_ = nullptr;
  std::vector<PyRef> values(n_values_);
  for (size_t i = 0; i < n_inputs; ++i) values[i] = PyRef::borrow(inputs[i]);
  int grad_before = changes_grad_mode_ ? grad_enabled() : -1;
  int num_threads = -1;
  for (auto& s : steps_) {
    bool ok = true;
    if (s.call) {
      PyObject* result = s.call->call(values);
      if (result) values[s.out_slots[0]] = PyRef::steal(result);
      ok = result != nullptr;
    } else {
      ok = run_kernel(s, values, num_threads);
    }
    if (!ok) {
      failed_node_ = s.node;
      restore_grad_mode(grad_before);
      throw PythonError();
    }
    for (int slot : s.release_after) values[slot] = PyRef();
  }
  return values_.outputs(values);
}

}  // namespace tl::runtime
