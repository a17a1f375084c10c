#include "runtime/compiled_graph.h"

#include <optional>
#include <unordered_map>

#include "core/counters.h"
#include "core/errors.h"
#include "core/py_import.h"
#include "core/torch_state.h"
#include "ir/dtype.h"
#include "ir/effects.h"
#include "runtime/buffer_pool.h"
#include "runtime/compiled_step.h"
#include "runtime/cuda/driver.h"

namespace tl::runtime {

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

namespace {
PyRef torch_attr(const char* name) { return import_attr("torch", name); }

// torch._C._dynamo.guards._empty_strided_{cpu,cuda}(sizes, strides, dtype):
// what Inductor's generated code allocates with, without torch.empty_strided's
// argument parsing (measured 0.4 against 0.9 us on the CPU). A private torch
// API, so only a fast path: null (error cleared) when this torch has none.
// The CUDA one allocates on the current device.
PyRef private_empty_strided(PyObject* torch_c, bool cuda) {
  PyRef dynamo = PyRef::steal(PyObject_GetAttrString(torch_c, "_dynamo"));
  PyRef guards = dynamo ? PyRef::steal(PyObject_GetAttrString(dynamo.get(), "guards")) : PyRef();
  const char* name = cuda ? "_empty_strided_cuda" : "_empty_strided_cpu";
  PyRef fn = guards ? PyRef::steal(PyObject_GetAttrString(guards.get(), name)) : PyRef();
  if (!fn || !PyCallable_Check(fn.get())) {
    PyErr_Clear();
    return {};
  }
  return fn;
}

// "cpu"/"cuda"/... and the index (-1 for none) of a torch.device. Borrows `dev`.
// NOTE: asked for every node of every compile (kernel_device, on_device, alloc_of): two
// attribute reads and a string each, ~5% of a new size's instance (transformers GPT-2, perf).
// A graph's nodes share a few device objects, and a torch.device is immutable, so the answer
// is kept per object; the cache holds a reference to each key (an address is not reused while
// it is kept) and is emptied past a bound (tensor.device makes a new object per read).
// Called under the GIL only. Never destroyed: its references must not be dropped after the
// interpreter is finalized (static destructors run after it).
std::pair<std::string, int> parse_device(PyObject* dev) {
  static auto& known =
      *new std::unordered_map<PyObject*, std::pair<PyRef, std::pair<std::string, int>>>();
  if (dev) {
    auto it = known.find(dev);
    if (it != known.end()) return it->second.second;
  }
  PyRef type = dev ? PyRef::steal(PyObject_GetAttrString(dev, "type")) : PyRef();
  PyRef index = type ? PyRef::steal(PyObject_GetAttrString(dev, "index")) : PyRef();
  const char* s = type ? PyUnicode_AsUTF8(type.get()) : nullptr;
  if (!s || !index) throw PythonError();
  int i = index.get() == Py_None ? -1 : static_cast<int>(PyLong_AsLong(index.get()));
  if (PyErr_Occurred()) throw PythonError();
  constexpr size_t kMaxKnown = 64;
  if (known.size() >= kMaxKnown) known.clear();
  known.emplace(dev, std::make_pair(PyRef::borrow(dev), std::make_pair(std::string(s), i)));
  return {s, i};
}

}  // namespace

Alloc alloc_of(const ir::TensorMeta& m) {
  Alloc a{int_tuple(m.sizes), int_tuple(m.strides), m.dtype, m.device};
  auto type = ir::scalar_type_of(m.dtype.get());
  if (type && m.device && parse_device(m.device.get()).first == "cpu" &&
      strided_extent_bytes(m.sizes, m.strides, *type) >= kMinPooledBytes) {
    a.pooled = true;
    a.size_list = m.sizes;
    a.stride_list = m.strides;
    a.type = *type;
  }
  return a;
}

namespace {
// torch.cuda.current_device(): what an index-less "cuda" device means.
int current_cuda_device() {
  PyRef cuda = torch_attr("cuda");
  PyRef n = PyRef::steal(PyObject_CallMethod(cuda.get(), "current_device", nullptr));
  if (!n) throw PythonError();
  int i = static_cast<int>(PyLong_AsLong(n.get()));
  if (PyErr_Occurred()) throw PythonError();
  return i;
}

// The device of a tensor-valued node; nullopt for devices without kernels.
std::optional<KernelDevice> device_of(const ir::TensorMeta& m) {
  auto [type, index] = parse_device(m.device.get());
  if (type == "cpu") return KernelDevice{};
  if (type == "cuda") return KernelDevice{true, index < 0 ? current_cuda_device() : index};
  return std::nullopt;
}

bool same(const KernelDevice& a, const KernelDevice& b) {
  return a.cuda == b.cuda && a.index == b.index;
}

const ir::TensorMeta& kernel_meta(const ir::Node* n, const std::string& kernel,
                                  std::optional<KernelDevice>& device) {
  TL_CHECK(n && n->meta) << "kernel " << kernel << " reads or writes "
                         << (n ? n->name : "a null node") << ", which has no tensor metadata";
  std::optional<KernelDevice> d = device_of(*n->meta);
  if (!d || (device && !same(*d, *device)))
    TL_THROW(Value) << "kernel " << kernel << " got " << n->name << " on " << n->meta->str()
                    << " on a device other than its other tensors' (or one "
                    << "without a kernel back end)";
  device = d;
  return *n->meta;
}
}  // namespace

std::optional<KernelDevice> kernel_device(const ir::Graph& graph) {
  // NOTE: a graph on a CUDA device that also makes CPU tensors (timm's
  // edgenext builds a mask with torch.zeros(shape) and moves it with .to())
  // runs its kernels on the CUDA device; the CPU values stay extern nodes
  // (passes/partition.h). Before, any second device sent the whole graph op
  // by op.
  std::optional<KernelDevice> cuda;
  bool cpu = false, other = false;
  for (auto& n : graph.nodes()) {
    if (!n->meta) continue;
    std::optional<KernelDevice> d = device_of(*n->meta);
    if (!d) {
      other = true;  // other device types: extern nodes
    } else if (!d->cuda) {
      cpu = true;
    } else if (cuda && !same(*d, *cuda)) {
      return std::nullopt;  // several CUDA devices: op by op
    } else {
      cuda = d;
    }
  }
  if (cuda) return cuda::driver_available() ? cuda : std::nullopt;
  if (other && !cpu) return std::nullopt;  // nothing here a kernel back end serves
#ifdef TORCHLITE_HAVE_LLVM
  return KernelDevice{};
#else
  return std::nullopt;
#endif
}

bool on_device(const ir::TensorMeta& meta, const KernelDevice& device) {
  std::optional<KernelDevice> d = device_of(meta);
  return d && same(*d, device);
}

namespace {

// True when running `item` is visible after the graph: an extern or a kernel member with a
// visible effect, or a kernel storing into an input.
// `lasting`: only lasting effects (ir::lasting_effect) count.
bool step_has_effect(const ir::Schedule& schedule, const ir::ScheduleStep& item,
                     bool lasting = false) {
  auto effect = lasting ? ir::lasting_effect : ir::visible_effect;
  if (item.extern_node) return effect(*item.extern_node);
  const ir::ScheduledKernel& k = schedule.kernels.at(item.kernel);
  for (const ir::Node* m : k.members)
    if (effect(*m)) return true;
  for (const ir::Node* into : k.store_into)
    if (into) return true;
  return false;
}

}  // namespace

CompiledGraph::CompiledGraph(std::shared_ptr<const ir::Graph> graph, ir::Schedule partition)
    : graph_(std::move(graph)), partition_(std::move(partition)) {
  TL_CHECK(partition_.memory.size() == partition_.order.size())
      << "a schedule of " << partition_.order.size() << " steps with a memory plan of "
      << partition_.memory.size() << " (passes::plan_memory makes it)";
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
  bool steps_with_kernels = false;
  for (auto& item : partition_.order) {
    Step s;
    if (first_effect_ < 0 && step_has_effect(partition_, item))
      first_effect_ = static_cast<int>(steps_.size());
    if (first_lasting_effect_ < 0 && step_has_effect(partition_, item, /*lasting=*/true))
      first_lasting_effect_ = static_cast<int>(steps_.size());
    if (item.extern_node) {
      s.call.emplace(*item.extern_node, slots);
      s.node = item.extern_node;
      changes_grad_mode_ |= s.call->changes_grad_mode();
      s.out_slots.push_back(static_cast<int>(n_values_++));
      slots[item.extern_node] = s.out_slots.back();
    } else {
      TL_CHECK(item.kernel >= 0 && item.kernel < static_cast<int>(partition_.kernels.size()))
          << "plan item names kernel " << item.kernel;
      const ir::ScheduledKernel& fk = partition_.kernels[item.kernel];
      std::optional<KernelDevice> dev = steps_with_kernels ? std::optional(device_) : std::nullopt;
      const ir::Kernel& k = fk.kernel;
      TL_CHECK(fk.inputs.size() == k.inputs.size() && fk.outputs.size() == k.outputs.size())
          << "kernel " << k.name << ": graph values do not match its buffers";
      s.kernel = item.kernel;
      s.launch_with_next = item.launch_with_next;
      for (auto* in : fk.inputs) {
        kernel_meta(in, k.name, dev);
        s.in_slots.push_back(slot_of(in, k.name));
        s.in_offsets.push_back(0);
      }
      for (size_t o = 0; o < fk.outputs.size(); ++o) {
        const ir::Node* out = fk.outputs[o];
        const ir::TensorMeta& m = kernel_meta(out, k.name, dev);
        s.allocs.push_back(alloc_of(m));
        if (o < fk.store_into.size() && fk.store_into[o])
          s.allocs.back().into_slot = slot_of(fk.store_into[o], k.name);
        s.out_slots.push_back(static_cast<int>(n_values_++));
        slots[out] = s.out_slots.back();
      }
      s.node = fk.outputs.empty() ? nullptr : fk.outputs[0];
      if (dev) device_ = *dev;
      steps_with_kernels = true;
      for (size_t d = 0; d < k.shape.size(); ++d)
        (d + k.reduction_axes < k.shape.size() ? s.outer : s.red) *= k.shape[d];
    }
    steps_.push_back(std::move(s));
  }
  if (first_effect_ < 0) first_effect_ = static_cast<int>(steps_.size());
  if (first_lasting_effect_ < 0) first_lasting_effect_ = static_cast<int>(steps_.size());
  outputs_.set(*graph_, [&](const ir::Node* n) { return slot_of(n, "output"); });
  apply_memory_plan(slots);

  if (partition_.kernels.empty()) return;
  backend_ = make_kernel_backend(device_);
  std::vector<const ir::Kernel*> kernels;
  for (auto& fk : partition_.kernels) kernels.push_back(&fk.kernel);
  backend_->compile(kernels);
  empty_strided_ = torch_attr("empty_strided");
  PyRef c = torch_attr("_C");
  if (device_.cuda) {  // fast_alloc's check of the current device
    get_device_ = PyRef::steal(PyObject_GetAttrString(c.get(), "_cuda_getDevice"));
    if (!get_device_) throw PythonError();
  }
  fast_empty_strided_ = private_empty_strided(c.get(), device_.cuda);
  // NOTE: without the mode-stack queries a mode could not be seen: allocate through torch.
  if (!torch_has_mode_stack_queries()) fast_empty_strided_ = PyRef();
  data_ptr_name_ = PyRef::steal(PyUnicode_InternFromString("data_ptr"));
  stride_name_ = PyRef::steal(PyUnicode_InternFromString("stride"));
  alloc_kwnames_ = PyRef::steal(Py_BuildValue("(ss)", "dtype", "device"));
  if (!data_ptr_name_ || !stride_name_ || !alloc_kwnames_) throw PythonError();
}

// The schedule's memory plan (ir::StepMemory) in slots: skipped steps, kernel
// outputs allocated as the view folded into them, inputs read through the value
// they view, externs made by one as_strided, and what each step releases.
void CompiledGraph::apply_memory_plan(const SlotMap& slots) {
  auto slot = [&](const ir::Node* n) {
    auto it = slots.find(n);
    TL_CHECK(n && it != slots.end())
        << "the memory plan names " << (n ? n->name : "null") << ", a value no step produces";
    return it->second;
  };
  for (size_t idx = 0; idx < steps_.size(); ++idx) {
    Step& s = steps_[idx];
    const ir::StepMemory& m = partition_.memory[idx];
    s.skip = m.skip;
    for (const ir::Node* n : m.release_after) s.release_after.push_back(slot(n));
    if (s.call) {
      if (m.kernel_layout) {
        TL_CHECK(s.node->meta) << "a kernel reads " << s.node->name
                               << ", which has no tensor metadata";
        s.kernel_layout = alloc_of(*s.node->meta);
        s.layout_sizes = s.node->meta->sizes, s.layout_strides = s.node->meta->strides;
      }
      if (m.strided_base)
        s.call = NodeCall::as_strided(*s.node, slot(m.strided_base), s.node->meta->sizes,
                                      s.node->meta->strides, m.strided_offset);
      continue;
    }
    const ir::ScheduledKernel& fk = partition_.kernels[s.kernel];
    TL_CHECK(m.outputs.size() == fk.outputs.size() && m.inputs.size() == fk.inputs.size() &&
             m.input_byte_offsets.size() == fk.inputs.size())
        << "the memory plan of kernel " << fk.kernel.name << " does not match its buffers";
    for (size_t i = 0; i < m.outputs.size(); ++i) {
      if (m.outputs[i] == fk.outputs[i]) continue;
      TL_CHECK(m.outputs[i]->meta) << "kernel " << fk.kernel.name << " allocated as "
                                   << m.outputs[i]->name << ", which has no tensor metadata";
      int into = s.allocs[i].into_slot;
      s.allocs[i] = alloc_of(*m.outputs[i]->meta);
      s.allocs[i].into_slot = into;
      s.out_slots[i] = slot(m.outputs[i]);
    }
    for (size_t j = 0; j < m.inputs.size(); ++j) {
      s.in_slots[j] = slot(m.inputs[j]);
      s.in_offsets[j] = m.input_byte_offsets[j];
    }
  }
}

CompiledGraph::~CompiledGraph() = default;

// Per run: values read lazily, only when a kernel needs them.
struct CompiledGraph::RunState {
  int fast_alloc = -1;                 // fast_alloc(): not yet asked
  std::unique_ptr<KernelRun> kernels;  // made at the first launch
  // A group of kernels launched at once (Step::launch_with_next): the members prepared so far.
  // Values their steps released wait for the launch (their memory must not be reused by a
  // later member's output before the members run).
  std::vector<size_t> group;
  std::vector<std::vector<char*>> group_bufs;
  std::vector<int64_t> group_outer;
  std::vector<int> deferred_release;
};

// Kernels bake in the strides the meta tensors predicted; a few torch ops
// choose another layout on real data (CPU convolutions on channels-last-strided
// inputs return channels-last while their meta says contiguous). Such a result
// is copied into the predicted layout. Returns false with the Python error set.
bool CompiledGraph::match_kernel_layout(const Step& s, PyRef& value) {
  // NOTE: by vectorcall with the interned name: no format string parsed, no name made per call.
  PyObject* argv[2] = {nullptr, value.get()};
  PyRef stride = PyRef::steal(PyObject_VectorcallMethod(
      stride_name_.get(), argv + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
  if (!stride || !PyTuple_Check(stride.get())) return stride ? true : false;
  Py_ssize_t n = PyTuple_GET_SIZE(stride.get());
  if (n != static_cast<Py_ssize_t>(s.layout_strides.size())) return true;  // not a kernel layout
  bool same = true;
  for (Py_ssize_t d = 0; d < n && same; ++d) {
    if (s.layout_sizes[d] <= 1) continue;  // a size-1 axis is never stepped over
    same = PyLong_AsLongLong(PyTuple_GET_ITEM(stride.get(), d)) == s.layout_strides[d];
  }
  if (PyErr_Occurred()) return false;
  if (same) return true;
  const Alloc& a = *s.kernel_layout;
  PyObject* args[5] = {nullptr, a.sizes.get(), a.strides.get(), a.dtype.get(), a.device.get()};
  PyRef copy = PyRef::steal(PyObject_Vectorcall(
      empty_strided_.get(), args + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, alloc_kwnames_.get()));
  if (!copy) return false;
  PyRef done = PyRef::steal(PyObject_CallMethod(copy.get(), "copy_", "O", value.get()));
  if (!done) return false;
  value = std::move(copy);
  return true;
}

// Whether this run may allocate through fast_empty_strided_ (asked once per
// run): not while a torch function or dispatch mode is active (it would not see
// the allocation), and on CUDA only when the current device is the graph's.
bool CompiledGraph::fast_alloc(RunState& rs) const {
  if (!fast_empty_strided_) return false;
  if (rs.fast_alloc < 0) {
    try {
      rs.fast_alloc = torch_mode_stacks_empty() ? 1 : 0;
    } catch (const PythonError&) {
      PyErr_Clear();
      rs.fast_alloc = 0;
    }
    if (rs.fast_alloc && device_.cuda) {
      PyRef dev = PyRef::steal(PyObject_CallNoArgs(get_device_.get()));
      long index = dev ? PyLong_AsLong(dev.get()) : -1;
      if (PyErr_Occurred()) PyErr_Clear();
      rs.fast_alloc = index == device_.index ? 1 : 0;
    }
  }
  return rs.fast_alloc == 1;
}

// Allocates the outputs, reads every data pointer once, runs the kernel.
// Returns false with the Python error set.
bool CompiledGraph::run_kernel(const Step& s, std::vector<PyRef>& values, RunState& rs) {
  std::vector<char*> bufs;
  bufs.reserve(s.in_slots.size() + s.out_slots.size() + 1);
  auto data_ptr = [&](PyObject* t) {
    if (!t) {  // a skipped empty factory (skip_empty_factories)
      bufs.push_back(nullptr);
      return true;
    }
    PyObject* argv[2] = {nullptr, t};
    PyRef p = PyRef::steal(PyObject_VectorcallMethod(data_ptr_name_.get(), argv + 1,
                                                     1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
    bufs.push_back(p ? static_cast<char*>(PyLong_AsVoidPtr(p.get())) : nullptr);
    return p && !PyErr_Occurred();
  };
  for (size_t i = 0; i < s.in_slots.size(); ++i) {
    if (!data_ptr(values[s.in_slots[i]].get())) return false;
    if (bufs.back()) bufs.back() += s.in_offsets[i];
  }
  for (size_t i = 0; i < s.out_slots.size(); ++i) {
    const Alloc& a = s.allocs[i];
    PyRef out;
    if (a.into_slot >= 0) out = values[a.into_slot];
    if (!out && a.pooled) {
      try {
        out = pooled_empty_strided(a.size_list, a.stride_list, a.type);
      } catch (const PythonError&) {
        return false;
      }
    }
    auto allocate = [&] {
      if (fast_alloc(rs)) {
        PyObject* argv[4] = {nullptr, a.sizes.get(), a.strides.get(), a.dtype.get()};
        return PyRef::steal(PyObject_Vectorcall(fast_empty_strided_.get(), argv + 1,
                                                3 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
      }
      PyObject* argv[5] = {nullptr, a.sizes.get(), a.strides.get(), a.dtype.get(), a.device.get()};
      return PyRef::steal(PyObject_Vectorcall(empty_strided_.get(), argv + 1,
                                              2 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                              alloc_kwnames_.get()));
    };
    if (!out) out = allocate();
    // NOTE: memory the buffer pool keeps idle may be what torch's allocator lacks: free it and
    // try once more (buffer_pool.h).
    if (!out && !device_.cuda && release_idle_blocks() > 0) {
      PyErr_Clear();
      out = allocate();
    }
    if (!out) return false;
    // NOTE: an output stored into an input the kernel also reads at its start (an optimizer's
    // parameter and state) has that input's pointer: no second data_ptr() call.
    const size_t n_in = s.in_slots.size();
    size_t same = n_in;
    if (a.into_slot >= 0)
      for (size_t j = 0; j < n_in && same == n_in; ++j)
        if (s.in_slots[j] == a.into_slot && s.in_offsets[j] == 0 && bufs[j]) same = j;
    if (same < n_in)
      bufs.push_back(bufs[same]);
    else if (!data_ptr(out.get()))
      return false;
    values[s.out_slots[i]] = std::move(out);
  }
  if (!rs.kernels && (s.outer != 0 || !rs.group.empty())) rs.kernels = backend_->start_run();
  if (s.launch_with_next || !rs.group.empty()) {
    if (s.outer != 0) {
      rs.group.push_back(static_cast<size_t>(s.kernel));
      rs.group_bufs.push_back(std::move(bufs));
      rs.group_outer.push_back(s.outer);
    }
    if (s.launch_with_next || rs.group.empty()) return true;
    bool ok = rs.kernels->launch_group(rs.group, rs.group_bufs, rs.group_outer);
    rs.group.clear();
    rs.group_bufs.clear();
    rs.group_outer.clear();
    return ok;
  }
  if (s.outer == 0) return true;
  counters().kernel_launches++;
  return rs.kernels->launch(static_cast<size_t>(s.kernel), bufs, s.outer, s.red);
}

void CompiledGraph::enable_autotune(std::string trace_dir, bool blocks) {
  if (!device_.cuda || !backend_) return;
  std::vector<const ir::Kernel*> kernels;  // none: no other builds
  if (blocks)
    for (auto& fk : partition_.kernels) kernels.push_back(&fk.kernel);
  backend_->enable_autotune(std::move(trace_dir), kernels);
}

void CompiledGraph::enable_cuda_graphs(std::shared_ptr<CudaGraphPool> pool, int limit,
                                       std::string trace_dir, int warmups,
                                       int64_t pool_outputs_from, int64_t copy_inputs_from) {
  TL_CHECK(device_.cuda) << "CUDA graphs for a graph that runs on the CPU";
  cuda_graphs_ = std::make_unique<CudaGraphs>(*graph_, device_.index, std::move(pool), limit,
                                              std::move(trace_dir), warmups, pool_outputs_from,
                                              copy_inputs_from);
}

std::vector<PyRef> CompiledGraph::run(PyObject* const* inputs, size_t n_inputs) {
  if (!cuda_graphs_) return run_steps(inputs, n_inputs);
  TL_CHECK(n_inputs == n_inputs_) << "graph expects " << n_inputs_ << " inputs, got " << n_inputs;
  failed_node_ = nullptr;
  return cuda_graphs_->run(inputs, n_inputs,
                           [this](PyObject* const* in, size_t n) { return run_steps(in, n); });
}

std::vector<PyRef> CompiledGraph::run_owned(std::vector<PyRef> inputs) {
  if (cuda_graphs_) {
    // NOTE: a recording copies or reads its inputs in place: nothing to release early.
    std::vector<PyObject*> in = borrowed(inputs);
    return run(in.data(), in.size());
  }
  TL_CHECK(inputs.size() == n_inputs_)
      << "graph expects " << n_inputs_ << " inputs, got " << inputs.size();
  inputs.resize(n_values_);
  return run_values(inputs);
}

std::vector<PyRef> CompiledGraph::run_steps(PyObject* const* inputs, size_t n_inputs) {
  TL_CHECK(n_inputs == n_inputs_) << "graph expects " << n_inputs_ << " inputs, got " << n_inputs;
  std::vector<PyRef> values(n_values_);
  for (size_t i = 0; i < n_inputs; ++i) values[i] = PyRef::borrow(inputs[i]);
  return run_values(values);
}

std::vector<PyRef> CompiledGraph::run_values(std::vector<PyRef>& values) {
  failed_node_ = nullptr;
  failed_step_ = -1;
  int grad_before = changes_grad_mode_ ? grad_enabled() : -1;
  RunState rs;
  for (auto& s : steps_) {
    bool ok = true;
    if (s.skip) {
      // never made: its kernels get a null pointer
    } else if (s.call) {
      PyObject* result = s.call->call(values);
      if (result) values[s.out_slots[0]] = PyRef::steal(result);
      ok = result != nullptr;
      if (ok && s.kernel_layout) ok = match_kernel_layout(s, values[s.out_slots[0]]);
    } else {
      ok = run_kernel(s, values, rs);
    }
    if (!ok) {
      failed_node_ = s.node;
      failed_step_ = static_cast<int>(&s - steps_.data());
      restore_grad_mode(grad_before);
      throw PythonError();
    }
    if (!rs.group.empty()) {  // a group's members are prepared, not launched yet
      rs.deferred_release.insert(rs.deferred_release.end(), s.release_after.begin(),
                                 s.release_after.end());
      continue;
    }
    for (int slot : s.release_after) values[slot] = PyRef();
    for (int slot : rs.deferred_release) values[slot] = PyRef();
    rs.deferred_release.clear();
  }
  return outputs_.outputs(values);
}

}  // namespace tl::runtime
