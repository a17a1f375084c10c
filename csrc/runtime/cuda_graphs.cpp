#include "runtime/cuda_graphs.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/counters.h"
#include "core/dump_dir.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/py_import.h"
#include "ir/effects.h"

namespace tl::runtime {
namespace {

PyRef check(PyObject* r) {
  if (!r) throw PythonError();
  return PyRef::steal(r);
}

PyRef torch_cuda(const char* name) { return import_attr("torch.cuda", name); }

PyRef call_method(PyObject* obj, const char* name) {
  return check(PyObject_CallMethod(obj, name, nullptr));
}

// obj.name(arg); `arg` borrowed.
PyRef call_method(PyObject* obj, const char* name, PyObject* arg) {
  return check(PyObject_CallMethod(obj, name, "O", arg));
}

PyRef method0(PyObject* obj, PyObject* name) {
  PyObject* argv[2] = {nullptr, obj};
  return check(
      PyObject_VectorcallMethod(name, argv + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
}

uintptr_t as_ptr(PyObject* n) {
  uintptr_t p = reinterpret_cast<uintptr_t>(PyLong_AsVoidPtr(n));
  if (PyErr_Occurred()) throw PythonError();
  return p;
}

// The Python error pending, as text, cleared (for a reason shown to the user).
std::string take_error() {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyRef t = PyRef::steal(type), v = PyRef::steal(value), b = PyRef::steal(tb);
  PyRef s = v ? PyRef::steal(PyObject_Str(v.get())) : PyRef();
  const char* c = s ? PyUnicode_AsUTF8(s.get()) : nullptr;
  std::string text = c ? c : "unknown error";
  PyErr_Clear();
  if (text.size() > 300) text = text.substr(0, 300) + "...";
  return text;
}

bool contains(const std::string& s, const char* word) { return s.find(word) != std::string::npos; }

// The last dotted part of a target ("torch.nn.functional.dropout" -> "dropout").
std::string last_part(const std::string& target) {
  auto dot = target.rfind('.');
  return dot == std::string::npos ? target : target.substr(dot + 1);
}

// Bytes of the tensors `a` returns (through tuples and lists).
int64_t output_bytes(const ir::Arg& a) {
  int64_t bytes = 0;
  if (a.kind == ir::Arg::Kind::Node && a.node && a.node->meta && a.node->meta->dtype) {
    PyRef size = PyRef::steal(PyObject_GetAttrString(a.node->meta->dtype.get(), "itemsize"));
    int64_t n = size ? PyLong_AsLongLong(size.get()) : 4;
    PyErr_Clear();
    for (int64_t d : a.node->meta->sizes) n *= d;
    bytes += n;
  }
  for (const ir::Arg& item : a.items) bytes += output_bytes(item);
  return bytes;
}

// NOTE: outputs are copied out of the pool after every replay (cuda_graphs.h). Past this
// size the copy costs more than the launches a replay saves: GPT-2's 8x512 logits (411 MB) took
// 3.11 ms a step recorded against 2.70 ms without on an H100.
constexpr int64_t kMaxOutputBytes = int64_t{256} << 20;

}  // namespace

PyRef CudaGraphPool::handle() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!handle_) handle_ = check(PyObject_CallNoArgs(torch_cuda("graph_pool_handle").get()));
  return handle_;
}

PyRef CudaGraphPool::stream(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!stream_ || stream_device_ != device) {
    PyRef kw = check(Py_BuildValue("{s:i}", "device", device));
    PyRef args = check(PyTuple_New(0));
    stream_ = check(PyObject_Call(torch_cuda("Stream").get(), args.get(), kw.get()));
    stream_device_ = device;
  }
  return stream_;
}

void CudaGraphPool::anchor(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  if (anchor_) return;
  PyRef graph = check(PyObject_CallNoArgs(torch_cuda("CUDAGraph").get()));
  PyRef begin = check(PyObject_GetAttrString(graph.get(), "capture_begin"));
  PyRef kw = check(Py_BuildValue("{s:O}", "pool", handle_.get()));
  PyRef no_args = check(PyTuple_New(0));
  check(PyObject_Call(begin.get(), no_args.get(), kw.get()));
  PyRef dev = check(PyUnicode_FromFormat("cuda:%d", device));
  PyRef zkw = check(Py_BuildValue("{s:O}", "device", dev.get()));
  PyRef size = check(Py_BuildValue("(i)", 1));
  PyRef zeros =
      PyRef::steal(PyObject_Call(import_attr("torch", "zeros").get(), size.get(), zkw.get()));
  PyRef ended = PyRef::steal(PyObject_CallMethod(graph.get(), "capture_end", nullptr));
  if (!zeros || !ended) throw PythonError();
  anchor_ = std::move(graph);
  anchor_value_ = std::move(zeros);
}

int CudaGraphPool::recorded() {
  std::lock_guard<std::mutex> lock(mu_);
  return ++recorded_;
}

void CudaGraphPool::keep_valid(int seq, PyObject* holder) {
  PyRef weak = check(PyWeakref_NewRef(holder, nullptr));
  std::lock_guard<std::mutex> lock(mu_);
  kept_.emplace_back(seq, std::move(weak));
}

void CudaGraphPool::before_replay(int seq) {
  std::vector<PyRef> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (kept_.empty()) return;
    std::vector<std::pair<int, PyRef>> rest;
    for (auto& entry : kept_) {
      if (entry.first >= seq)
        due.push_back(std::move(entry.second));
      else
        rest.push_back(std::move(entry));
    }
    kept_ = std::move(rest);
  }
  // NOTE: called without the lock: copying out runs Python, which may switch threads.
  for (const PyRef& weak : due) {
    PyObject* holder = PyWeakref_GetObject(weak.get());  // borrowed; None once dead
    if (!holder) throw PythonError();
    if (holder == Py_None) continue;
    PyRef keep = PyRef::borrow(holder);
    call_method(keep.get(), "on_overwrite");
  }
}

std::string cuda_graph_blocker(const ir::Graph& graph, bool cuda, int64_t pool_outputs_from) {
  if (!cuda) return "the graph runs on the CPU";
  // NOTE: exact names (the last dotted part of the target): `getitem` is no `item`, and
  // F.normalize draws nothing.
  static const std::set<std::string> kRandom = {
      "rand",          "randn",          "randint",     "randperm",   "rand_like",
      "randn_like",    "randint_like",   "dropout",     "dropout_",   "feature_dropout",
      "alpha_dropout", "native_dropout", "bernoulli",   "bernoulli_", "normal",
      "normal_",       "uniform_",       "multinomial", "poisson",    "exponential_",
      "cauchy_",       "geometric_",     "log_normal_", "random_",    "seed",
      "manual_seed",   "rrelu",          "rrelu_"};
  static const std::set<std::string> kSync = {
      "item", "tolist", "nonzero", "masked_select", "unique", "unique_consecutive", "bincount",
      "synchronize", "numpy", "cpu", "_local_scalar_dense", "nonzero_static", "argwhere",
      // run-time checks reading a value on the host (a replay would skip them)
      "check_assertion", "check_index_bounds"};
  for (const auto& n : graph.nodes()) {
    std::string where = n->location.empty() ? "" : " at " + n->location;
    if (n->op == ir::OpKind::Placeholder) {
      if (!n->meta) return "input %" + n->name + " is not a tensor";
      continue;
    }
    if (n->op != ir::OpKind::CallFunction && n->op != ir::OpKind::CallMethod) continue;
    const std::string last = last_part(n->target_name);
    if (kRandom.count(last) && !(contains(last, "dropout") && ir::is_eval_dropout(*n)))
      return "random op " + n->target_name + where +
             " (a replay would draw the same numbers again)";
    if (kSync.count(last)) return "synchronising op " + n->target_name + where;
  }
  int64_t bytes = 0;
  if (graph.output()) {
    const auto& outs = graph.output()->args;
    size_t copied =
        pool_outputs_from < 0 ? outs.size() : std::min(outs.size(), size_t(pool_outputs_from));
    for (size_t i = 0; i < copied; ++i) bytes += output_bytes(outs[i]);
  }
  if (bytes > kMaxOutputBytes)
    return "outputs of " + std::to_string(bytes >> 20) +
           " MB: copying them out of the pool after each replay would cost more than the "
           "launches it saves";
  return "";
}

struct CudaGraphs::Recording {
  PyRef graph;                       // torch.cuda.CUDAGraph
  std::vector<int> in_place;         // inputs read where they are
  std::vector<uintptr_t> ptrs;       // ... at these addresses
  std::vector<int> copied;           // inputs copied into `statics` before each replay
  PyRef statics;                     // list of the static buffers, as copied
  std::vector<PyRef> copied_layout;  // per copied input: (size(), stride()) when recorded
  std::vector<PyRef> outputs;        // what the recorded run returned (pool memory)
  std::vector<int> output_input;     // per output: the input it is (-1: none)
  std::vector<int> output_first;     // per output: the first output that is the same object
  std::vector<char> output_tensor;   // per output: a tensor (cloned out), else returned as is
  int seq = 0;                       // CudaGraphPool::recorded() when made
};

CudaGraphs::CudaGraphs(const ir::Graph& graph, int device, std::shared_ptr<CudaGraphPool> pool,
                       int limit, std::string trace_dir, int warmups, int64_t pool_outputs_from,
                       int64_t copy_inputs_from)
    : device_(device),
      pool_(std::move(pool)),
      limit_(limit),
      trace_dir_(std::move(trace_dir)),
      warmups_(std::max(1, warmups)),
      pool_outputs_from_(pool_outputs_from),
      copy_inputs_from_(copy_inputs_from) {
  std::unordered_map<const ir::Node*, int> index;
  for (ir::Node* p : graph.placeholders()) index[p] = static_cast<int>(index.size());
  // NOTE: one definition of "the graph writes this input" (ir/effects.h), as the storage-aliasing
  // guard uses: `operator.iadd`, `inplace=True`, out= and writes through views all count. A write
  // it cannot pin to one input counts against every input: a replay must never read a stale copy.
  ir::InputWrites writes = ir::written_inputs(graph);
  if (writes.unknown) {
    for (size_t i = 0; i < index.size(); ++i) mutated_inputs_.push_back(static_cast<int>(i));
  } else {
    std::set<int> written;
    for (const ir::Node* p : writes.placeholders) written.insert(index.at(p));
    mutated_inputs_.assign(written.begin(), written.end());
  }
  name_ = "graph";
  for (const auto& n : graph.nodes())
    if (!n->location.empty()) {
      name_ = "graph at " + n->location;
      break;
    }
  warm_ptrs_.assign(index.size(), 0);
  moved_.assign(index.size(), 0);
  data_ptr_name_ = check(PyUnicode_InternFromString("data_ptr"));
  clone_name_ = check(PyUnicode_InternFromString("clone"));
  replay_name_ = check(PyUnicode_InternFromString("replay"));
  PyRef torch = check(PyImport_ImportModule("torch"));
  foreach_copy_ = PyRef::steal(PyObject_GetAttrString(torch.get(), "_foreach_copy_"));
  PyErr_Clear();
}

CudaGraphs::~CudaGraphs() = default;

void CudaGraphs::trace(const std::string& line) {
  if (log_enabled("cudagraphs")) log_event("cudagraphs", name_ + ": " + line);
  if (trace_dir_.empty()) return;
  trace_text_ += line + "\n";
  write_dump(trace_dir_ + "cudagraphs.txt", trace_text_);
}

void CudaGraphs::turn_off(const std::string& why) {
  off_ = why;
  rec_.reset();
  trace("runs without CUDA graphs from now on: " + why);
}

// NOTE: a copied input's sizes are checked too: guards fix them today, but a graph compiled
// for dynamic sizes must not replay a recording of other sizes.
bool CudaGraphs::matches(PyObject* const* inputs) {
  const Recording& r = *rec_;
  bool same_places = true;
  for (size_t k = 0; k < r.in_place.size(); ++k) {
    PyRef p = method0(inputs[r.in_place[k]], data_ptr_name_.get());
    if (as_ptr(p.get()) != r.ptrs[k]) {
      moved_[r.in_place[k]] = 1;  // NOTE: copied from the next recording on (cuda_graphs.h)
      same_places = false;
    }
  }
  if (!same_places) return false;
  for (size_t k = 0; k < r.copied.size(); ++k) {
    PyObject* t = inputs[r.copied[k]];
    PyRef layout =
        check(PyTuple_Pack(2, call_method(t, "size").get(), call_method(t, "stride").get()));
    int same = PyObject_RichCompareBool(layout.get(), r.copied_layout[k].get(), Py_EQ);
    if (same < 0) throw PythonError();
    if (!same) return false;
  }
  return true;
}

bool CudaGraphs::record(PyObject* const* inputs, size_t n, const RunFn& plain) {
  // Sync ops and capture-unsafe calls fail the capture; so does a caller already capturing.
  PyRef capturing = check(PyObject_CallNoArgs(torch_cuda("is_current_stream_capturing").get()));
  if (capturing.get() == Py_True) {
    turn_off("called while the current stream is being recorded into another CUDA graph");
    return false;
  }
  PyRef cur = check(PyObject_CallNoArgs(torch_cuda("current_device").get()));
  if (PyLong_AsLong(cur.get()) != device_) {
    turn_off("the graph's device (cuda:" + std::to_string(device_) + ") is not the current device");
    return false;
  }
  auto r = std::make_unique<Recording>();
  std::vector<PyRef> args(n);
  r->statics = check(PyList_New(0));
  for (size_t i = 0; i < n; ++i) {
    uintptr_t p = as_ptr(method0(inputs[i], data_ptr_name_.get()).get());
    bool stable = p == warm_ptrs_[i] && !moved_[i] &&
                  !(copy_inputs_from_ >= 0 && static_cast<int64_t>(i) >= copy_inputs_from_);
    warm_ptrs_[i] = p;  // a re-recording compares with the addresses of this call
    for (int m : mutated_inputs_)
      if (m == static_cast<int>(i) && !stable) {
        turn_off("the graph writes input " + std::to_string(i) +
                 " in place and its address changes between calls");
        return false;
      }
    if (stable) {
      r->in_place.push_back(static_cast<int>(i));
      r->ptrs.push_back(p);
      args[i] = PyRef::borrow(inputs[i]);
      continue;
    }
    PyRef size = call_method(inputs[i], "size");
    PyRef stride = call_method(inputs[i], "stride");
    PyRef buf =
        check(PyObject_CallMethod(inputs[i], "new_empty_strided", "OO", size.get(), stride.get()));
    PyRef done = PyRef::steal(PyObject_CallMethod(buf.get(), "copy_", "O", inputs[i]));
    if (!done) {
      turn_off("input " + std::to_string(i) + " cannot be copied into a static buffer (" +
               take_error() + ")");
      return false;
    }
    r->copied.push_back(static_cast<int>(i));
    r->copied_layout.push_back(check(PyTuple_Pack(2, size.get(), stride.get())));
    if (PyList_Append(r->statics.get(), buf.get()) < 0) throw PythonError();
    args[i] = std::move(buf);
  }
  // NOTE: the old recording goes first, so its pool memory serves the new one; the sync
  // makes sure no replay of it is still running.
  PyRef sync = torch_cuda("synchronize");
  if (rec_) {
    check(PyObject_CallNoArgs(sync.get()));
    rec_.reset();
  }
  r->graph = check(PyObject_CallNoArgs(torch_cuda("CUDAGraph").get()));
  PyRef stream = pool_->stream(device_);
  PyRef current = check(PyObject_CallNoArgs(torch_cuda("current_stream").get()));
  call_method(stream.get(), "wait_stream", current.get());
  PyRef ctx = check(PyObject_CallOneArg(torch_cuda("stream").get(), stream.get()));
  call_method(ctx.get(), "__enter__");
  std::string failed;
  try {
    pool_->handle();
    pool_->anchor(device_);
  } catch (const PythonError&) {
    if (fatal_python_error_pending()) throw;
    failed = take_error();
  }
  if (failed.empty()) {
    PyRef begin = check(PyObject_GetAttrString(r->graph.get(), "capture_begin"));
    PyRef kw = check(Py_BuildValue("{s:O}", "pool", pool_->handle().get()));
    PyRef no_args = check(PyTuple_New(0));
    PyRef began = PyRef::steal(PyObject_Call(begin.get(), no_args.get(), kw.get()));
    if (!began) failed = take_error();
  }
  std::vector<PyRef> outs;
  if (failed.empty()) {
    static_assert(sizeof(PyRef) == sizeof(PyObject*), "PyRef must be a bare pointer");
    try {
      outs = plain(reinterpret_cast<PyObject* const*>(args.data()), n);
    } catch (const PythonError&) {
      if (fatal_python_error_pending()) throw;
      failed = take_error();
    }
    PyRef ended = PyRef::steal(PyObject_CallMethod(r->graph.get(), "capture_end", nullptr));
    if (!ended) {
      std::string e = take_error();
      if (failed.empty()) failed = e;
    }
  }
  PyRef exited =
      PyRef::steal(PyObject_CallMethod(ctx.get(), "__exit__", "OOO", Py_None, Py_None, Py_None));
  if (!exited) throw PythonError();
  call_method(current.get(), "wait_stream", stream.get());
  if (!failed.empty()) {
    turn_off("recording failed: " + failed);
    return false;
  }
  // Outputs: the inputs themselves are handed back as such; views of inputs would alias
  // pool memory the next replay rewrites, so they are not recorded.
  std::vector<uintptr_t> input_storages;
  for (size_t i = 0; i < n; ++i) {
    PyRef st = call_method(args[i].get(), "untyped_storage");
    input_storages.push_back(as_ptr(call_method(st.get(), "data_ptr").get()));
  }
  PyRef tensor_type = import_attr("torch", "Tensor");
  for (size_t j = 0; j < outs.size(); ++j) {
    int is_input = -1, first = static_cast<int>(j);
    for (size_t i = 0; i < n; ++i)
      if (outs[j].get() == args[i].get()) is_input = static_cast<int>(i);
    for (size_t k = 0; k < j; ++k)
      if (outs[k].get() == outs[j].get()) first = std::min(first, static_cast<int>(k));
    int is_tensor = PyObject_IsInstance(outs[j].get(), tensor_type.get());
    if (is_tensor < 0) throw PythonError();
    // NOTE: a saved-for-backward output may view an input (a weight's transpose): backward only
    // reads it, and a static buffer it views is rewritten only by this graph's replays, before
    // which CudaGraphPool::keep_valid copies it out.
    bool from_pool = pool_outputs_from_ >= 0 && static_cast<int64_t>(j) >= pool_outputs_from_;
    if (is_input < 0 && is_tensor && !from_pool) {
      PyRef st = call_method(outs[j].get(), "untyped_storage");
      uintptr_t p = as_ptr(call_method(st.get(), "data_ptr").get());
      for (size_t i = 0; i < n; ++i)
        if (p != 0 && p == input_storages[i]) {
          turn_off("output " + std::to_string(j) + " is a view of input " + std::to_string(i));
          return false;
        }
    }
    r->output_input.push_back(is_input);
    r->output_first.push_back(first);
    r->output_tensor.push_back(is_tensor ? 1 : 0);
  }
  r->outputs = std::move(outs);
  rec_ = std::move(r);
  ++recordings_;
  counters().cuda_graph_recordings++;
  int total = pool_->recorded();
  rec_->seq = total;
  PyRef reserved = PyRef::steal(PyObject_CallNoArgs(torch_cuda("memory_reserved").get()));
  double mb = reserved ? PyLong_AsDouble(reserved.get()) / (1 << 20) : -1;
  PyErr_Clear();
  std::ostringstream line;
  line << "recorded graph " << recordings_ << " (" << total
       << " in this model's pool): " << rec_->in_place.size() << " inputs read in place, "
       << rec_->copied.size() << " copied; cuda memory reserved " << static_cast<int64_t>(mb)
       << " MB";
  trace(line.str());
  return true;
}

std::vector<PyRef> CudaGraphs::replay(PyObject* const* inputs) {
  const Recording& r = *rec_;
  pool_->before_replay(r.seq);  // NOTE: first: the copies below rewrite the static buffers
  if (!r.copied.empty()) {
    PyRef srcs = check(PyList_New(r.copied.size()));
    for (size_t k = 0; k < r.copied.size(); ++k)
      PyList_SET_ITEM(srcs.get(), k, Py_NewRef(inputs[r.copied[k]]));
    if (foreach_copy_) {
      check(
          PyObject_CallFunctionObjArgs(foreach_copy_.get(), r.statics.get(), srcs.get(), nullptr));
    } else {
      for (size_t k = 0; k < r.copied.size(); ++k)
        call_method(PyList_GET_ITEM(r.statics.get(), k), "copy_", inputs[r.copied[k]]);
    }
  }
  method0(r.graph.get(), replay_name_.get());
  counters().cuda_graph_replays++;
  last_replayed_ = r.seq;
  std::vector<PyRef> out(r.outputs.size());
  for (size_t j = 0; j < r.outputs.size(); ++j) {
    bool from_pool = pool_outputs_from_ >= 0 && static_cast<int64_t>(j) >= pool_outputs_from_;
    if (from_pool && r.output_input[j] < 0)
      out[j] = r.outputs[j];  // NOTE: saved for backward, kept valid by keep_valid
    else if (r.output_first[j] != static_cast<int>(j))
      out[j] = out[r.output_first[j]];
    else if (r.output_input[j] >= 0)
      out[j] = PyRef::borrow(inputs[r.output_input[j]]);
    else if (r.output_tensor[j])
      out[j] = method0(r.outputs[j].get(), clone_name_.get());
    else
      out[j] = r.outputs[j];
  }
  return out;
}

std::vector<PyRef> CudaGraphs::run(PyObject* const* inputs, size_t n, const RunFn& plain) {
  last_replayed_ = -1;
  if (!off_.empty()) return plain(inputs, n);
  if (warmed_ < warmups_) {
    for (size_t i = 0; i < n; ++i)
      warm_ptrs_[i] = as_ptr(method0(inputs[i], data_ptr_name_.get()).get());
    ++warmed_;
    return plain(inputs, n);
  }
  if (rec_ && matches(inputs)) return replay(inputs);
  if (recordings_ >= limit_) {
    turn_off("recorded " + std::to_string(recordings_) +
             " times (cuda_graphs_limit): an input read in place keeps changing its address");
    warn_user("torchlite: " + name_ + " " + off_ + "; it runs without CUDA graphs");
    return plain(inputs, n);
  }
  if (!record(inputs, n, plain)) return plain(inputs, n);
  return replay(inputs);
}

}  // namespace tl::runtime
