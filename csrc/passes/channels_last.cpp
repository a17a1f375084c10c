#include "passes/channels_last.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "core/errors.h"
#include "passes/graph_info.h"
#include "passes/graph_rewrite.h"

namespace tl::passes {
namespace {

using ir::Arg;
using ir::Node;

}  // namespace

// torch.convolution's `transposed` is its 7th argument.
bool is_conv4d(const Node& n) {
  if (n.op != ir::OpKind::CallFunction || !n.meta || n.meta->sizes.size() != 4) return false;
  const std::string& t = n.target_name;
  bool conv = t == "torch.conv2d";
  if (t == "torch.convolution") {
    const Arg* tr = find_arg(n, 6, "transposed");
    conv = tr && tr->kind == Arg::Kind::Const && tr->value.get() == Py_False;
  }
  const Node* in = tensor_arg(n, 0, "input");
  const Node* w = tensor_arg(n, 1, "weight");
  return conv && in && w && in->meta->sizes.size() == 4 && w->meta->sizes.size() == 4;
}

namespace {

// Ops whose meaning depends on strides the trace saw (as_strided, storage
// access) or that change their own operand's metadata in place: a layout
// change past them is not safe.
bool layout_sensitive(const Node& n) {
  const std::string& t = n.target_name;
  for (const char* s :
       {"as_strided", "storage", "stride", "data_ptr", "resize", "set_", "view_as_"})
    if (t.find(s) != std::string::npos) return true;
  std::string base = t.substr(t.rfind('.') + 1);
  for (const char* s : {"transpose_", "t_", "squeeze_", "unsqueeze_", "swapdims_", "swapaxes_"})
    if (base == s) return true;
  return false;
}

PyRef call_method(PyObject* o, const char* name, PyObject* kwargs = nullptr) {
  PyRef fn = PyRef::steal(PyObject_GetAttrString(o, name));
  PyRef none = PyRef::steal(PyTuple_New(0));
  if (!fn || !none) throw PythonError();
  PyRef r = PyRef::steal(PyObject_Call(fn.get(), none.get(), kwargs));
  if (!r) throw PythonError();
  return r;
}

PyRef memory_format(const char* name) { return torch_fn(name); }  // channels_last, ...

PyRef to_channels_last(PyObject* t) {
  PyRef kw =
      PyRef::steal(Py_BuildValue("{s:O}", "memory_format", memory_format("channels_last").get()));
  return call_method(t, "contiguous", kw.get());
}

bool is_channels_last(PyObject* t) {
  PyRef kw =
      PyRef::steal(Py_BuildValue("{s:O}", "memory_format", memory_format("channels_last").get()));
  return call_method(t, "is_contiguous", kw.get()).get() == Py_True;
}

bool is_tensor(PyObject* o) { return o && PyObject_IsInstance(o, torch_fn("Tensor").get()) == 1; }

// Runs convolutions on fake tensors of their real device: torch's own answer
// to "which layout does this backend return" (what torch.compile asks too).
class FakeConv {
 public:
  FakeConv() {
    PyRef mod = PyRef::steal(PyImport_ImportModule("torch._subclasses.fake_tensor"));
    PyRef mode_type =
        mod ? PyRef::steal(PyObject_GetAttrString(mod.get(), "FakeTensorMode")) : PyRef();
    mode_ = mode_type ? PyRef::steal(PyObject_CallNoArgs(mode_type.get())) : PyRef();
    fake_type_ = mod ? PyRef::steal(PyObject_GetAttrString(mod.get(), "FakeTensor")) : PyRef();
    if (!mode_ || !fake_type_) throw PythonError();
  }

  // A meta tensor shaped and strided as `conv` returns on its device, given
  // its inputs' examples; null (error cleared) if the fake run raises.
  PyRef run(const Node& conv, const Examples& examples) {
    Examples fakes;
    for (const Node* in : node_inputs(conv)) {
      auto it = examples.find(in);
      PyObject* ex = it != examples.end() ? it->second.get() : in->example.get();
      if (!is_tensor(ex) || !in->meta) return {};
      PyRef detached = call_method(ex, "detach");
      PyRef fake = PyRef::steal(PyObject_CallFunctionObjArgs(
          fake_type_.get(), mode_.get(), detached.get(), in->meta->device.get(), nullptr));
      if (!fake) {
        PyErr_Clear();
        return {};
      }
      fakes[in] = std::move(fake);
    }
    PyRef entered = PyRef::steal(PyObject_CallMethod(mode_.get(), "__enter__", nullptr));
    if (!entered) throw PythonError();
    PyRef out = run_on_examples(conv, fakes);
    PyRef exited = PyRef::steal(
        PyObject_CallMethod(mode_.get(), "__exit__", "OOO", Py_None, Py_None, Py_None));
    if (!exited) throw PythonError();
    if (!is_tensor(out.get())) return {};
    PyRef size = call_method(out.get(), "size");
    PyRef stride = call_method(out.get(), "stride");
    PyRef dtype = PyRef::steal(PyObject_GetAttrString(out.get(), "dtype"));
    PyRef meta = PyRef::steal(PyObject_CallFunction(torch_fn("device").get(), "s", "meta"));
    PyRef args = PyRef::steal(PyTuple_Pack(2, size.get(), stride.get()));
    PyRef kw = PyRef::steal(Py_BuildValue("{s:O,s:O}", "dtype", dtype.get(), "device", meta.get()));
    PyRef r = PyRef::steal(PyObject_Call(torch_fn("empty_strided").get(), args.get(), kw.get()));
    if (!r) throw PythonError();
    return r;
  }

 private:
  PyRef mode_, fake_type_;
};

// New examples for the nodes whose layout changes when convolution inputs that
// are not channels-last are converted first (each input node once), planned
// without touching the graph.
struct Plan {
  bool ok = true;
  std::string why;
  Examples examples;
  std::unordered_map<const Node*, const Node*> converted;  // conv -> its converted input
  int channels_last_convs = 0;
};

bool same_sizes_and_dtype(PyObject* a, PyObject* b) {
  PyRef sa = call_method(a, "size"), sb = call_method(b, "size");
  PyRef da = PyRef::steal(PyObject_GetAttrString(a, "dtype"));
  PyRef db = PyRef::steal(PyObject_GetAttrString(b, "dtype"));
  if (!da || !db) throw PythonError();
  int eq = PyObject_RichCompareBool(sa.get(), sb.get(), Py_EQ);
  if (eq < 0) throw PythonError();
  return eq == 1 && da.get() == db.get();
}

// A view in one layout and a copy in the other (reshape, flatten, ...) would
// change which values alias.
bool same_aliasing(PyObject* before, PyObject* after) {
  return call_method(before, "_is_view").get() == call_method(after, "_is_view").get();
}

Plan plan_layout(const ir::Graph& g, FakeConv& fake) {
  Plan p;
  Examples cl_inputs;  // input node -> its channels-last example
  auto fail = [&](const Node& n, const std::string& why) {
    p.ok = false;
    p.why = "%" + n.name + ": " + why;
    return p;
  };
  auto current = [&](const Node* n) {
    auto it = p.examples.find(n);
    return it != p.examples.end() ? it->second.get() : n->example.get();
  };
  for (const auto& up : g.nodes()) {
    const Node& n = *up;
    if (n.op != ir::OpKind::CallFunction && n.op != ir::OpKind::CallMethod) continue;
    bool changed_input = false;
    for (const Node* in : node_inputs(n)) changed_input = changed_input || p.examples.count(in);
    PyRef ex;
    if (is_conv4d(n)) {
      const Node* in = tensor_arg(n, 0, "input");
      Examples inputs;
      for (const Node* i : node_inputs(n)) inputs[i] = PyRef::borrow(current(i));
      if (!is_channels_last(current(in))) {
        if (!cl_inputs.count(in)) cl_inputs[in] = to_channels_last(current(in));
        inputs[in] = cl_inputs[in];
        p.converted[&n] = in;
      }
      ex = fake.run(n, inputs);
      if (!ex) return fail(n, "the convolution does not run on fake tensors");
      if (is_channels_last(ex.get())) ++p.channels_last_convs;
    } else if (changed_input) {
      if (layout_sensitive(n)) return fail(n, "a layout-sensitive op");
      ex = run_on_examples(n, p.examples);
      if (!ex) return fail(n, "raises on the new layout");
    } else {
      continue;
    }
    PyObject* old = n.example.get();
    if (!is_tensor(ex.get())) {
      p.examples[&n] = std::move(ex);  // a tuple: its getitems follow
      continue;
    }
    if (!is_tensor(old) || !same_sizes_and_dtype(old, ex.get()))
      return fail(n, "sizes or dtype differ from capture's");
    if (!is_conv4d(n) && !same_aliasing(old, ex.get()))
      return fail(n, "a view would become a copy (or the reverse)");
    if (strides_of(old) != strides_of(ex.get())) p.examples[&n] = std::move(ex);
  }
  return p;
}

void commit_examples(const Plan& p) {
  for (const auto& [cn, ex] : p.examples) {
    Node* n = const_cast<Node*>(cn);
    n->example = ex;
    if (n->meta) n->meta = meta_of(ex.get(), n->meta->device, n->meta->requires_grad);
  }
}

// Strides eager gives node `n`: the eager plan's example, else capture's.
std::vector<int64_t> eager_strides(const Plan& eager, const Node* n) {
  auto it = eager.examples.find(n);
  return strides_of(it != eager.examples.end() ? it->second.get() : n->example.get());
}

// The memory format to clone output `n` into for eager's strides, or null
// when no clone gives them (then the pass does not apply).
PyRef restore_format(const Plan& eager, const Node* n) {
  std::vector<int64_t> want = eager_strides(eager, n);
  const std::vector<int64_t>& sizes = n->meta->sizes;
  if (want == contiguous_strides(sizes)) return memory_format("contiguous_format");
  if (sizes.size() == 4 && want == channels_last_strides(sizes))
    return memory_format("channels_last");
  return {};
}

// Output nodes whose strides the channels-last plan changes.
std::vector<const Node*> changed_outputs(const ir::Graph& g, const Plan& eager, const Plan& cl) {
  std::vector<const Node*> out;
  for (const Arg& a : g.output()->args) {
    if (a.kind != Arg::Kind::Node || !a.node->meta) continue;
    auto it = cl.examples.find(a.node);
    if (it == cl.examples.end()) continue;
    if (strides_of(it->second.get()) != eager_strides(eager, a.node)) out.push_back(a.node);
  }
  return out;
}

void commit_channels_last(ir::Graph& g, const Plan& eager, const Plan& cl) {
  std::vector<std::pair<Node*, PyRef>> restores;  // before capture's examples are replaced
  for (const Node* out : changed_outputs(g, eager, cl))
    restores.emplace_back(const_cast<Node*>(out), restore_format(eager, out));
  commit_examples(cl);
  std::unordered_map<const Node*, Node*> conversion;  // input -> its channels-last copy
  std::vector<Node*> convs;
  for (auto& n : g.nodes())
    if (cl.converted.count(n.get())) convs.push_back(n.get());
  for (Node* conv : convs) {
    Node* in = const_cast<Node*>(cl.converted.at(conv));
    Node*& c = conversion[in];
    if (!c) {
      c = insert_call(g, conv, {}, "contiguous", {Arg::of_node(in)},
                      {{"memory_format", Arg::constant(memory_format("channels_last"))}},
                      in->meta->device);
      c->meta->requires_grad = in->meta->requires_grad;
    }
    replace_uses({conv}, in, c);
  }
  std::unordered_map<const Node*, Node*> restored;
  for (auto& [n, format] : restores) {
    if (restored.count(n)) continue;
    Node* r = insert_call(g, g.output(), {}, "clone", {Arg::of_node(n)},
                          {{"memory_format", Arg::constant(format)}}, n->meta->device);
    r->meta->requires_grad = n->meta->requires_grad;
    restored[n] = r;
  }
  for (Arg& a : g.output()->args)
    if (a.kind == Arg::Kind::Node && restored.count(a.node)) a.node = restored[a.node];
}

// The device type and dtype every 4-d convolution shares, and their count.
struct ConvSummary {
  int count = 0;
  std::string device;
  PyObject* dtype = nullptr;  // borrowed from a node's meta
  bool uniform = true;
  int64_t largest_bytes = 0;  // the largest convolution output
  ConvCost cost;              // summed cpu_conv_cost
};

bool torch_single_thread() {
  PyRef n = PyRef::steal(PyObject_CallNoArgs(torch_fn("get_num_threads").get()));
  if (!n) throw PythonError();
  return PyLong_AsLong(n.get()) == 1;
}

ConvSummary summarize(const ir::Graph& g) {
  ConvSummary s;
  std::optional<bool> single_thread;  // asked once, at the first convolution
  for (auto& n : g.nodes()) {
    if (!is_conv4d(*n)) continue;
    std::string dev = device_type(n->meta->device.get());
    if (s.count++ == 0) s.device = dev, s.dtype = n->meta->dtype.get();
    s.uniform = s.uniform && dev == s.device && n->meta->dtype.get() == s.dtype;
    PyRef item = PyRef::steal(PyObject_GetAttrString(n->meta->dtype.get(), "itemsize"));
    int64_t bytes = item ? PyLong_AsLongLong(item.get()) : -1;
    if (bytes < 0) throw PythonError();
    for (int64_t d : n->meta->sizes) bytes *= d;
    s.largest_bytes = std::max(s.largest_bytes, bytes);
    if (!single_thread) single_thread = torch_single_thread();
    ConvCost c =
        cpu_conv_cost(tensor_arg(*n, 0, "input")->meta->sizes,
                      tensor_arg(*n, 1, "weight")->meta->sizes, n->meta->sizes, *single_thread);
    s.cost.contiguous += c.contiguous;
    s.cost.channels_last += c.channels_last;
  }
  return s;
}

// Whether the plan makes some value that capture saw strided dense and
// contiguous: a convolution's consumers that read channels innermost (a
// patch embedding's `permute(0, 2, 3, 1)` or `flatten(2).transpose(1, 2)`
// before a layer norm over channels) then read it in memory order.
bool densifies(const Plan& p) {
  for (const auto& [n, ex] : p.examples) {
    PyObject* old = n->example.get();
    if (n->op == ir::OpKind::Output || !is_tensor(old) || !is_tensor(ex.get())) continue;
    if (call_method(ex.get(), "is_contiguous").get() == Py_True &&
        call_method(old, "is_contiguous").get() != Py_True)
      return true;
  }
  return false;
}

}  // namespace

bool tracks_grad(const ir::Graph& g) {
  for (auto& n : g.nodes())
    if (n->meta && n->meta->requires_grad && n->op != ir::OpKind::Placeholder) return true;
  return false;
}

ConvCost cpu_conv_cost(const std::vector<int64_t>& input, const std::vector<int64_t>& weight,
                       const std::vector<int64_t>& output, bool single_thread) {
  if (input.size() != 4 || weight.size() != 4 || output.size() != 4) return {};
  // NOTE: per-class constants measured on this repository's CPU (1 thread, f32, torch 2.13),
  // every convolution of 22 timm models at CI size (64-96 px, batch 2; /tmp scratch script timing
  // each convolution on the input the model gave it, both layouts, best of 15): `per_mflop` is
  // the contiguous layout's time per million flops of the class, `ratio` its channels-
  // last time over its contiguous time. Depthwise 0.197 ms/MF, 0.63 (139 convolutions, 1.5-1.9x
  // faster channels-last at every spatial size); other grouped 0.019, 1.3; dense kxk 0.018, 2.4
  // (oneDNN's NHWC kernels lose at small sizes: resnet18's 512x512 3x3 on 2x2 pixels 1.1 vs 10
  // ms; above kCpuChannelsLastBytes the byte rule decides); 1x1 0.013, 1.0. Two 1x1 cases
  // differ: single-threaded torch runs an unstrided 1x1 with its own per-image GEMM, which on 2-7
  // output pixels per image is a few columns wide (regnetx_002's 368x368 on 2x2: 0.31 vs 0.053
  // ms channels-last, where the GEMM spans the batch); a strided 1x1 whose weight is larger than
  // its input runs 7-13x slower channels-last (resnet50's 1024->2048 stride 2: 0.81 vs 10.6 ms).
  // Whole models under torchlite, CI size, 1 thread, contiguous over channels-last time, against
  // this estimate: efficientnet_b0 1.56 (estimate 2.35), mobilenetv3_large_100 1.25 (1.94),
  // regnetx_002 1.48 (2.51), ghostnet_100 1.14 (2.10), dpn68 1.24 (1.17), resnest14d 1.08 (0.97),
  // densenet121 1.02 (0.47), resnext50_32x4d 0.89 (0.57), res2net50_26w_4s 0.89 (0.49), resnet50
  // 0.73 (0.41), dla34 0.48 (0.46), resnet18 0.35 (0.41): the estimate picks the faster layout
  // wherever the two differ by more than 10%.
  const int64_t n = input[0], c = input[1], h = input[2], w = input[3];
  const int64_t o = weight[0], c_group = weight[1], taps = weight[2] * weight[3];
  const int64_t pixels_out = output[2] * output[3];
  if (c_group <= 0) return {};
  const int64_t groups = c / c_group;
  double mflops = 2.0 * double(n) * double(o) * double(pixels_out) * double(c_group * taps) / 1e6;
  double per_mflop = 0.013, ratio = 1.0;
  if (groups > 1 && c_group == 1) {
    per_mflop = 0.197, ratio = 0.63;  // depthwise
  } else if (groups > 1) {
    per_mflop = 0.019, ratio = 1.3;
  } else if (taps > 1) {
    per_mflop = 0.018, ratio = 2.4;
  } else if (pixels_out < h * w && o * c > n * c * h * w) {
    per_mflop = 0.024, ratio = 8.0;  // strided 1x1, weight larger than its input
  } else if (single_thread && pixels_out == h * w && pixels_out > 1 && pixels_out < 8) {
    per_mflop = 0.128, ratio = 0.2;  // torch's per-image GEMM, a few columns wide
  }
  double contiguous = mflops * per_mflop;
  return {contiguous, contiguous * ratio};
}

bool prefers_channels_last(const std::string& device_type, PyObject* dtype,
                           std::optional<bool> setting, int64_t largest_conv_bytes, ConvCost cost) {
  if (setting) return *setting;
  // NOTE: on by default for half types on CUDA: python bench/gpu.py on an H100 ran resnet50
  // (b64, bf16) in 4.8 ms channels-last against 6.3 ms without (once pointwise kernels walked
  // channels-last outputs in memory order; before, 27.5 ms).
  // NOTE: on the CPU for f32 graphs with large activations or whose convolutions are estimated
  // faster channels-last (cpu_conv_cost). bench/cpu.py resnet18 (b8,
  // 224px, 2 threads; largest conv output 8x64x112x112 f32 = 25.7 MB), sampled in turns against
  // inductor (which runs every CPU convolution channels-last): 0.91x inductor contiguous, 0.98x
  // channels-last (torch 2.13, loaded machine); an earlier run there: 104 against 120 ms. At
  // smaller sizes channels-last lost (b1 64px 7.5 against 4.3 ms, b2 96px 22 against 10, b8
  // 112px 49 against 40; largest conv output 6.4 MB): hence the 16 MB threshold between the
  // two for dense networks. Depthwise-separable ones (efficientnet_b0, mobilenetv3_large_100 at
  // CI size, 1 thread) now run 1.56x / 1.25x faster channels-last: since the reductions walk
  // channels-last buffers in memory order (loop_space.cpp reduction_order), their squeeze-
  // excitation means no longer cost what the convolutions gain. Not settled: on one thread (load
  // ~30 on 2 cores) the same case ran 0.95x inductor channels-last against 1.05x contiguous;
  // re-measure on a quiet host.
  if (!dtype) return false;
  if (device_type == "cpu") {
    PyRef f32 = torch_fn("float32");
    return dtype == f32.get() && (largest_conv_bytes >= kCpuChannelsLastBytes ||
                                  cost.channels_last * kCpuChannelsLastMargin < cost.contiguous);
  }
  if (device_type != "cuda") return false;
  PyRef size = PyRef::steal(PyObject_GetAttrString(dtype, "itemsize"));
  PyRef is_float = PyRef::steal(PyObject_GetAttrString(dtype, "is_floating_point"));
  if (!size || !is_float) throw PythonError();
  return is_float.get() == Py_True && PyLong_AsLong(size.get()) == 2;
}

int channels_last(ir::Graph& graph, std::optional<bool> setting) {
  ConvSummary convs = summarize(graph);
  if (convs.count == 0) return 0;
  bool apply =
      convs.uniform && !tracks_grad(graph) &&
      prefers_channels_last(convs.device, convs.dtype, setting, convs.largest_bytes, convs.cost);
  if (!apply) return 0;
  // NOTE: capture already recorded each convolution's eager layout (capture/backend_layout.cpp
  // asks torch's own layout rule), so eager's plan is capture's examples: re-running every
  // convolution on fake tensors to learn it again cost ~90 ms of resnet18's first call.
  const Plan eager;
  FakeConv fake;
  Plan cl = plan_layout(graph, fake);
  bool restorable = cl.ok && !cl.converted.empty();
  // NOTE: one convolution alone pays its input's conversion for nothing, unless what reads it
  // reads channels innermost (swin's and ViT's patch embeddings: their layer norm over channels
  // read the contiguous output with a stride of H*W, one 0.2 ms kernel of swin_tiny on an H100).
  if (convs.count == 1) restorable = restorable && densifies(cl);
  if (restorable)
    for (const Node* out : changed_outputs(graph, eager, cl))
      restorable = restorable && restore_format(eager, out);
  if (!restorable) return 0;
  commit_channels_last(graph, eager, cl);
  return cl.channels_last_convs;
}

}  // namespace tl::passes
