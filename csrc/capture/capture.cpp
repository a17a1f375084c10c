#include "capture/capture.h"

#include <chrono>
#include <unordered_map>

#include "capture/context.h"
#include "capture/graph_break.h"
#include "capture/torch_api.h"
#include "capture/tracer.h"
#include "core/errors.h"

namespace tl::capture {
namespace {

std::string utf8(PyObject* s) {
  const char* c = PyUnicode_AsUTF8(s);
  if (!c) throw PythonError();
  return c;
}

// Converts the values that outlive the frame into residual instructions,
// collecting the tensors the graph must return.
class ResidualBuilder {
 public:
  explicit ResidualBuilder(CaptureContext& ctx) : ctx_(ctx) {}

  ir::Residual build(const ValuePtr& v) {
    ir::Residual r;
    switch (v->kind) {
      case VKind::Tensor: {
        r.kind = ir::Residual::Kind::GraphOutput;
        auto it = output_index_.find(v->node);
        if (it == output_index_.end()) {
          it = output_index_.emplace(v->node, static_cast<int>(outputs_.size())).first;
          outputs_.push_back(ir::Arg::of_node(v->node));
        }
        r.index = it->second;
        return r;
      }
      case VKind::Const:
        if (v->source && !is_immutable_constant(v->obj.get())) {
          r.kind = ir::Residual::Kind::Source;
          r.source = v->source;
          return r;
        }
        r.kind = ir::Residual::Kind::Const;
        r.value = v->obj;
        return r;
      case VKind::Tuple:
        for (auto& item : v->items) r.items.push_back(build(item));
        if (v->named_type) {
          r.kind = ir::Residual::Kind::NamedTuple;
          r.value = v->named_type;
        } else {
          r.kind = ir::Residual::Kind::Tuple;
        }
        return r;
      case VKind::List:
      case VKind::Dict:
        if (v->source) {  // the caller's own container, mutations replayed separately
          r.kind = ir::Residual::Kind::Source;
          r.source = v->source;
          return r;
        }
        for (auto& item : v->items) r.items.push_back(build(item));
        r.kind = v->kind == VKind::List ? ir::Residual::Kind::List : ir::Residual::Kind::Dict;
        r.keys = v->keys;
        return r;
      case VKind::Module:
      case VKind::Object:
        if (v->source) {
          r.kind = ir::Residual::Kind::Source;
          r.source = v->source;
          return r;
        }
        return build(lower_created_object(v));  // made by traced code (or a clean break)
      default:
        graph_break("unsupported_value", "returning a " + v->type_name() + " from traced code");
    }
  }

  std::vector<ir::Arg> take_outputs() { return std::move(outputs_); }

 private:
  CaptureContext& ctx_;
  std::unordered_map<const ir::Node*, int> output_index_;
  std::vector<ir::Arg> outputs_;
};

}  // namespace

CaptureResult capture_frame(PyCodeObject* code, PyObject* func, const ir::FrameView& frame) {
  auto t0 = std::chrono::steady_clock::now();
  CaptureResult out;
  torch_api();  // import torch before anything is traced
  CaptureContext ctx(frame);
  try {
    // Entry state: argument slots hold raw values; free variables come from
    // the function's closure.
    int n = code->co_nlocalsplus;
    std::vector<ValuePtr> locals(n);
    std::vector<ValuePtr> cells;
    int nfree = 0;
    for (int i = 0; i < n; ++i)
      if (code->co_localspluskinds && (PyBytes_AS_STRING(code->co_localspluskinds)[i] & 0x80)) ++nfree;
    for (int i = 0; i < n && i < frame.nlocals; ++i) {
      unsigned char kind = PyBytes_AS_STRING(code->co_localspluskinds)[i];
      if (kind & 0x80) continue;  // CO_FAST_FREE: from the closure below
      PyObject* v = frame.locals[i];
      if (!v) continue;
      std::string name = utf8(PyTuple_GET_ITEM(code->co_localsplusnames, i));
      locals[i] = ctx.wrap(v, ir::Source::local(i, name));
    }
    for (int j = 0; j < nfree; ++j) {
      int slot = n - nfree + j;
      std::string name = utf8(PyTuple_GET_ITEM(code->co_localsplusnames, slot));
      PyObject* cell = frame.closure ? PyTuple_GET_ITEM(frame.closure, j) : nullptr;
      PyObject* contents = cell ? PyCell_GET(cell) : nullptr;
      ValuePtr c = Value::cell(contents ? ctx.wrap(contents, ir::Source::closure(j, name)) : nullptr);
      c->source = ir::Source::closure(j, name);
      cells.push_back(c);
    }
    Tracer tracer(ctx, code, frame.globals, frame.builtins, 0);
    ValuePtr ret = tracer.run(std::move(locals), std::move(cells));

    ResidualBuilder rb(ctx);
    out.result = rb.build(ret);
    for (auto& e : ctx.effects) {
      ir::SideEffect s;
      s.kind = e.kind;
      s.target = e.target;
      s.name = e.name;
      s.value = rb.build(e.value);
      out.side_effects.push_back(std::move(s));
    }
    for (auto& c : ctx.sourced_containers) {
      if (!c->mutated) continue;
      ir::SideEffect s;
      s.kind = c->kind == VKind::List ? ir::SideEffect::Kind::ReplaceList
                                      : ir::SideEffect::Kind::ReplaceDict;
      s.target = c->source;
      ir::Residual r;
      r.kind = c->kind == VKind::List ? ir::Residual::Kind::List : ir::Residual::Kind::Dict;
      r.keys = c->keys;
      for (auto& item : c->items) r.items.push_back(rb.build(item));
      s.value = std::move(r);
      out.side_effects.push_back(std::move(s));
    }
    ctx.graph().set_output(rb.take_outputs());
    ctx.graph().lint();
  } catch (const GraphBreak& b) {
    out.graph_break = BreakInfo{b.kind(), b.reason(), ctx.filename, ctx.lineno};
    if (PyErr_Occurred()) PyErr_Clear();
  } catch (const PythonError&) {
    // An unexpected Python error while tracing: never wrong, so run eagerly.
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    PyRef type = PyRef::steal(t), value = PyRef::steal(v), trace = PyRef::steal(tb);
    std::string msg = type ? reinterpret_cast<PyTypeObject*>(type.get())->tp_name : "error";
    PyRef s = value ? PyRef::steal(PyObject_Str(value.get())) : PyRef();
    if (s && PyUnicode_Check(s.get())) msg += std::string(": ") + PyUnicode_AsUTF8(s.get());
    PyErr_Clear();
    out.graph_break = BreakInfo{"op_error", "error while tracing: " + msg, ctx.filename, ctx.lineno};
  }
  out.graph = ctx.graph_ptr();
  out.guards = std::move(ctx.guards());
  out.example_inputs = ctx.example_inputs();
  out.capture_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  (void)func;
  return out;
}

}  // namespace tl::capture
