#include "passes/fold_batch_norm.h"

#include <algorithm>
#include <optional>

#include "core/errors.h"
#include "passes/graph_info.h"
#include "passes/graph_rewrite.h"

namespace tl::passes {
namespace {

using ir::Arg;
using ir::Node;

// One batch norm's operands, whichever of the three signatures it came in.
struct BatchNorm {
  const Node *x = nullptr, *mean = nullptr, *var = nullptr, *gamma = nullptr, *beta = nullptr;
  double eps = 1e-5;
  bool tuple_result = false;  // aten's (out, save_mean, save_rstd)
};

bool is_false(const Arg* a) {
  return a && a->kind == Arg::Kind::Const &&
         (a->value.get() == Py_False ||
          (PyLong_CheckExact(a->value.get()) && PyLong_AsLong(a->value.get()) == 0));
}

// An optional tensor operand: ok unless it is something other than a tensor or None.
bool optional_tensor(const Node& n, size_t pos, const char* name, const Node** out) {
  *out = tensor_arg(n, pos, name);
  return *out || is_none_or_absent(find_arg(n, pos, name));
}

std::optional<BatchNorm> inference_batch_norm(const Node& n, std::string* why) {
  BatchNorm bn;
  const std::string& t = n.target_name;
  bool ok = n.op == ir::OpKind::CallFunction;
  size_t eps_pos = 7;
  if (ok && t == "torch.nn.functional.batch_norm") {
    // (input, running_mean, running_var, weight, bias, training, momentum, eps)
    const Arg* training = find_arg(n, 5, "training");  // defaults to False
    ok = optional_tensor(n, 3, "weight", &bn.gamma) && optional_tensor(n, 4, "bias", &bn.beta) &&
         (!training || is_false(training));
    bn.mean = tensor_arg(n, 1, "running_mean"), bn.var = tensor_arg(n, 2, "running_var");
  } else if (ok && t == "torch.batch_norm") {
    // (input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled)
    ok = optional_tensor(n, 1, "weight", &bn.gamma) && optional_tensor(n, 2, "bias", &bn.beta) &&
         is_false(find_arg(n, 5, "training"));
    bn.mean = tensor_arg(n, 3, "running_mean"), bn.var = tensor_arg(n, 4, "running_var");
  } else if (ok && t.find("_native_batch_norm_legit_no_training") != std::string::npos) {
    // (input, weight, bias, running_mean, running_var, momentum, eps)
    ok = optional_tensor(n, 1, "weight", &bn.gamma) && optional_tensor(n, 2, "bias", &bn.beta);
    bn.mean = tensor_arg(n, 3, "running_mean"), bn.var = tensor_arg(n, 4, "running_var");
    bn.tuple_result = true;
    eps_pos = 6;
  } else {
    *why = "not a batch norm";
    return std::nullopt;
  }
  bn.x = tensor_arg(n, 0, "input");
  const Arg* eps = find_arg(n, eps_pos, "eps");
  if (ok && eps && !number_arg(n, eps_pos, "eps", &bn.eps)) ok = false;
  if (!ok || !bn.x) {
    *why = "not an inference batch norm (training mode, or operands not understood)";
    return std::nullopt;
  }
  if (!bn.mean || !bn.var) {
    *why = "no running statistics";
    return std::nullopt;
  }
  return bn;
}

// conv1d/2d/3d, or torch.convolution when not transposed.
bool is_convolution(const Node& n) {
  if (n.op != ir::OpKind::CallFunction) return false;
  const std::string& t = n.target_name;
  if (t == "torch.convolution") return is_false(find_arg(n, 6, "transposed"));
  return t == "torch.conv1d" || t == "torch.conv2d" || t == "torch.conv3d";
}

const ir::Arg* conv_bias(const Node& conv) { return find_arg(conv, 2, "bias"); }

bool foldable_dtype(PyObject* dtype) {
  for (const char* name : {"float32", "float64", "float16", "bfloat16"})
    if (torch_fn(name).get() == dtype) return true;
  return false;
}

bool is_half(PyObject* dtype) {
  return torch_fn("float16").get() == dtype || torch_fn("bfloat16").get() == dtype;
}

int64_t numel(const ir::TensorMeta& m) {
  int64_t n = 1;
  for (int64_t s : m.sizes) n *= s;
  return n;
}

// The graph's users of `n` (the output node included).
std::vector<Node*> users_of(const ir::Graph& g, const Node* n) {
  std::vector<Node*> out;
  for (auto& u : g.nodes())
    for (const Node* in : node_inputs(*u))
      if (in == n) out.push_back(u.get());
  return out;
}

std::string blocker(const ir::Graph& g, const Node& n, const GraphInfo& info) {
  std::string why;
  std::optional<BatchNorm> bn = inference_batch_norm(n, &why);
  if (!bn) return why;
  const Node* conv = bn->x;
  if (!is_convolution(*conv)) return "its input is not a convolution";
  const Node* w = tensor_arg(*conv, 1, "weight");
  const Node* in = tensor_arg(*conv, 0, "input");
  const Node* b = tensor_arg(*conv, 2, "bias");
  if (!w || !in || (!b && !is_none_or_absent(conv_bias(*conv))))
    return "the convolution's operands are not understood";
  if (info.users_of(conv).size() != 1) return "the convolution's output has other users";
  if (info.segment.at(conv) != info.segment.at(&n))
    return "a side effect (in-place op, grad mode switch) lies between them";
  if (bn->tuple_result)
    for (const Node* u : info.users_of(&n)) {
      double idx = -1;
      bool first = u->target_name == "operator.getitem" && number_arg(*u, 1, nullptr, &idx);
      if (!first || (idx != 0 && !info.users_of(u).empty()))
        return "batch norm statistics outputs are used";
    }
  const Node* result = &n;
  if (bn->tuple_result)
    for (const Node* u : info.users_of(&n))
      if (!info.users_of(u).empty()) result = u;  // the getitem(…, 0) read
  if (!conv->meta || !result->meta) return "no tensor metadata";
  if (conv->meta->requires_grad || result->meta->requires_grad)
    return "autograd tracks the result (grad mode on and parameters require grad)";
  const int64_t channels = w->meta->sizes.empty() ? -1 : w->meta->sizes[0];
  for (const Node* t : {result, in, w, b, bn->mean, bn->var, bn->gamma, bn->beta}) {
    if (!t) continue;
    if (t->meta->dtype.get() != conv->meta->dtype.get() || !foldable_dtype(t->meta->dtype.get()))
      return "dtypes differ or are not f32/f64/f16/bf16";
    int same_device =
        PyObject_RichCompareBool(t->meta->device.get(), conv->meta->device.get(), Py_EQ);
    if (same_device != 1) {
      PyErr_Clear();
      return "operands on several devices";
    }
    bool per_channel = t == b || t == bn->mean || t == bn->var || t == bn->gamma || t == bn->beta;
    if (per_channel && t->meta->sizes != std::vector<int64_t>{channels})
      return "statistics do not have one value per output channel";
  }
  // NOTE: bench/cpu.py resnet18 (b8, 224px, 2 threads): folding every BN was 1-3% slower; the
  // BN already fuses into the next pointwise kernel, so on the CPU the fold saves little and
  // the per-call weight pass (read + write W) costs more where W outgrows the activation.
  if (device_type(conv->meta->device.get()) == "cpu" && 2 * numel(*w->meta) > numel(*conv->meta))
    return "on the CPU the per-call weight fold costs more than it saves (large weight)";
  return "";
}

// Builds the folded weight and bias before `bn`; returns them.
std::pair<Node*, Node*> build_fold(ir::Graph& g, Node* bn_node, const BatchNorm& bn, const Node* w,
                                   const Node* b) {
  const PyRef& dev = w->meta->device;
  PyObject* dtype = w->meta->dtype.get();
  const bool half = is_half(dtype);  // NOTE: fold in f32, round once, as eager's BN computes
  auto call = [&](const char* fn, std::vector<Arg> args) {
    return insert_call(g, bn_node, torch_fn(fn), "", std::move(args), {}, dev);
  };
  auto operand = [&](const Node* t) {
    Node* n = const_cast<Node*>(t);
    return half ? insert_call(g, bn_node, {}, "float", {Arg::of_node(n)}, {}, dev) : n;
  };
  auto num = [](double v) { return Arg::constant(PyRef::steal(PyFloat_FromDouble(v))); };
  Node* s =
      call("rsqrt", {Arg::of_node(call("add", {Arg::of_node(operand(bn.var)), num(bn.eps)}))});
  if (bn.gamma) s = call("mul", {Arg::of_node(s), Arg::of_node(operand(bn.gamma))});
  std::vector<Arg> shape{Arg::constant(PyRef::steal(PyLong_FromLong(-1)))};
  for (size_t d = 1; d < w->meta->sizes.size(); ++d)
    shape.push_back(Arg::constant(PyRef::steal(PyLong_FromLong(1))));
  Node* s_col = call("reshape", {Arg::of_node(s), Arg::tuple(std::move(shape))});
  Node* weight = call("mul", {Arg::of_node(operand(w)), Arg::of_node(s_col)});
  Node* shift = b ? call("sub", {Arg::of_node(operand(b)), Arg::of_node(operand(bn.mean))})
                  : call("neg", {Arg::of_node(operand(bn.mean))});
  Node* bias = call("mul", {Arg::of_node(shift), Arg::of_node(s)});
  if (bn.beta) bias = call("add", {Arg::of_node(bias), Arg::of_node(operand(bn.beta))});
  if (half) {
    PyRef dt = PyRef::borrow(dtype);
    weight = insert_call(g, bn_node, {}, "to", {Arg::of_node(weight), Arg::constant(dt)}, {}, dev);
    bias = insert_call(g, bn_node, {}, "to", {Arg::of_node(bias), Arg::constant(dt)}, {}, dev);
  }
  return {weight, bias};
}

void set_arg(Node& n, size_t pos, const char* name, Arg value) {
  if (Arg* a = find_arg(n, pos, name)) {
    *a = std::move(value);
  } else if (n.args.size() == pos) {
    n.args.push_back(std::move(value));
  } else {
    n.kwargs.emplace_back(name, std::move(value));
  }
}

void fold(ir::Graph& g, Node* bn_node, const GraphInfo& info) {
  std::string why;
  BatchNorm bn = *inference_batch_norm(*bn_node, &why);
  Node* conv = const_cast<Node*>(bn.x);
  const Node* w = tensor_arg(*conv, 1, "weight");
  const Node* b = tensor_arg(*conv, 2, "bias");
  auto [weight, bias] = build_fold(g, bn_node, bn, w, b);
  set_arg(*conv, 1, "weight", Arg::of_node(weight));
  set_arg(*conv, 2, "bias", Arg::of_node(bias));
  // The statistics may be read (placeholders) after the convolution: it moves
  // down to the batch norm's place, past nodes that do not read it.
  g.move_before(conv, bn_node);
  std::vector<const Node*> dead{bn_node};
  std::vector<Node*> replaced{bn_node};
  if (bn.tuple_result) {
    replaced.clear();
    for (const Node* u : info.users_of(bn_node)) replaced.push_back(const_cast<Node*>(u));
    dead.insert(dead.begin(), replaced.begin(), replaced.end());
  }
  for (Node* r : replaced) replace_uses(users_of(g, r), r, conv);
  for (const Node* d : dead) g.erase(d);
}

}  // namespace

std::string fold_batch_norm_blocker(const ir::Graph& graph, const ir::Node& bn) {
  return blocker(graph, bn, analyze_graph(graph));
}

int fold_batch_norm(ir::Graph& graph) {
  // NOTE: off by default (the fold_batch_norm setting). Batch norm already runs inside the
  // pointwise kernel after the conv, so folding saved nothing measurable (bench/cpu.py resnet18,
  // and resnet50 b64 bf16 on an H100: 7.6 ms folded, 6.4 ms not) while adding two kernels per conv;
  // and it changes rounding enough that timm inception_v3 (random weights, activations near 1e5)
  // left the corpus tolerance.
  std::vector<Node*> candidates;
  for (auto& n : graph.nodes())
    if (n->target_name.find("batch_norm") != std::string::npos) candidates.push_back(n.get());
  int folded = 0;
  for (Node* bn : candidates) {
    GraphInfo info = analyze_graph(graph);  // NOTE: each fold moves nodes
    if (!blocker(graph, *bn, info).empty()) continue;
    fold(graph, bn, info);
    ++folded;
  }
  return folded;
}

}  // namespace tl::passes
