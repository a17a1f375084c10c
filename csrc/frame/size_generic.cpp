#include "frame/size_generic.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <set>
#include <unordered_map>

#include "capture/backend_layout.h"
#include "capture/context.h"
#include "capture/eager_checks.h"
#include "capture/meta_cache.h"
#include "capture/torch_api.h"
#include "core/counters.h"
#include "core/dump_dir.h"
#include "core/errors.h"
#include "core/log.h"
#include "frame/dynamic_policy.h"
#include "guards/storage_aliasing.h"
#include "ir/effects.h"
#include "passes/graph_rewrite.h"
#include "pipeline/compile_graph.h"

namespace tl::frame {
namespace {

// "12.3 ms" from a to b (the recompiles log).
std::string ms_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f ms",
                std::chrono::duration<double, std::milli>(b - a).count());
  return text;
}

bool writes_out_kwarg(const ir::Node& n) {
  for (const auto& [k, v] : n.kwargs)
    if (k == "out" && !ir::is_none_or_absent(&v)) return true;
  return false;
}

// An in-place op whose only lasting effect is its write: not a draw, a hook, a backward, a seed
// or a print (as ir::visible_effect names them).
bool only_a_write(const std::string& t) {
  for (const char* word :
       {"rand", "bernoulli", "normal", "multinomial", "poisson", "uniform", "exponential", "cauchy",
        "geometric", "dropout", "hook", "backward", "grad", "seed", "print"})
    if (t.find(word) != std::string::npos) return false;
  return true;
}

// Whether the op of node n (not a placeholder or the output), run at other sizes, is the same
// op on the other sizes: "" when it is, else why not, naming the op (the recompiles log).
// NOTE: not a list of op names. What could make a graph hold this call's sizes is decided
// elsewhere: the trace reading a size (a number or a sequence from a tensor, an op returning its
// argument) makes the capture exact (CaptureResult::reads_sizes), sizes the trace computed with
// are symbolic arguments recomputed per size (evaluate_sym_arg), an op whose result the meta
// tensors cannot give (data-dependent sizes) breaks the graph, and a new size replays every op on
// meta tensors of those sizes (torch's own shape rules, as capture ran them: replay_meta). What
// is left to refuse here: an op that writes an operand (in place, `out=`), an effect beyond its
// result (hooks, backward, seeds, prints; a random draw or a grad-mode switch replays as it
// ran), a call that gives no tensor (what it does is not its result), and a callable that is not
// a torch op, a Tensor method or Python's operator (a user function is opaque). Ops whose
// view-or-copy answer follows from strides are checked per size (gives_view), and so is whether
// an in-place write overlaps what it reads (write_overlaps).
std::string op_blocker(const ir::Node& n) {
  const std::string& t = n.target_name;
  // NOTE: checks the capture adds (capture/index_bounds.h, capture/data_dependent_assert.h):
  // they read their operands at any size and give nothing.
  if (n.op == ir::OpKind::CallFunction && (t == "torchlite._index_bounds.check_index_bounds" ||
                                           t == "torchlite._asserts.check_assertion"))
    return "";
  // NOTE: an op writing its first operand (`x += y`, `relu_`, `inplace=True`, `x[:, :n] = v`,
  // `index_copy_`) writes the same tensor at every size; the rest of what it does (a new input
  // value the caller sees) is that write. `out=` stays exact: eager resizes an out= tensor whose
  // size no longer fits, a change of the tensor object itself.
  const bool writes_first = ir::writes_operand(n) && !writes_out_kwarg(n);
  if (ir::writes_operand(n) && !writes_first) return "the op " + t + " writes its out= tensor";
  if (ir::lasting_effect(n) && !(writes_first && only_a_write(t)))
    return "the op " + t + " has an effect beyond its result";
  if (t == "torch._set_grad_enabled") return "";
  PyObject* ex = n.example.get();
  bool gives_tensor = n.meta.has_value() || (ex && (PyTuple_Check(ex) || PyList_Check(ex)));
  if (!gives_tensor && !writes_first) return "the op " + t + " gives no tensor";
  if (n.op == ir::OpKind::CallMethod) {
    // NOTE: a Tensor method; `_name` ones are torch's internals (no promise about them).
    bool dunder = t.size() > 4 && t.rfind("__", 0) == 0 && t.compare(t.size() - 2, 2, "__") == 0;
    if (t.empty() || (t[0] == '_' && !dunder))
      return "the op " + t + " is not known to be size-generic";
    return "";
  }
  static const char* kNamespaces[] = {"operator.",         "torch.nn.functional.", "torch._C._nn.",
                                      "torch.special.",    "torch._C._special.",   "torch.linalg.",
                                      "torch._C._linalg.", "torch.fft.",           "torch._C._fft.",
                                      "torch.Tensor.",     "torch.functional.",    "torch."};
  for (const char* ns : kNamespaces) {
    size_t len = std::char_traits<char>::length(ns);
    if (t.compare(0, len, ns) == 0 && t.size() > len && t.find('.', len) == std::string::npos)
      return "";
  }
  return "the op " + t + " is not known to be size-generic";
}

// Ops whose result is a view of their tensor operand or a copy of it depending on its strides
// (`reshape` of a slice, `contiguous`, a memory format): the trace relied on the answer at its
// sizes, and other sizes must give the same (gives_view).
bool view_or_copy(const ir::Node& n) {
  std::string base = n.target_name;
  if (n.op == ir::OpKind::CallFunction) {
    if (base.rfind("torch.", 0) != 0 || base.find('.', 6) != std::string::npos) return false;
    base = base.substr(6);
  }
  if (base == "reshape" || base == "reshape_as" || base == "flatten" || base == "ravel" ||
      base == "unflatten" || base == "contiguous")
    return true;
  if (base != "to") return false;
  for (const auto& [k, a] : n.kwargs)
    if (k == "memory_format") return true;
  return false;
}

// Borrowed `o`: its shape and strides (read by `shape_of` and `stride_of`) appended to `key`;
// false for a non-tensor.
template <class Shape, class Stride>
bool append_layout(PyObject* o, std::vector<int64_t>& key, Shape shape_of, Stride stride_of) {
  PyRef shape = shape_of(o);
  PyRef stride = shape ? stride_of(o) : PyRef();
  if (!shape || !stride || !PyTuple_Check(shape.get()) || !PyTuple_Check(stride.get())) {
    PyErr_Clear();
    return false;
  }
  key.push_back(PyTuple_GET_SIZE(shape.get()));
  for (PyObject* t : {shape.get(), stride.get()})
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); ++i) {
      key.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(t, i)));
      if (PyErr_Occurred()) throw PythonError();
    }
  return true;
}

PyObject* shape_name() {
  static PyObject* const name = PyUnicode_InternFromString("shape");  // immortal by use
  return name;
}
PyObject* stride_name() {
  static PyObject* const name = PyUnicode_InternFromString("stride");  // immortal by use
  return name;
}

// getattr(t, name) as a set of ints (torch's mark_dynamic/mark_static attributes).
std::set<int64_t> index_set(PyObject* t, const char* name) {
  std::set<int64_t> out;
  PyRef v = PyRef::steal(PyObject_GetAttrString(t, name));
  PyRef it = v && v.get() != Py_None ? PyRef::steal(PyObject_GetIter(v.get())) : PyRef();
  while (it) {
    PyRef item = PyRef::steal(PyIter_Next(it.get()));
    if (!item) break;
    long long d = PyLong_AsLongLong(item.get());
    if (d == -1 && PyErr_Occurred()) break;
    out.insert(d);
  }
  PyErr_Clear();
  return out;
}

// mark_dynamic(t, dim, min=, max=): the range of `dim`, else [2, no bound].
guards::TensorMatch::DynamicDim dim_range(PyObject* t, int dim) {
  guards::TensorMatch::DynamicDim d{dim, 2, -1};
  PyRef ranges = PyRef::steal(PyObject_GetAttrString(t, "_dynamo_dynamic_range"));
  PyRef it =
      ranges && ranges.get() != Py_None ? PyRef::steal(PyObject_GetIter(ranges.get())) : PyRef();
  auto field = [](PyObject* r, const char* name, long long dflt) {
    PyRef v = PyRef::steal(PyObject_GetAttrString(r, name));
    long long x = v && PyLong_Check(v.get()) ? PyLong_AsLongLong(v.get()) : dflt;
    PyErr_Clear();
    return x;
  };
  while (it) {
    PyRef r = PyRef::steal(PyIter_Next(it.get()));
    if (!r) break;
    if (field(r.get(), "dim", -1) != dim) continue;
    d.min = std::max<int64_t>(2, field(r.get(), "min", 2));
    d.max = field(r.get(), "max", -1);
  }
  PyErr_Clear();
  return d;
}

bool contiguous(const ir::TensorMeta& m) {
  int64_t step = 1;
  for (size_t i = m.sizes.size(); i-- > 0;) {
    if (m.strides[i] != step) return false;
    step *= std::max<int64_t>(m.sizes[i], 1);
  }
  return true;
}

// The value an argument had in the replayed graph (new reference; null with the Python error
// set on failure): a node's example, a constant, or a container of them.
PyRef example_of(const ir::Arg& a) {
  switch (a.kind) {
    case ir::Arg::Kind::Node:
      return a.node->example;
    case ir::Arg::Kind::Const:
      return a.value;
    case ir::Arg::Kind::Tuple:
    case ir::Arg::Kind::List: {
      PyRef out = PyRef::steal(a.kind == ir::Arg::Kind::Tuple ? PyTuple_New(a.items.size())
                                                              : PyList_New(a.items.size()));
      for (size_t i = 0; out && i < a.items.size(); ++i) {
        PyRef item = example_of(a.items[i]);
        if (!item) return {};
        if (a.kind == ir::Arg::Kind::Tuple)
          PyTuple_SET_ITEM(out.get(), i, item.release());
        else
          PyList_SET_ITEM(out.get(), i, item.release());
      }
      return out;
    }
    case ir::Arg::Kind::Dict: {
      PyRef d = PyRef::steal(PyDict_New());
      for (size_t i = 0; d && i < a.items.size(); ++i) {
        PyRef v = example_of(a.items[i]);
        if (!v || PyDict_SetItem(d.get(), a.keys[i].get(), v.get()) < 0) return {};
      }
      return d;
    }
  }
  return {};
}

// `a` with its symbolic sizes evaluated at `symbols` (Arg::sym, Arg::sym_slice, Arg::fsym);
// false where a float of them cannot be computed as CPython would (it raises there).
bool evaluate_sym_arg(ir::Arg& a, const std::vector<int64_t>& symbols) {
  if (a.fsym) {
    std::optional<double> v = a.fsym->eval(symbols);
    if (!v) return false;
    a.value = PyRef::steal(PyFloat_FromDouble(*v));
    if (!a.value) throw PythonError();
    return true;
  }
  if (a.sym) {
    a.value = PyRef::steal(PyLong_FromLongLong(a.sym->eval(symbols)));
    if (!a.value) throw PythonError();
    return true;
  }
  if (a.sym_slice && a.items.size() == 3) {
    for (ir::Arg& it : a.items)
      if (!evaluate_sym_arg(it, symbols)) return false;
    a.value = PyRef::steal(
        PySlice_New(a.items[0].value.get(), a.items[1].value.get(), a.items[2].value.get()));
    if (!a.value) throw PythonError();
    return true;
  }
  bool ok = true;
  if (a.kind != ir::Arg::Kind::Const)
    for (ir::Arg& it : a.items) ok = evaluate_sym_arg(it, symbols) && ok;
  return ok;
}

// The arguments of node n as capture gave them to the meta op, from their examples (the
// replayed values): a method's tensor apart (`self`), the device of a `to` dropped (a meta
// tensor cannot be copied to a real device; `to` keeps its dtype change), every other device
// the meta device, and a factory (capture::factory_functions) given none made on meta. The
// node keeps the real call and device.
struct MetaArgs {
  PyRef self, pos, kwargs;  // kwargs: null when none
  bool ok = false;
};
MetaArgs meta_args(const ir::Node& n) {
  MetaArgs out;
  bool method = n.op == ir::OpKind::CallMethod;
  size_t first = method ? 1 : 0;
  if (n.args.size() < first) return out;
  if (method && !(out.self = example_of(n.args[0]))) return out;
  bool to = method && n.target_name == "to";
  auto is_device = [](PyObject* v) {
    return PyUnicode_Check(v) || PyObject_TypeCheck(v, reinterpret_cast<PyTypeObject*>(
                                                           capture::torch_api().device_type.get()));
  };
  std::vector<PyRef> args;
  for (size_t i = first; i < n.args.size(); ++i) {
    PyRef v = example_of(n.args[i]);
    if (!v) return out;
    if (!(to && is_device(v.get()))) args.push_back(std::move(v));
  }
  PyRef kwargs = PyRef::steal(PyDict_New());
  if (!kwargs) return out;
  PyObject* meta = capture::torch_api().meta_device.get();
  bool device_given = false;
  for (const auto& [k, a] : n.kwargs) {
    bool device = k == "device";
    if (to && device) continue;
    PyRef v = example_of(a);
    if (!v) return out;
    device_given = device_given || (device && v.get() != Py_None);
    if (PyDict_SetItemString(kwargs.get(), k.c_str(),
                             device && v.get() != Py_None ? meta : v.get()) < 0)
      return out;
  }
  if (!method && !device_given) {
    const std::string& t = n.target_name;
    std::string name = t.substr(t.rfind('.') + 1);
    if (capture::factory_functions().count(name) && name.find("_like") == std::string::npos &&
        PyDict_SetItemString(kwargs.get(), "device", meta) < 0)
      return out;
  }
  out.pos = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  if (!out.pos) return out;
  for (size_t i = 0; i < args.size(); ++i)
    PyTuple_SET_ITEM(out.pos.get(), static_cast<Py_ssize_t>(i), args[i].release());
  if (PyDict_Size(kwargs.get())) out.kwargs = std::move(kwargs);
  out.ok = true;
  return out;
}

// Whether node n (view_or_copy) returns a view of its tensor operand (or the operand itself)
// at its arguments' examples: 1 yes, 0 a copy, -1 unknown. The op itself runs on the meta
// examples (torch's meta tensors keep `_base` as real ones do; capture's meta results may be
// made by shape rules, without it).
int gives_view(const ir::Node& n) {
  if (n.args.empty() || n.args[0].kind != ir::Arg::Kind::Node) return -1;
  PyRef operand = example_of(n.args[0]);
  MetaArgs a = meta_args(n);
  if (!operand || !a.ok) {
    PyErr_Clear();
    return -1;
  }
  PyRef fn = n.op == ir::OpKind::CallMethod
                 ? PyRef::steal(PyObject_GetAttrString(a.self.get(), n.target_name.c_str()))
                 : n.target;
  PyRef r = fn ? PyRef::steal(PyObject_Call(fn.get(), a.pos.get(), a.kwargs.get())) : PyRef();
  if (r && r.get() == operand.get()) return 1;
  PyRef base = r ? PyRef::steal(PyObject_GetAttrString(operand.get(), "_base")) : PyRef();
  PyRef r_base = base ? PyRef::steal(PyObject_GetAttrString(r.get(), "_base")) : PyRef();
  if (!r_base) {
    PyErr_Clear();
    return -1;
  }
  return r_base.get() == (base.get() == Py_None ? operand.get() : base.get()) ? 1 : 0;
}

// The real device of node n's result (for a tuple result, its first tensor operand's).
PyObject* result_device(const ir::Node& n) {
  if (n.meta) return n.meta->device.get();
  for (const ir::Arg& a : n.args)
    if (a.kind == ir::Arg::Kind::Node && a.node->meta) return a.node->meta->device.get();
  return nullptr;
}

// n's result on its arguments' examples, through capture's meta path (C++ shape rules for
// common ops, a cache of torch's meta results, else the meta op) and the layout corrections
// capture makes after it: new reference, or null with no Python error set when the op raises
// at these sizes.
PyRef replay_meta(const ir::Node& n) {
  bool method = n.op == ir::OpKind::CallMethod;
  MetaArgs a = meta_args(n);
  if (!a.ok) {
    PyErr_Clear();
    return {};
  }
  // NOTE: `x.cpu()`, `x.cuda()`: capture keeps the operand's metadata (on another device).
  if (method && (n.target_name == "cpu" || n.target_name == "cuda")) return a.self;
  PyRef r = capture::meta_call(n.target.get(), method ? n.target_name : "", a.self.get(),
                               a.pos.get(), a.kwargs.get(), true);
  PyObject* device = result_device(n);
  // NOTE: the layout eager's kernel gives (a convolution or pool by backend): as capture.
  if (r && device) {
    const std::string& t = n.target_name;
    std::string name = method ? t : t.substr(t.rfind('.') + 1);
    try {
      r = capture::eager_result_layout(name, method ? nullptr : n.target.get(), a.self.get(),
                                       std::move(r), device, a.pos.get(), a.kwargs.get());
    } catch (const PythonError&) {
      r = PyRef();
    }
  }
  // NOTE: as capture predicts it (a `transpose(1, 2).contiguous()` after it is then a view at
  // every size, as it was at the capture's: gives_view).
  if (r && n.meta && n.target_name.find("scaled_dot_product_attention") != std::string::npos &&
      !n.args.empty() && n.args[0].kind == ir::Arg::Kind::Node && n.args[0].node->example) {
    try {
      const ir::Arg* p = n.args.size() > 4 ? &n.args[4] : nullptr;
      for (const auto& [k, v] : n.kwargs)
        if (k == "dropout_p") p = &v;
      const bool constant = p && p->kind == ir::Arg::Kind::Const && !p->fsym;
      const bool drops =
          capture::attention_drops(p != nullptr, constant ? p->value.get() : nullptr);
      r = capture::fused_attention_layout(std::move(r), n.args[0].node->example.get(),
                                          n.meta->device.get(), drops);
    } catch (const PythonError&) {
      r = PyRef();
    }
  }
  if (!r) PyErr_Clear();
  return r;
}

// Whether node n writes its first operand where one of its tensor operands partly overlaps the
// written memory, at its arguments' examples (capture's rule: capture::overlapping_operand;
// `real` places the graph inputs' meta storages in the real inputs' memory). Capture traced the
// op only where none did; at other sizes views can start or stop overlapping (`x[:, 1:] +=
// x[:, :-1]` shares nothing at 2 columns, everything but one column at 3): eager then raises.
// -1 when none does; -2 when an argument cannot be rebuilt (unknown).
int write_overlap(const ir::Node& n, const capture::RealStorageOf& real) {
  std::vector<PyRef> held;
  std::vector<PyObject*> args;
  for (const ir::Arg& a : n.args) {
    held.push_back(example_of(a));
    if (!held.back()) {
      PyErr_Clear();
      return -2;
    }
    args.push_back(held.back().get());
  }
  const std::string& t = n.target_name;
  std::string name = n.op == ir::OpKind::CallMethod ? t : t.substr(t.rfind('.') + 1);
  return capture::overlapping_operand(real, name, args);
}

// Which values of g share memory: for each node, the position of the first node whose value
// held the same storage (a tuple's tensors in order, -1 for a value holding no tensor). Capture's
// decisions about a write (whom it reaches, functionalize's groups) follow from it: other sizes
// must give the same pattern.
std::vector<int64_t> alias_pattern(const ir::Graph& g) {
  PyObject* tensor = capture::torch_api().tensor_type.get();
  std::unordered_map<long long, int64_t> first;
  std::vector<int64_t> out;
  int64_t index = 0;
  auto add = [&](PyObject* v) {
    int is_tensor = v ? PyObject_IsInstance(v, tensor) : 0;
    if (is_tensor < 0) throw PythonError();
    if (!is_tensor) return out.push_back(-1);
    out.push_back(first.emplace(guards::storage_id(v), index).first->second);
  };
  for (const auto& n : g.nodes()) {
    PyObject* ex = n->example.get();
    if (ex && (PyTuple_Check(ex) || PyList_Check(ex))) {
      PyRef seq = PyRef::steal(PySequence_Fast(ex, "example"));
      if (!seq) throw PythonError();
      out.push_back(-3 - PySequence_Fast_GET_SIZE(seq.get()));
      for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq.get()); ++i)
        add(PySequence_Fast_GET_ITEM(seq.get(), i));
    } else {
      add(ex);
    }
    ++index;
  }
  return out;
}

ir::Arg copy_arg(const ir::Arg& a, const std::unordered_map<const ir::Node*, ir::Node*>& map) {
  ir::Arg out = a;
  if (a.kind == ir::Arg::Kind::Node) out.node = map.at(a.node);
  for (ir::Arg& item : out.items) item = copy_arg(item, map);
  return out;
}

}  // namespace

std::string size_generic_blocker(const capture::CaptureResult& res, const CompileConfig& config,
                                 bool resumes) {
  if (res.graph_break && !resumes) return "a graph break";
  if (res.reads_sizes) return "the trace reads a tensor size: " + res.reads_sizes_why;
  for (const auto& [node, dim] : res.sym_table) {
    bool found = false;
    for (const auto& n : res.graph->nodes()) found = found || n.get() == node;
    if (!found) return "a size read of a value not in the graph";
  }
  if (config.backend && config.backend.get() != Py_None) return "a backend= compiler";
  if (!res.graph) return "no graph";
  for (const auto& n : res.graph->nodes()) {
    if (n->op == ir::OpKind::Placeholder) {
      if (!n->meta) return "a non-tensor input";
      // NOTE: CPU and CUDA kernels both take their sizes at run time (a new size compiles
      // no kernel whose text it shares with an earlier one).
      std::string device = passes::device_type(n->meta->device.get());
      if (device != "cpu" && device != "cuda") return "a tensor on " + device;
      continue;
    }
    if (n->op == ir::OpKind::Output) continue;
    std::string blocker = op_blocker(*n);
    if (!blocker.empty()) return blocker;
    // NOTE: what autograd records, not the requires_grad flag: under no_grad a view of a
    // parameter (ViT's `cls_token.expand(b, -1, -1)`, `pos_embed[:, :n]`) reports it too.
    if (n->meta && n->meta->requires_grad && pipeline::autograd_tracks(*n))
      return "autograd records the graph";
  }
  return "";
}

std::string make_sizes_dynamic(capture::CaptureResult& res, bool all_dims) {
  std::string made;
  std::vector<ir::Node*> ph = res.graph->placeholders();
  for (size_t i = 0; i < ph.size() && i < res.example_inputs.size(); ++i) {
    PyObject* t = res.example_inputs[i].get();
    if (!t || !ph[i]->meta || !ph[i]->source || !contiguous(*ph[i]->meta)) continue;
    std::set<int64_t> marked = index_set(t, "_dynamo_dynamic_indices");
    for (int64_t d : index_set(t, "_dynamo_weak_dynamic_indices")) marked.insert(d);
    std::set<int64_t> fixed = index_set(t, "_dynamo_static_indices");
    // NOTE: a model's parameters keep their sizes: automatic dims are the inputs' only.
    int is_param = PyObject_IsInstance(t, capture::torch_api().parameter_type.get());
    if (is_param < 0) throw PythonError();
    if (is_param && marked.empty()) continue;
    std::vector<guards::TensorMatch::DynamicDim> dims;
    const std::vector<int64_t>& sizes = ph[i]->meta->sizes;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] < 2 || fixed.count(static_cast<int64_t>(d))) continue;
      if (!all_dims && !marked.count(static_cast<int64_t>(d))) continue;
      guards::TensorMatch::DynamicDim r = dim_range(t, static_cast<int>(d));
      if (sizes[d] < r.min || (r.max >= 0 && sizes[d] > r.max)) continue;
      dims.push_back(r);
    }
    if (dims.empty()) continue;
    std::string names;
    for (const auto& d : dims)
      names += (names.empty() && made.empty() ? "" : ", ") + ph[i]->source->str() + ".size(" +
               std::to_string(d.dim) + ")";
    if (res.guards.make_sizes_dynamic(ph[i]->source, std::move(dims))) made += names;
  }
  // NOTE: a tensor the graph does not read (a resume function's argument used only before the
  // break, an input dropped as unused) is guarded for what the trace read of it: a size read
  // is a symbol (with its relations) or makes the entry exact (reads_sizes), so its sizes may
  // change as freely as the graph inputs'.
  if (!made.empty() && all_dims) {
    std::set<std::string> graph_inputs;
    for (ir::Node* p : ph)
      if (p->source) graph_inputs.insert(p->source->str());
    res.guards.make_sizes_dynamic_except(graph_inputs, 2, true);
  }
  return made;
}

bool relations_to_guards(capture::CaptureResult& res) {
  std::vector<guards::SizeRelations::Symbol> symbols;
  for (const auto& [node, dim] : res.sym_table) {
    if (!node || node->op != ir::OpKind::Placeholder || !node->source) return false;
    symbols.push_back({node->source, dim});
  }
  if (!res.sym_relations.empty())
    res.guards.set_size_relations(guards::SizeRelations(std::move(symbols), res.sym_relations));
  return true;
}

std::shared_ptr<ir::Graph> clone_graph(const ir::Graph& g) {
  auto out = std::make_shared<ir::Graph>();
  std::unordered_map<const ir::Node*, ir::Node*> map;
  for (const auto& n : g.nodes()) {
    std::vector<ir::Arg> args;
    for (const ir::Arg& a : n->args) args.push_back(copy_arg(a, map));
    std::vector<std::pair<std::string, ir::Arg>> kwargs;
    for (const auto& [k, a] : n->kwargs) kwargs.emplace_back(k, copy_arg(a, map));
    ir::Node* c = nullptr;
    switch (n->op) {
      case ir::OpKind::Placeholder:
        c = out->add_placeholder(n->name, n->source);
        break;
      case ir::OpKind::CallFunction:
        c = out->add_call_function(n->target, std::move(args), std::move(kwargs));
        break;
      case ir::OpKind::CallMethod:
        c = out->add_call_method(n->target_name, std::move(args), std::move(kwargs));
        break;
      case ir::OpKind::Output:
        c = out->set_output(std::move(args));
        break;
    }
    c->name = n->name;
    c->target_name = n->target_name;
    c->meta = n->meta;
    c->example = n->example;
    c->source = n->source;
    c->location = n->location;
    map[n.get()] = c;
  }
  return out;
}

void drop_examples(ir::Graph& g) {
  for (const auto& n : g.nodes()) n->example = PyRef();
}

SizeInstances::SizeInstances(std::shared_ptr<const ir::Graph> captured, pipeline::PassContext ctx,
                             std::string func_name)
    : captured_(std::move(captured)), ctx_(std::move(ctx)), func_name_(std::move(func_name)) {
  ctx_.runtime_sizes = true;
  // NOTE: the capture's trace shows the first compile; instantiate() traces the next few.
  ctx_.trace_dir = "";
  for (const auto& n : captured_->nodes())
    writes_ = writes_ || (n->op != ir::OpKind::Placeholder && n->op != ir::OpKind::Output &&
                          ir::writes_operand(*n));
  if (writes_) captured_aliases_ = alias_pattern(*captured_);
}

std::string SizeInstances::per_size_checks() const {
  std::string out;
  for (const auto& n : captured_->nodes()) {
    if (n->op == ir::OpKind::Placeholder || n->op == ir::OpKind::Output || !ir::writes_operand(*n))
      continue;
    bool reads = false;  // NOTE: `relu_()` reads only what it writes
    for (size_t i = 1; i < n->args.size(); ++i)
      reads = reads || n->args[i].kind == ir::Arg::Kind::Node;
    if (reads)
      out += "WRITE_OVERLAP " + n->target_name +
             " writes no memory an operand partly overlaps (decided per new size)  # " +
             n->location + "\n";
  }
  return out;
}

std::vector<int64_t> SizeInstances::layout_key(PyObject* const* inputs, size_t n) {
  // NOTE: per call: through the `shape` getter and `stride` method the inputs' type resolves
  // to (found once, valid while the type's version tag holds), not by attribute name.
  auto fast = [&](PyObject* o) {
    PyTypeObject* type = Py_TYPE(o);
    if (type != layout_type_ || type->tp_version_tag != layout_tag_ || !layout_tag_) {
      layout_type_ = type;
      layout_tag_ = 0;
      PyObject* shape = _PyType_Lookup(type, shape_name());    // borrowed
      PyObject* stride = _PyType_Lookup(type, stride_name());  // borrowed
      if (shape && Py_IS_TYPE(shape, &PyGetSetDescr_Type) &&
          reinterpret_cast<PyGetSetDescrObject*>(shape)->d_getset->get && stride &&
          Py_IS_TYPE(stride, &PyMethodDescr_Type)) {
        shape_getter_ = reinterpret_cast<PyGetSetDescrObject*>(shape)->d_getset;
        stride_method_ = PyRef::borrow(stride);
        layout_tag_ = type->tp_version_tag;
      }
    }
    return layout_tag_ != 0;
  };
  auto shape_of = [&](PyObject* o) {
    return PyRef::steal(fast(o) ? shape_getter_->get(o, shape_getter_->closure)
                                : PyObject_GetAttr(o, shape_name()));
  };
  auto stride_of = [&](PyObject* o) {
    return PyRef::steal(fast(o) ? PyObject_Vectorcall(stride_method_.get(), &o, 1, nullptr)
                                : PyObject_CallMethodNoArgs(o, stride_name()));
  };
  std::vector<int64_t> key;
  key.reserve(n * 8);
  for (size_t i = 0; i < n; ++i)
    if (!append_layout(inputs[i], key, shape_of, stride_of)) key.push_back(-1);
  return key;
}

std::vector<std::pair<size_t, int>> symbol_positions(const capture::CaptureResult& res) {
  std::vector<std::pair<size_t, int>> out;
  for (const auto& [node, dim] : res.sym_table) {
    size_t index = 0;
    for (const auto& n : res.graph->nodes()) {
      if (n.get() == node) break;
      ++index;
    }
    out.emplace_back(index, dim);
  }
  return out;
}

void SizeInstances::set_symbols(const capture::CaptureResult& res,
                                std::vector<std::pair<size_t, int>> positions, bool in_guards) {
  symbols_ = std::move(positions);
  relations_ = res.sym_relations;
  // NOTE: relations the guards check need no replay to refuse a size: a served call fetches
  // its inputs once (the run), not twice (serves() and the run).
  may_refuse_ = (!relations_.empty() && !in_guards) || writes_;
  for (const auto& n : res.graph->nodes())
    if (n->op != ir::OpKind::Placeholder && n->op != ir::OpKind::Output && view_or_copy(*n))
      may_refuse_ = true;
}

bool SizeInstances::serves(PyObject* const* inputs, size_t n,
                           const std::shared_ptr<runtime::CompiledGraph>& first,
                           std::shared_ptr<runtime::CompiledGraph>& graph) {
  std::vector<int64_t> key = layout_key(inputs, n);
  if (key == first_key_) {
    graph = first;
    return true;
  }
  auto it = by_layout_.find(key);
  if (it == by_layout_.end()) it = add(std::move(key), instantiate(inputs, n));
  graph = it->second.graph;
  return it->second.served;
}

std::map<std::vector<int64_t>, SizeInstances::Instance>::iterator SizeInstances::add(
    std::vector<int64_t> key, Instance made) {
  // NOTE: a bound on the compiled graphs kept per entry (a size sweep that never ends).
  constexpr size_t kMaxLayouts = 64;
  if (by_layout_.size() >= kMaxLayouts) by_layout_.clear();
  return by_layout_.emplace(std::move(key), std::move(made)).first;
}

void SizeInstances::remember_first(const std::vector<PyRef>& example_inputs) {
  std::vector<PyObject*> raw = borrowed(example_inputs);
  first_key_ = layout_key(raw.data(), raw.size());
}

std::shared_ptr<runtime::CompiledGraph> SizeInstances::get(
    PyObject* const* inputs, size_t n, const std::shared_ptr<runtime::CompiledGraph>& first) {
  std::vector<int64_t> key = layout_key(inputs, n);
  if (key == first_key_) return first;
  auto it = by_layout_.find(key);
  // NOTE: null (these sizes run eagerly) is kept too, so it is not retried on every call.
  if (it == by_layout_.end()) it = add(std::move(key), instantiate(inputs, n));
  return it->second.served ? it->second.graph : nullptr;
}

std::string SizeInstances::failed_relation(const std::vector<int64_t>& symbols,
                                           const std::vector<bool>& bound) const {
  // NOTE: for the log only. A relation false whatever the symbols not replayed yet are (two
  // far-apart values) is one these sizes break: the usual reason an op then raises (a size
  // the trace specialised kept its old value).
  std::vector<int64_t> low = symbols, high = symbols;
  for (size_t k = 0; k < bound.size(); ++k)
    if (!bound[k]) low[k] = 2, high[k] = int64_t{1} << 20;
  for (const ir::SymRelation& r : relations_) {
    try {
      if (!r.holds(low) && !r.holds(high))
        return " (the trace relied on " + r.str() + ", " + r.where + ")";
    } catch (const std::exception&) {  // NOTE: a division by zero at these values
    }
  }
  return "";
}

namespace {
// "passes 9.1 ms (partition 4.0, move_reshapes 2.2, ...), kernels 3.0 ms": where a compile for
// new sizes went, the three slowest passes named.
std::string compile_phases(const pipeline::CompileResult& ex) {
  auto ms = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", v);
    return std::string(buf);
  };
  std::vector<size_t> order(ex.pass_ms.size());
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) order[i] = i, total += ex.pass_ms[i];
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return ex.pass_ms[a] > ex.pass_ms[b]; });
  std::string out = "passes " + ms(total) + " ms (";
  for (size_t i = 0; i < order.size() && i < 3; ++i)
    out += (i ? ", " : "") + ex.passes[order[i]] + " " + ms(ex.pass_ms[order[i]]);
  return out + "), kernels " + ms(ex.kernels_ms) + " ms";
}
}  // namespace

SizeInstances::Instance SizeInstances::instantiate(PyObject* const* inputs, size_t n) {
  // NOTE: the collector is not paused here either (frame/eval_hook.cpp, lookup_or_compile).
  auto started = std::chrono::steady_clock::now();
  std::shared_ptr<ir::Graph> g = clone_graph(*captured_);
  std::vector<ir::Node*> ph = g->placeholders();
  TL_CHECK(ph.size() == n) << "a size-generic graph got " << n << " inputs for " << ph.size()
                           << " placeholders";
  PyRef empty_strided = passes::torch_fn("empty_strided");
  // Where each input's meta storage is in the real memory (a graph that writes: its overlaps).
  std::unordered_map<long long, capture::CaptureContext::RealStorage> real_storages;
  for (size_t i = 0; i < n; ++i) {
    PyRef shape = PyRef::steal(PyObject_GetAttr(inputs[i], shape_name()));
    PyRef stride =
        shape ? PyRef::steal(PyObject_CallMethodNoArgs(inputs[i], stride_name())) : PyRef();
    if (!stride) throw PythonError();
    PyRef args = PyRef::steal(PyTuple_Pack(2, shape.get(), stride.get()));
    PyRef kwargs = PyRef::steal(
        Py_BuildValue("{s:O,s:s}", "dtype", ph[i]->meta->dtype.get(), "device", "meta"));
    if (!args || !kwargs) throw PythonError();
    PyRef ex = PyRef::steal(PyObject_Call(empty_strided.get(), args.get(), kwargs.get()));
    if (!ex) throw PythonError();
    ph[i]->meta = passes::meta_of(ex.get(), ph[i]->meta->device, ph[i]->meta->requires_grad);
    ph[i]->example = ex;
    if (writes_) {
      PyRef item = PyRef::steal(PyObject_CallMethod(inputs[i], "element_size", nullptr));
      PyRef offset =
          item ? PyRef::steal(PyObject_CallMethod(inputs[i], "storage_offset", nullptr)) : PyRef();
      long long bytes =
          offset ? PyLong_AsLongLong(item.get()) * PyLong_AsLongLong(offset.get()) : 0;
      if (!offset || PyErr_Occurred()) throw PythonError();
      real_storages[guards::storage_id(ex.get())] = {guards::storage_id(inputs[i]), bytes};
    }
  }
  auto real_storage = [&](long long meta_storage) {
    auto it = real_storages.find(meta_storage);
    return it == real_storages.end()
               ? std::nullopt
               : std::optional<capture::CaptureContext::RealStorage>(it->second);
  };
  // The symbols' values at these sizes, filled as the nodes they read are replayed.
  std::vector<int64_t> symbols(symbols_.size(), 0);
  std::vector<bool> bound(symbols_.size(), false);
  auto bind = [&](size_t index, const ir::Node& node) {
    for (size_t k = 0; k < symbols_.size(); ++k) {
      if (symbols_[k].first != index) continue;
      bound[k] = true;
      const std::vector<int64_t>& sizes = node.meta->sizes;
      int d = symbols_[k].second;
      TL_CHECK(node.meta && d >= 0 && d < static_cast<int>(sizes.size()))
          << "size symbol of " << node.name << " out of range";
      symbols[k] = sizes[d];
    }
  };
  size_t index = 0;
  for (const auto& node : g->nodes()) {
    size_t at = index++;
    if (node->op == ir::OpKind::Placeholder) {
      if (node->meta) bind(at, *node);
      continue;
    }
    if (node->op != ir::OpKind::CallFunction && node->op != ir::OpKind::CallMethod) continue;
    // NOTE: a grad-mode switch has no value to recompute (and must not run here).
    if (node->target_name == "torch._set_grad_enabled") continue;
    // NOTE: the size arguments the trace computed (x.view(b, t, 4, d)) are recomputed from
    // these sizes; the captured numbers hold only at the capture's.
    bool computed = true;
    for (ir::Arg& a : node->args) computed = evaluate_sym_arg(a, symbols) && computed;
    for (auto& [k, a] : node->kwargs) computed = evaluate_sym_arg(a, symbols) && computed;
    if (!computed) {
      if (log_enabled("recompiles"))
        log_event("recompiles", func_name_ + ": a float computed from sizes for " +
                                    node->target_name + " (" + node->location +
                                    ") raises at the new sizes: capturing again");
      return Instance{nullptr, false};
    }
    // NOTE: before the op runs, on the operands it reads, as capture checked it.
    if (writes_ && ir::writes_operand(*node)) {
      int overlap = write_overlap(*node, real_storage);
      if (overlap != -1) {
        if (log_enabled("recompiles"))
          log_event("recompiles",
                    func_name_ + ": " + node->target_name + " (" + node->location + ") " +
                        (overlap == -2 ? "has operands that cannot be rebuilt"
                                       : "writes memory its operand " + std::to_string(overlap) +
                                             " partly overlaps at the new sizes") +
                        ": capturing again");
        return Instance{nullptr, false};
      }
    }
    PyRef ex = replay_meta(*node);
    if (!ex) {
      // NOTE: with relations on sizes, the op may raise because this size is not the trace's
      // case (a branch chose it): capture again. Without, eager raises the real error.
      if (log_enabled("recompiles"))
        log_event("recompiles",
                  func_name_ + ": " + node->target_name + " (" + node->location +
                      ") raised at the new sizes: " +
                      (relations_.empty() ? "this call runs eagerly"
                                          : "capturing again" + failed_relation(symbols, bound)));
      return Instance{nullptr, relations_.empty()};
    }
    PyRef device = node->meta ? node->meta->device : PyRef();
    // NOTE: reshape, flatten, contiguous, ... give a view or a copy depending on strides: the
    // trace relied on the answer it got; other sizes must give the same one.
    if (view_or_copy(*node)) {
      int now = gives_view(*node), then = gives_view(*captured_->nodes()[at]);
      if (now < 0 || now != then) {
        if (log_enabled("recompiles"))
          log_event("recompiles", func_name_ + ": " + node->target_name + " (" + node->location +
                                      ") changes between view and copy: capturing again");
        return Instance{nullptr, false};
      }
    }
    node->example = ex;
    if (device) node->meta = passes::meta_of(ex.get(), device, false);
    if (node->meta) bind(at, *node);
  }
  if (writes_ && alias_pattern(*g) != captured_aliases_) {
    if (log_enabled("recompiles"))
      log_event("recompiles", func_name_ +
                                  ": values share memory otherwise than in the trace at the new "
                                  "sizes (the graph writes in place): capturing again");
    return Instance{nullptr, false};
  }
  for (const ir::SymRelation& r : relations_) {
    if (r.holds(symbols)) continue;
    if (log_enabled("recompiles"))
      log_event("recompiles", func_name_ + ": the trace relied on " + r.str() + " (" + r.where +
                                  "), false at the new sizes: capturing again");
    return Instance{nullptr, false};
  }
  auto replayed = std::chrono::steady_clock::now();
  pipeline::PassContext ctx = ctx_;
  ctx.static_sizes = without_leading_input_sizes(ctx_.static_sizes, inputs, n);
  // NOTE: under trace, the first few instances of each entry dump their pipeline beside the
  // capture's folder (<n>_<function>_size_instance/: the passes, lowered.txt, sizes.txt): what a
  // new size decided, to compare with another size's. A bound: a size sweep makes one per size.
  constexpr int kTracedInstances = 4;
  if (ctx_.settings.trace && traced_instances_ < kTracedInstances) {
    ++traced_instances_;
    ctx.trace_dir =
        pipeline::new_trace_folder(ctx_.settings.debug_dir, func_name_ + "_size_instance");
    if (!ctx.trace_dir.empty()) {
      std::string text = "symbols:";
      for (size_t k = 0; k < symbols.size(); ++k)
        text += " s" + std::to_string(k) + "=" + std::to_string(symbols[k]);
      text += "\ninputs:";
      for (ir::Node* p : ph) text += " " + (p->meta ? p->meta->str() : std::string("-"));
      write_dump(ctx.trace_dir + "sizes.txt", text + "\n");
    }
  }
  pipeline::CompileResult ex = pipeline::compile_graph(g, ctx);
  if (!ex.executable->compiled() || ex.training_fn) {
    if (log_enabled("recompiles"))
      log_event("recompiles", func_name_ + ": no kernels at the new sizes (" + ex.no_kernels +
                                  "): they run eagerly");
    return Instance{nullptr, true};
  }
  // NOTE: the nodes' meta examples (a tensor per node, with its storage object, ~200 Python
  // objects a layout for a 2-layer GPT-2) served the replay and the passes; the compiled graph
  // runs without them (runtime/ reads TensorMeta and arguments only) and the instance lives as
  // long as its layout stays in by_layout_. Kept, every new length added them to what the
  // cyclic collector walks: a full collection (~0.5 s with transformers loaded) came sooner.
  // No trace or explain reads an instance's graph (trace_dir is "" here).
  drop_examples(*g);
  counters().size_instances++;
  if (log_enabled("recompiles"))
    log_event("recompiles", func_name_ + ": compiled for new sizes without a capture (replay " +
                                ms_between(started, replayed) + ", compile " +
                                ms_between(replayed, std::chrono::steady_clock::now()) + ": " +
                                compile_phases(ex) + ")");
  return Instance{ex.executable->shared_compiled(), true};
}

}  // namespace tl::frame
