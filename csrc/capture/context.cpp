#include "capture/context.h"

#include <functional>
#include <set>
#include <string_view>
#include <unordered_set>

#include "capture/autocast.h"
#include "capture/backend_layout.h"
#include "capture/constant_fold.h"
#include "capture/deque.h"
#include "capture/eager_checks.h"
#include "capture/effect_order.h"
#include "capture/graph_break.h"
#include "capture/made_in_call.h"
#include "capture/meta_cache.h"
#include "capture/meta_layout.h"
#include "capture/module_tensors.h"
#include "capture/scalar_inputs.h"
#include "capture/torch_api.h"
#include "capture/user_exception.h"
#include "core/errors.h"
#include "core/python_helpers.h"
#include "guards/dict_order.h"
#include "guards/leaf_guard.h"
#include "guards/storage_aliasing.h"
#include "ir/effects.h"

namespace tl::capture {

namespace {
// Ops that return their own argument for reasons the guards fix whatever the sizes: a cast
// to the dtype/device the tensor has, dropout with training off.
bool size_blind_identity(const std::string& name, bool method) {
  static const std::set<std::string> methods = {"to",     "type", "type_as",   "float",
                                                "double", "half", "bfloat16",  "long",
                                                "int",    "bool", "contiguous"};
  static const std::set<std::string> functions = {
      "dropout", "alpha_dropout", "feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d"};
  return method ? methods.count(name) > 0 : functions.count(name) > 0;
}
}  // namespace
namespace {

PyRef call_method0(PyObject* obj, const char* name) {
  PyRef r = PyRef::steal(PyObject_CallMethod(obj, name, nullptr));
  if (!r) throw PythonError();
  return r;
}

long long as_long_long(PyObject* o) {
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) throw PythonError();
  return v;
}

std::vector<int64_t> int_tuple(PyObject* seq) {
  std::vector<int64_t> out;
  Py_ssize_t n = PySequence_Size(seq);
  if (n < 0) throw PythonError();
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyRef item = PyRef::steal(PySequence_GetItem(seq, i));
    if (!item) throw PythonError();
    out.push_back(PyLong_AsLongLong(item.get()));
  }
  throw_if_python_error();
  return out;
}

ir::TensorMeta tensor_meta(PyObject* meta, const PyRef& device) {
  ir::TensorMeta m;
  PyRef shape = PyRef::steal(PyObject_GetAttrString(meta, "shape"));
  if (!shape) throw PythonError();
  m.sizes = int_tuple(shape.get());
  m.strides = int_tuple(call_method0(meta, "stride").get());
  m.dtype = PyRef::steal(PyObject_GetAttrString(meta, "dtype"));
  if (!m.dtype) throw PythonError();
  PyRef rg = PyRef::steal(PyObject_GetAttrString(meta, "requires_grad"));
  if (!rg) throw PythonError();
  m.requires_grad = rg.get() == Py_True;
  m.device = device;
  return m;
}

bool is_tensor(PyObject* o) {
  return PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(torch_api().tensor_type.get()));
}

bool contains_tensor(PyObject* o) {
  if (is_tensor(o)) return true;
  if (PyTuple_Check(o) || PyList_Check(o)) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    PyObject** items = PySequence_Fast_ITEMS(o);
    for (Py_ssize_t i = 0; i < n; ++i)
      if (contains_tensor(items[i])) return true;
  }
  return false;
}

std::string placeholder_name(const ir::Source& s) {
  std::string raw = s.str(), out;
  // L['self'].layer1[0].conv1.weight -> self_layer1_0_conv1_weight
  for (size_t i = 0; i < raw.size(); ++i) {
    if (i == 0 && (raw[0] == 'L' || raw[0] == 'G') && raw.size() > 1 && raw[1] == '[') continue;
    char c = raw[i];
    if (isalnum(static_cast<unsigned char>(c)) || c == '_') {
      out += c;
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "input" : out;
}

std::string exception_text() {
  if (fatal_python_error_pending()) throw PythonError();
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  PyRef t = PyRef::steal(type), v = PyRef::steal(value), b = PyRef::steal(tb);
  std::string out = t ? reinterpret_cast<PyTypeObject*>(t.get())->tp_name : "error";
  if (v) {
    PyRef s = PyRef::steal(PyObject_Str(v.get()));
    const char* c = s ? PyUnicode_AsUTF8(s.get()) : nullptr;
    if (c && *c) out += std::string(": ") + c;
  }
  clear_expected_error();
  std::string first_line = out.substr(0, out.find('\n'));
  return first_line.size() > 300 ? first_line.substr(0, 300) + "..." : first_line;
}

const std::unordered_set<std::string>& data_dependent_methods() {
  static const std::unordered_set<std::string> names = {
      "item",      "tolist",    "numpy",           "__bool__", "__int__",
      "__float__", "__index__", "nonzero",         "unique",   "masked_select",
      "data_ptr",  "storage",   "untyped_storage", "bincount", "unique_consecutive",
      "argwhere",  "__array__", "__len__"};
  return names;
}

// NOTE: functions, classes and plain objects hash and compare by address (builtin functions
// by the address of their self and C function): looking one up in a dict (a registry keyed by
// class, typing's cache keyed by function on 3.12) runs no user code and gives the same answer
// while the key lives (the Dict value holds it).
bool compared_by_identity(PyObject* k) {
  PyTypeObject* t = Py_TYPE(k);
  return PyCFunction_CheckExact(k) || (t->tp_hash == PyBaseObject_Type.tp_hash &&
                                       t->tp_richcompare == PyBaseObject_Type.tp_richcompare);
}

std::string fn_short_name(PyObject* fn) {
  PyRef n = PyRef::steal(PyObject_GetAttrString(fn, "__name__"));
  if (!n) {
    clear_expected_error();
    return "?";
  }
  const char* c = PyUnicode_Check(n.get()) ? PyUnicode_AsUTF8(n.get()) : nullptr;
  if (!c) clear_expected_error();
  return c ? c : "?";
}

// Remakes an object made by traced code. spec (borrowed): (type, attribute names, item keys,
// per item key the index of the attribute holding its value or -1); values (borrowed): the
// attribute values then the values of the items marked -1. Returns a new reference.
PyObject* rebuild_created_object(PyObject* spec, PyObject* values) {
  auto* type = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(spec, 0));
  PyObject* names = PyTuple_GET_ITEM(spec, 1);
  PyObject* keys = PyTuple_GET_ITEM(spec, 2);
  PyObject* item_from_attr = PyTuple_GET_ITEM(spec, 3);
  PyRef empty = PyRef::steal(PyTuple_New(0));
  PyRef inst = PyRef::steal(type->tp_new(type, empty.get(), nullptr));
  if (!inst) return nullptr;
  Py_ssize_t na = PyTuple_GET_SIZE(names);
  // NOTE: the instance dict and the dict items are written directly, as the traced
  // __init__/__setattr__/__setitem__ left them; running those again could have effects.
  for (Py_ssize_t i = 0; i < na; ++i)
    if (PyObject_GenericSetAttr(inst.get(), PyTuple_GET_ITEM(names, i),
                                PyTuple_GET_ITEM(values, i)) < 0)
      return nullptr;
  if (PyTuple_GET_SIZE(keys) > 0) {
    PyTypeObject* base = type;
    while (base && (base->tp_flags & Py_TPFLAGS_HEAPTYPE)) base = base->tp_base;
    if (!base || !base->tp_as_mapping || !base->tp_as_mapping->mp_ass_subscript) {
      PyErr_SetString(PyExc_TypeError, "torchlite: cannot rebuild the items of a dict subclass");
      return nullptr;
    }
    Py_ssize_t next = na;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(keys); ++j) {
      Py_ssize_t from = PyLong_AsSsize_t(PyTuple_GET_ITEM(item_from_attr, j));
      PyObject* value = PyTuple_GET_ITEM(values, from >= 0 ? from : next++);
      if (base->tp_as_mapping->mp_ass_subscript(inst.get(), PyTuple_GET_ITEM(keys, j), value) < 0)
        return nullptr;
    }
  }
  return inst.release();
}

PyTypeObject* ordered_dict_type() {
  static PyObject* od = [] {
    PyRef m = PyRef::steal(PyImport_ImportModule("collections"));
    PyObject* t = m ? PyObject_GetAttrString(m.get(), "OrderedDict") : nullptr;
    if (!t) clear_expected_error();
    return t;  // NOTE: kept for the process lifetime, like the collections module
  }();
  return reinterpret_cast<PyTypeObject*>(od);
}

// A call with no arguments to a torch function that reports global state
// (`torch.autograd._profiler_enabled()`, `torch.are_deterministic_algorithms_enabled()`):
// by name, so functions with effects (`torch.seed()`) are never re-run by a guard.
bool is_state_query(const std::string& method, const std::string& name,
                    const std::vector<ValuePtr>& args,
                    const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  if (!method.empty() || !args.empty() || !kwargs.empty()) return false;
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return starts("is_") || starts("_is_") || starts("are_") || starts("get_") || starts("_get_") ||
         ends("_enabled");
}

// A module built by traced code (Tracer::construct_module) that outlives the trace (live at a
// graph break, returned): made anew on every call as a copy of the module the trace built
// (torchlite/_fresh_modules.py), as eager builds one per call. Its state is the trace's: what
// it was built from is guarded, its own attribute writes were applied to it while tracing.
// NOTE: only a module holding no tensors: a copy of a parameter would be another tensor than
// eager's (a Sequential slice holds the frame's own modules and their parameters).
ValuePtr lower_fresh_module(const ValuePtr& v) {
  if (!first_tensor_held(v->obj.get()).empty())
    graph_break("module_built_in_forward",
                "a " + v->type_name() + " built in traced code holding tensors outlives the trace",
                "Create the module once in `__init__` and call it in `forward`.");
  static PyObject* partial_type = [] {
    PyRef m = PyRef::steal(PyImport_ImportModule("functools"));
    PyObject* t = m ? PyObject_GetAttrString(m.get(), "partial") : nullptr;
    if (!t) throw PythonError();
    return t;  // NOTE: kept for the process lifetime, like the module
  }();
  // NOTE: the residual calls its builder with the (empty) tuple of item values.
  PyRef builder = PyRef::steal(PyObject_CallFunctionObjArgs(
      partial_type, python_helper("fresh_modules.clone").get(), v->obj.get(), nullptr));
  if (!builder) throw PythonError();
  ValuePtr t = Value::tuple({});
  t->named_type = builder;
  return t;
}

PyMethodDef rebuild_def = {"torchlite_rebuild_object", rebuild_created_object, METH_O,
                           "Remakes an object created by code torchlite captured."};

}  // namespace

const std::unordered_set<std::string>& factory_functions() {
  static const std::unordered_set<std::string> names = {
      "zeros",        "ones",        "empty",         "full",          "rand",      "randn",
      "randint",      "randperm",    "arange",        "linspace",      "logspace",  "tensor",
      "as_tensor",    "eye",         "scalar_tensor", "empty_strided", "normal",    "tril_indices",
      "triu_indices", "zeros_like",  "ones_like",     "empty_like",    "full_like", "rand_like",
      "randn_like",   "randint_like"};
  return names;
}

ValuePtr lower_created_object(const ValuePtr& v) {
  if (v->kind == VKind::Module && v->flag && !v->source) return lower_fresh_module(v);
  if (v->kind != VKind::Object || !v->flag || !v->attrs)
    graph_break("unsupported_return", "returning a " + v->type_name() + " created in traced code");
  std::vector<ValuePtr> items = v->attrs->items;
  PyRef names = PyRef::steal(PyTuple_New(v->attrs->keys.size()));
  for (size_t i = 0; i < v->attrs->keys.size(); ++i)
    PyTuple_SET_ITEM(names.get(), i, PyRef(v->attrs->keys[i]).release());
  size_t nk = v->mapping ? v->mapping->keys.size() : 0;
  PyRef keys = PyRef::steal(PyTuple_New(nk));
  PyRef item_from_attr = PyRef::steal(PyTuple_New(nk));
  if (!names || !keys || !item_from_attr) throw PythonError();
  for (size_t j = 0; j < nk; ++j) {
    PyTuple_SET_ITEM(keys.get(), j, PyRef(v->mapping->keys[j]).release());
    // NOTE: a ModelOutput holds each field twice, as an attribute and as an item: one value
    // (a nested ModelOutput, as CLIPOutput's text_model_output) rebuilt once and set in both
    // places, not two copies (the residual builder refuses a built object referenced twice).
    long from = -1;
    for (size_t i = 0; i < v->attrs->keys.size() && from < 0; ++i) {
      int same_key =
          PyObject_RichCompareBool(v->attrs->keys[i].get(), v->mapping->keys[j].get(), Py_EQ);
      if (same_key < 0) throw PythonError();
      if (same_key && v->attrs->items[i].get() == v->mapping->items[j].get())
        from = static_cast<long>(i);
    }
    if (from < 0) items.push_back(v->mapping->items[j]);
    PyObject* index = PyLong_FromLong(from);
    if (!index) throw PythonError();
    PyTuple_SET_ITEM(item_from_attr.get(), j, index);
  }
  PyRef spec = PyRef::steal(PyTuple_Pack(4, reinterpret_cast<PyObject*>(Py_TYPE(v->obj.get())),
                                         names.get(), keys.get(), item_from_attr.get()));
  if (!spec) throw PythonError();
  PyRef builder = PyRef::steal(PyCFunction_New(&rebuild_def, spec.get()));
  if (!builder) throw PythonError();
  ValuePtr t = Value::tuple(std::move(items));
  t->named_type = builder;
  return t;
}

bool is_immutable_constant(PyObject* o) {
  if (o == Py_None || o == Py_Ellipsis || o == Py_NotImplemented || PyBool_Check(o) ||
      PyLong_CheckExact(o) || PyFloat_CheckExact(o) || PyComplex_CheckExact(o) ||
      PyUnicode_CheckExact(o) || PyBytes_CheckExact(o) || PyRange_Check(o) || PyCode_Check(o))
    return true;
  // NOTE: a slice or frozenset is a constant only when its parts are: `x[a - t : a + t]` with
  // 0-d tensors `t` makes a slice of tensors, which no EQUALS_MATCH can guard.
  if (PySlice_Check(o)) {
    auto* s = reinterpret_cast<PySliceObject*>(o);
    return is_immutable_constant(s->start) && is_immutable_constant(s->stop) &&
           is_immutable_constant(s->step);
  }
  const TorchApi& api = torch_api();
  PyTypeObject* t = Py_TYPE(o);
  if (t == reinterpret_cast<PyTypeObject*>(api.dtype_type.get()) ||
      t == reinterpret_cast<PyTypeObject*>(api.device_type.get()))
    return true;
  if (PyTuple_Check(o) &&
      (PyTuple_CheckExact(o) || t == reinterpret_cast<PyTypeObject*>(api.size_type.get()))) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i)
      if (!is_immutable_constant(PyTuple_GET_ITEM(o, i))) return false;
    return true;
  }
  if (PyFrozenSet_CheckExact(o)) {
    PyRef it = PyRef::steal(PyObject_GetIter(o));
    if (!it) throw PythonError();
    while (PyRef item = PyRef::steal(PyIter_Next(it.get())))
      if (!is_immutable_constant(item.get())) return false;
    if (PyErr_Occurred()) throw PythonError();
    return true;
  }
  // torch.memory_format / torch.layout / torch.qscheme singletons.
  const char* name = t->tp_name;
  return name &&
         (std::string(name) == "torch.memory_format" || std::string(name) == "torch.layout");
}

PyRef to_meta_arg(const ValuePtr& v, bool for_device_kwarg) {
  switch (v->kind) {
    case VKind::Tensor:
      return v->meta;
    case VKind::Const:
      if (for_device_kwarg && v->obj.get() != Py_None) return torch_api().meta_device;
      return v->obj;
    case VKind::Tuple:
    case VKind::List: {
      bool tuple = v->kind == VKind::Tuple;
      PyRef out = PyRef::steal(tuple ? PyTuple_New(v->items.size()) : PyList_New(v->items.size()));
      if (!out) throw PythonError();
      for (size_t i = 0; i < v->items.size(); ++i) {
        PyObject* item = to_meta_arg(v->items[i]).release();
        if (tuple)
          PyTuple_SET_ITEM(out.get(), i, item);
        else
          PyList_SET_ITEM(out.get(), i, item);
      }
      if (tuple && v->named_type) {
        // torch.Size and namedtuples: rebuild the real type so ops see it.
        if (v->named_type.get() == torch_api().size_type.get()) {
          PyRef sized = PyRef::steal(PyObject_CallOneArg(v->named_type.get(), out.get()));
          if (!sized) throw PythonError();
          return sized;
        }
      }
      return out;
    }
    case VKind::Dict: {
      PyRef d = PyRef::steal(PyDict_New());
      for (size_t i = 0; i < v->items.size(); ++i)
        if (PyDict_SetItem(d.get(), v->keys[i].get(), to_meta_arg(v->items[i]).get()) < 0)
          throw PythonError();
      return d;
    }
    default:
      graph_break("unsupported_operand",
                  "a " + v->type_name() + " value cannot be passed to a torch operation");
  }
}

ir::Arg value_to_arg(const ValuePtr& v) {
  switch (v->kind) {
    case VKind::Tensor:
      return ir::Arg::of_node(v->node);
    case VKind::Const: {
      ir::Arg a = ir::Arg::constant(v->obj);
      a.sym = v->sym;
      a.fsym = v->fsym;
      if (v->sym_slice) {
        a.sym_slice = true;
        for (auto& it : v->items) a.items.push_back(value_to_arg(it));
      }
      return a;
    }
    case VKind::Tuple:
    case VKind::List: {
      std::vector<ir::Arg> items;
      bool symbolic = false;
      for (auto& it : v->items) {
        items.push_back(value_to_arg(it));
        symbolic = symbolic || items.back().sym || items.back().fsym;
      }
      // NOTE: a torch.Size holding symbolic sizes goes as a tuple (every op taking a Size
      // takes one), so a new size can rewrite its items.
      if (v->kind == VKind::Tuple && v->named_type && !symbolic &&
          v->named_type.get() == torch_api().size_type.get()) {
        return ir::Arg::constant(to_meta_arg(v));
      }
      return v->kind == VKind::Tuple ? ir::Arg::tuple(std::move(items))
                                     : ir::Arg::list(std::move(items));
    }
    case VKind::Dict: {
      std::vector<ir::Arg> items;
      for (auto& it : v->items) items.push_back(value_to_arg(it));
      return ir::Arg::dict(v->keys, std::move(items));
    }
    default:
      graph_break("unsupported_operand",
                  "a " + v->type_name() + " value cannot be passed to a torch operation");
  }
}

namespace {
std::unordered_set<std::string>& current_dynamic_numbers() {
  static auto* numbers = new std::unordered_set<std::string>();  // NOTE: never freed
  return *numbers;
}
}  // namespace

DynamicNumbersScope::DynamicNumbersScope(std::unordered_set<std::string> numbers)
    : previous_(std::move(current_dynamic_numbers())) {
  current_dynamic_numbers() = std::move(numbers);
}
DynamicNumbersScope::~DynamicNumbersScope() { current_dynamic_numbers() = std::move(previous_); }

CaptureContext::CaptureContext(const ir::FrameView& frame)
    : frame_(frame), graph_(std::make_shared<ir::Graph>()) {
  dynamic_numbers = current_dynamic_numbers();
  guards_.add_global_state();
  PyRef g = PyRef::steal(PyObject_CallNoArgs(torch_api().is_grad_enabled_fn.get()));
  if (!g) throw PythonError();
  grad_enabled_ = initial_grad_ = g.get() == Py_True;
  // A frame called inside an eager autocast region: its dtype is part of the
  // policy-cache key as for regions the trace enters.
  read_autocast_state(*this);
}

CaptureContext::~CaptureContext() {
  restore_autocast(*this);
  if (grad_enabled_ != initial_grad_) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyRef r = PyRef::steal(PyObject_CallOneArg(torch_api().set_grad_enabled_fn.get(),
                                               initial_grad_ ? Py_True : Py_False));
    if (!r) PyErr_Clear();  // NOTE: a destructor: nothing may be thrown
    PyErr_Restore(t, v, tb);
  }
}

void CaptureContext::set_grad_mode(bool enabled) {
  if (enabled == grad_enabled_) return;
  PyObject* flag = enabled ? Py_True : Py_False;
  PyRef r = PyRef::steal(PyObject_CallOneArg(torch_api().set_grad_enabled_fn.get(), flag));
  if (!r) throw PythonError();
  ir::Node* n = graph_->add_call_function(torch_api().set_grad_enabled_fn,
                                          {ir::Arg::constant(PyRef::borrow(flag))}, {});
  n->location = location;
  grad_enabled_ = enabled;
}

PyRef CaptureContext::to_meta(PyObject* t) {
  const TorchApi& api = torch_api();
  PyRef size = call_method0(t, "size");
  PyRef stride = call_method0(t, "stride");
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(t, "dtype"));
  if (!dtype) throw PythonError();
  PyRef args = PyRef::steal(PyTuple_Pack(2, size.get(), stride.get()));
  PyRef kwargs = PyRef::steal(
      Py_BuildValue("{s:O,s:O}", "dtype", dtype.get(), "device", api.meta_device.get()));
  // NOTE: an inference tensor gets an inference meta tensor, so the trace sees what eager
  // would: is_inference() is True, an in-place update outside inference mode raises.
  PyRef inference_mode;
  if (call_method0(t, "is_inference").get() == Py_True) {
    PyRef c = PyRef::steal(PyImport_ImportModule("torch._C"));
    PyRef cls = c ? PyRef::steal(PyObject_GetAttrString(c.get(), "_InferenceMode")) : PyRef();
    inference_mode = cls ? PyRef::steal(PyObject_CallOneArg(cls.get(), Py_True)) : PyRef();
    if (!inference_mode) throw PythonError();
    call_method0(inference_mode.get(), "__enter__");
  }
  PyRef meta = PyRef::steal(PyObject_Call(api.empty_strided.get(), args.get(), kwargs.get()));
  if (inference_mode) {
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    PyRef r = PyRef::steal(
        PyObject_CallMethod(inference_mode.get(), "__exit__", "OOO", Py_None, Py_None, Py_None));
    if (!r) PyErr_Clear();
    PyErr_Restore(et, ev, etb);
  }
  if (!meta) throw PythonError();
  PyRef rg = PyRef::steal(PyObject_GetAttrString(t, "requires_grad"));
  if (!rg) throw PythonError();
  if (rg.get() == Py_True) {
    PyRef r = PyRef::steal(PyObject_CallMethod(meta.get(), "requires_grad_", nullptr));
    if (!r) throw PythonError();
  }
  return meta;
}

ValuePtr CaptureContext::wrap_tensor(PyObject* t, const ir::SourcePtr& src) {
  const TorchApi& api = torch_api();
  PyTypeObject* type = Py_TYPE(t);
  if (type != reinterpret_cast<PyTypeObject*>(api.tensor_type.get()) &&
      type != reinterpret_cast<PyTypeObject*>(api.parameter_type.get())) {
    graph_break("tensor_subclass", std::string("tensor subclass ") + type->tp_name +
                                       " is not supported; it runs eagerly");
  }
  if (!src) {
    graph_break("untracked_tensor",
                "a tensor that is not reachable from the function's arguments, globals or "
                "module attributes (e.g. created at import time in a closure) cannot be captured");
  }
  std::string key = src->str();
  auto it = inputs_by_source_.find(key);
  if (it != inputs_by_source_.end()) return it->second;
  guards_.add_tensor_match(src, t);
  ir::Node* node = graph_->add_placeholder(placeholder_name(*src), src);
  PyRef device = PyRef::steal(PyObject_GetAttrString(t, "device"));
  if (!device) throw PythonError();
  PyRef meta = to_meta(t);
  node->meta = tensor_meta(meta.get(), device);
  node->example = meta;
  example_inputs_.push_back(PyRef::borrow(t));
  input_tensors_[key] = t;
  ValuePtr v = Value::tensor(node, meta, device);
  v->obj = PyRef::borrow(reinterpret_cast<PyObject*>(type));
  v->source = src;
  inputs_by_source_[key] = v;
  tensor_inputs_.emplace_back(src, t);
  // NOTE: one tensor reached through two names (`v = y` handed to a resume function beside
  // `y`, `f(t, t)`) stays two placeholders with meta tensors of their own (one value would need
  // an identity guard that fails on every step of a loop body over a list of tensors); the
  // overlap checks see their memory through real_storage(), and a graph that writes tensors
  // is guarded on how its inputs share storage (capture.cpp). The meta tensor starts its own
  // storage at offset 0; the real one may not.
  long long item = as_long_long(call_method0(t, "element_size").get());
  long long offset = as_long_long(call_method0(t, "storage_offset").get());
  real_storages_[guards::storage_id(meta.get())] = {guards::storage_id(t), offset * item};
  return v;
}

namespace {
void mark_used(const ir::Arg& a, std::unordered_set<const ir::Node*>& used) {
  if (a.kind == ir::Arg::Kind::Node) used.insert(a.node);
  for (const auto& item : a.items) mark_used(item, used);
}
}  // namespace

// NOTE: a tensor the trace only looked at (an identity test such as nn.LSTM's
// `ref() is not weight` over its weakrefs, a size folded into a constant) is decided by its
// guards, which read it through its source anyway; as a graph input it would be fetched a
// second time on every call for nothing. Symbols of dynamic sizes keep their node.
void CaptureContext::move_node_before(ir::Node* n, const ir::Node* pos) {
  if (n->op != ir::OpKind::Placeholder) {
    graph_->move_before(n, pos);
    return;
  }
  std::vector<ir::Node*> before = graph_->placeholders();
  TL_CHECK(before.size() == example_inputs_.size())
      << "move_node_before: " << before.size() << " placeholders, " << example_inputs_.size()
      << " example inputs";
  std::unordered_map<const ir::Node*, PyRef> example;
  for (size_t i = 0; i < before.size(); ++i) example[before[i]] = example_inputs_[i];
  graph_->move_before(n, pos);
  std::vector<PyRef> reordered;
  for (ir::Node* p : graph_->placeholders()) reordered.push_back(example.at(p));
  example_inputs_ = std::move(reordered);
}

int CaptureContext::drop_unused_inputs() {
  std::unordered_set<const ir::Node*> used;
  for (const auto& n : graph_->nodes()) {
    for (const auto& a : n->args) mark_used(a, used);
    for (const auto& kw : n->kwargs) mark_used(kw.second, used);
  }
  for (const auto& [node, dim] : sym_table) used.insert(node);
  std::vector<ir::Node*> placeholders = graph_->placeholders();
  TL_CHECK(placeholders.size() == example_inputs_.size())
      << "drop_unused_inputs: " << placeholders.size() << " placeholders, "
      << example_inputs_.size() << " example inputs";
  std::vector<PyRef> kept;
  std::unordered_set<const ir::Source*> dropped_sources;
  for (size_t i = 0; i < placeholders.size(); ++i) {
    ir::Node* p = placeholders[i];
    if (used.count(p)) {
      kept.push_back(example_inputs_[i]);
      continue;
    }
    dropped_sources.insert(p->source.get());
    graph_->erase(p);
  }
  int dropped = static_cast<int>(dropped_sources.size());
  if (!dropped) return 0;
  example_inputs_ = std::move(kept);
  // NOTE: tensor_inputs_ keeps the inputs the graph still reads: the storage aliasing guard's set
  std::erase_if(tensor_inputs_,
                [&](const auto& in) { return dropped_sources.count(in.first.get()) > 0; });
  return dropped;
}

std::optional<bool> CaptureContext::same_input_tensor(const ValuePtr& a, const ValuePtr& b) {
  if (!a->source || !b->source) return std::nullopt;
  auto ia = input_tensors_.find(a->source->str()), ib = input_tensors_.find(b->source->str());
  if (ia == input_tensors_.end() || ib == input_tensors_.end()) return std::nullopt;
  bool same = ia->second == ib->second;
  guards_.add_identity(a->source, b->source, same);
  return same;
}

// A bound method is a fresh object on every attribute read (e.g. `x.add`
// left on the stack at a graph break and passed to the resume function): an
// ID_MATCH on it would fail on every call. It is guarded by what it is made
// of instead: its __self__ (wrapped and guarded as any value) and its
// __func__ by identity, or for a C method of a tensor/list/dict/tuple, its name.
ValuePtr CaptureContext::wrap_bound_method(PyObject* obj, const ir::SourcePtr& src) {
  PyObject* self = nullptr;
  if (PyMethod_Check(obj)) {
    self = PyMethod_GET_SELF(obj);
  } else if (PyCFunction_Check(obj)) {
    self = PyCFunction_GET_SELF(obj);
    if (!self || !(is_tensor(self) || PyList_CheckExact(self) || PyDict_CheckExact(self) ||
                   PyTuple_CheckExact(self)))
      return nullptr;
  } else {
    return nullptr;
  }
  if (!self || PyModule_Check(self)) return nullptr;
  guards_.add_type_match(src, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
  ValuePtr m = Value::of_kind(VKind::Method);
  m->source = src;
  m->self = wrap(self, ir::Source::attr(src, "__self__"));
  if (PyMethod_Check(obj)) {
    PyObject* func = PyMethod_GET_FUNCTION(obj);
    guards_.add_id_match(ir::Source::attr(src, "__func__"), func);
    m->obj = PyRef::borrow(func);
  } else {
    const char* name = reinterpret_cast<PyCFunctionObject*>(obj)->m_ml->ml_name;
    PyRef pyname = PyRef::steal(PyUnicode_FromString(name));
    if (!pyname) throw PythonError();
    guards_.add_equals_match(ir::Source::attr(src, "__name__"), pyname.get());
    m->method_name = name;
  }
  return m;
}

ValuePtr CaptureContext::dict_subclass_items(const ValuePtr& obj, bool need_iteration_order) {
  PyObject* d = obj->obj.get();
  PyTypeObject* type = Py_TYPE(d);
  if (need_iteration_order && type->tp_iter != PyDict_Type.tp_iter &&
      !guards::iterates_like_ordered_dict(type))
    return nullptr;
  // NOTE: read from storage, never through a __getitem__ of the subclass (views of dicts and
  // OrderedDicts read storage too); the guard fetches the items the same way (guards/fetch.cpp).
  ValuePtr items = Value::of_kind(VKind::Dict);
  for (const PyRef& k : guards::dict_keys_in_order(d)) {
    if (!PyUnicode_CheckExact(k.get()) && !PyLong_CheckExact(k.get()))
      graph_break("unsupported_dict_key",
                  std::string(type->tp_name) + " with keys other than str/int",
                  "Key the mapping by names (str) or ints.");
    PyObject* v = PyDict_GetItemWithError(d, k.get());  // borrowed
    if (!v) {
      if (PyErr_Occurred()) throw PythonError();
      TL_CHECK(false) << "a key of a " << type->tp_name << " vanished while it was read";
    }
    items->keys.push_back(k);
    items->items.push_back(wrap(v, ir::Source::item(obj->source, k)));
  }
  guards_.add_dict_keys(obj->source, d);
  return items;
}

// NOTE: a dict view is a new object on every call (`out.items()` left on the stack at a graph
// break and handed to the resume function): an ID_MATCH on it would fail on every call. It is
// guarded as its dict (read through the `mapping` step, guards/fetch.cpp) and its type.
ValuePtr CaptureContext::wrap_dict_view(PyObject* obj, const ir::SourcePtr& src) {
  PyObject* d = guards::dict_view_mapping(obj);
  if (!d) return nullptr;
  const char* what = PyDictItems_Check(obj) ? "items" : PyDictValues_Check(obj) ? "values" : "keys";
  ir::SourcePtr dict_src = ir::Source::attr(src, "mapping");
  ValuePtr dict = wrap(d, dict_src);
  if (dict->kind == VKind::Object) dict = dict_subclass_items(dict, /*need_iteration_order=*/true);
  if (!dict || dict->kind != VKind::Dict) return nullptr;
  guards_.add_type_match(src, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
  ValuePtr view = Value::of_kind(VKind::DictView);
  view->self = dict;
  view->method_name = what;
  return view;
}

bool CaptureContext::guarded_by_structure(const ir::SourcePtr& src) const {
  if (structural_modules) return true;
  // NOTE: a module built in forward before a break (`act = nn.GELU()`) is new on every call.
  if (!made_in_call.empty() && made_in_call.count(root_local_name(src))) return true;
  const ir::Source* root = src.get();
  while (root->base) root = root->base.get();
  // NOTE: a resume function's stack values are named ___<n>_stack<k> (bytecode/resume.cpp): a
  // module there is mostly a temporary (`nn.ReLU()(x)` breaking inside the call), new on
  // every call.
  return root->kind == ir::SourceKind::Local && root->name.rfind("___", 0) == 0 &&
         root->name.find("_stack") != std::string::npos;
}

void CaptureContext::guard_module_registry(const ValuePtr& module, const char* name,
                                           PyObject* dict) {
  ir::SourcePtr src = ir::Source::attr(module->source, name);
  if (module->kind == VKind::Module && module->flag) {
    guards_.add_type_match(src, reinterpret_cast<PyObject*>(Py_TYPE(dict)));
    guards_.add_length_match(src, PyDict_Size(dict));
    guards_.add_dict_keys(src, dict);
  } else {
    guards_.add_dict_version(src, dict);
  }
}

ValuePtr CaptureContext::wrap(PyObject* obj, ir::SourcePtr src, bool guard) {
  const TorchApi& api = torch_api();
  if (is_tensor(obj)) return wrap_tensor(obj, src);
  std::string key = src ? src->str() : "";
  if (src) {
    auto it = inputs_by_source_.find(key);
    if (it != inputs_by_source_.end()) return it->second;
    // The same object reached through another source (the config every layer
    // holds, a module registered twice): one Value, so a mutation through one
    // name is seen through the other, and its contents are guarded once; this
    // source only has to be that object.
    auto same = values_by_object_.find(obj);
    if (same != values_by_object_.end()) {
      const ValuePtr& first = same->second.second;
      if (first->kind == VKind::Module && !first->flag)
        guards_.add_id_match(src, obj);
      else
        guards_.add_identity(src, first->source, true);
      inputs_by_source_[key] = first;
      return first;
    }
    // NOTE: a number read from an attribute or a global (a counter, a step, a config value):
    // noted so a call that finds another number there says which (GuardSet::changed_numbers),
    // and the capture after it takes that one per call as a scalar input. An object made in
    // the call has no attributes that outlive it: its numbers are the call's own.
    if ((PyLong_CheckExact(obj) || PyFloat_CheckExact(obj)) &&
        (src->kind == ir::SourceKind::Attr || src->kind == ir::SourceKind::Global)) {
      if (dynamic_numbers.count(key)) {
        if (ValuePtr n = scalar_argument(*this, obj, src)) {
          if (src->kind == ir::SourceKind::Attr) {
            PyRef name = PyRef::steal(PyUnicode_FromString(src->name.c_str()));
            if (!name) throw PythonError();
            guards_.relax_dict_item(ir::Source::attr(src->base, "__dict__"), name.get());
          }
          inputs_by_source_[key] = n;
          return n;
        }
      }
      guards_.note_number_read(src, obj);
    }
  }
  ValuePtr v;
  if (PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(api.module_type.get()))) {
    v = Value::of_kind(VKind::Module);
    v->obj = PyRef::borrow(obj);
    v->source = src;
    v->flag = src && guarded_by_structure(src);
    if (v->flag) {
      guards_.add_type_match(src, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    } else if (src) {
      guards_.add_id_match(src, obj);
      PyObject* dict = PyObject_GenericGetDict(obj, nullptr);
      if (!dict) throw PythonError();
      guards_.add_dict_version(ir::Source::attr(src, "__dict__"), dict);
      Py_DECREF(dict);
    }
  } else if (PyCode_Check(obj)) {
    v = Value::constant(PyRef::borrow(obj), src);
    if (src && guard) guards_.add_id_match(src, obj);
  } else if (PySlice_Check(obj) && !is_immutable_constant(obj)) {
    graph_break("non_constant_index", "slice bounds must be known while tracing (" +
                                          (src ? src->str() : std::string("a traced slice")) +
                                          " has bounds that are not constants)");
  } else if (is_immutable_constant(obj)) {
    v = Value::constant(PyRef::borrow(obj), src);
    if (src && guard) guards_.add_equals_match(src, obj);
    if (PyTuple_Check(obj) &&
        Py_TYPE(obj) == reinterpret_cast<PyTypeObject*>(api.size_type.get())) {
      v->named_type = api.size_type;
    }
  } else if (PyTuple_Check(obj) || PyList_CheckExact(obj)) {
    bool tuple = PyTuple_Check(obj);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
    if (src) {
      guards_.add_type_match(src, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
      guards_.add_length_match(src, n);
    }
    std::vector<ValuePtr> items;
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = PySequence_Fast_GET_ITEM(obj, i);
      items.push_back(
          wrap(item, src ? ir::Source::item(src, PyRef::steal(PyLong_FromSsize_t(i))) : nullptr));
    }
    v = tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    v->source = src;
    if (tuple && !PyTuple_CheckExact(obj))
      v->named_type = PyRef::borrow(reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    if (!tuple && src) sourced_containers.push_back(v);
  } else if (src && (PyDict_CheckExact(obj) || Py_TYPE(obj) == ordered_dict_type())) {
    // NOTE: other dict subclasses stay Objects: their Python methods must run, not dict's.
    guards_.add_type_match(src, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    guards_.add_length_match(src, PyDict_Size(obj));
    v = Value::of_kind(VKind::Dict);
    v->source = src;
    // NOTE: in iteration order: an OrderedDict's differs from its storage's after move_to_end
    // (a hook registered with prepend=True runs first).
    for (const PyRef& key : guards::dict_keys_in_order(obj)) {
      PyObject* k = key.get();
      PyObject* val = PyDict_GetItemWithError(obj, k);  // borrowed
      if (!val) {
        if (PyErr_Occurred()) throw PythonError();
        continue;
      }
      // NOTE: bytes keys too: os.environ keeps its variables in a dict of bytes.
      if (!PyUnicode_CheckExact(k) && !PyLong_CheckExact(k) && !PyBytes_CheckExact(k) &&
          !compared_by_identity(k)) {
        graph_break(
            "unsupported_dict_key",
            std::string("dict with a key of type ") + Py_TYPE(k)->tp_name +
                " (keys must be str, int, bytes or objects compared by identity)",
            "Key the dict by a name (str) or an int, or read it outside the compiled code.");
      }
      v->keys.push_back(PyRef::borrow(k));
      v->items.push_back(wrap(val, ir::Source::item(src, PyRef::borrow(k))));
    }
    // NOTE: iteration (`list(d)`, `d.values()`, `for k in d`) follows insertion order, which
    // changes with the same keys and length (`d["a"] = d.pop("a")`): the keys are guarded in
    // order where they are all str/int (kept as constants).
    bool constant_keys = true;
    for (const PyRef& k : v->keys)
      constant_keys =
          constant_keys && (PyUnicode_CheckExact(k.get()) || PyLong_CheckExact(k.get()));
    if (constant_keys && !v->keys.empty()) guards_.add_dict_keys(src, obj);
    sourced_containers.push_back(v);
  } else if (src && Py_TYPE(obj) == reinterpret_cast<PyTypeObject*>(deque_type())) {
    // NOTE: guarded by what the trace reads (type, length, maxlen, items), never by identity:
    // a deque made before a graph break reaches the resume function anew on every call.
    guards_.add_type_match(src, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    Py_ssize_t n = PyObject_Length(obj);
    if (n < 0) throw PythonError();
    guards_.add_length_match(src, n);
    PyRef maxlen = PyRef::steal(PyObject_GetAttrString(obj, "maxlen"));
    if (!maxlen) throw PythonError();
    guards_.add_equals_match(ir::Source::attr(src, "maxlen"), maxlen.get());
    std::vector<ValuePtr> items;
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyRef item = PyRef::steal(PySequence_GetItem(obj, i));
      if (!item) throw PythonError();
      // NOTE: the deque holds the item: the borrowed pointer stays valid while tracing.
      items.push_back(wrap(item.get(), ir::Source::item(src, PyRef::steal(PyLong_FromSsize_t(i)))));
    }
    v = make_deque_value(std::move(items), std::move(maxlen));
    v->source = src;
    sourced_containers.push_back(v);
  } else if (src && PySet_CheckExact(obj)) {
    // A set from outside the function (a closure's, a global): what `in`, len() and
    // iteration answered while tracing holds only while it has the same elements.
    v = Value::constant(PyRef::borrow(obj), src);
    if (guard) guards_.add_id_match(src, obj);
    guards_.add_set_match(src, obj);
  } else if (src && guard && (v = wrap_bound_method(obj, src))) {
    // NOTE: v is set by the condition.
  } else if (src && guard && (v = wrap_dict_view(obj, src))) {
    // NOTE: v is set by the condition.
  } else if (src && guard && guards::is_numpy_number(obj)) {
    // NOTE: a value like a float (np.sqrt(d) from a helper, a config's np.float64): guarded by
    // type and value, never identity (a new one per call would recompile every time).
    v = Value::constant(PyRef::borrow(obj), src);
    guards_.add_equals_match(src, obj);
  } else if (src && guard && !made_in_call.empty() && plain_c_instance(obj) &&
             made_in_call.count(root_local_name(src))) {
    // NOTE: new on every call (a SimpleNamespace, an object(), a torch.Generator made before the
    // break): an identity guard would fail each time. As an Object it is guarded by its type and
    // each attribute the trace reads, and value_to_arg never bakes it into a graph.
    v = Value::of_kind(VKind::Object);
    v->obj = PyRef::borrow(obj);
    v->source = src;
    guards_.add_type_match(src, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
  } else if (PyFunction_Check(obj) || PyCFunction_Check(obj) || PyType_Check(obj) ||
             PyModule_Check(obj) || PyMethod_Check(obj) || Py_TYPE(obj) == &PyMethodDescr_Type ||
             Py_TYPE(obj) == &PyWrapperDescr_Type || Py_TYPE(obj) == &PyClassMethodDescr_Type ||
             Py_TYPE(obj)->tp_call == PyCFunction_Type.tp_call ||
             (Py_TYPE(obj)->tp_flags & Py_TPFLAGS_HEAPTYPE) == 0 ||
             std::string(Py_TYPE(obj)->tp_name) == "functools.partial") {
    v = Value::constant(PyRef::borrow(obj), src);
    if (src && guard && guarded_by_code(obj, src)) {
      // NOTE: made anew each time its definition runs (a closure made before a graph break
      // reaches the code after it as a new object on every call): the code object is what
      // stays; inline_function reads its defaults and cells through `src`.
      guards_.add_type_match(src, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
      guards_.add_id_match(ir::Source::attr(src, "__code__"), PyFunction_GET_CODE(obj));
    } else if (src && guard) {
      guards_.add_id_match(src, obj);
    }
  } else if (src) {
    v = Value::of_kind(VKind::Object);
    v->obj = PyRef::borrow(obj);
    v->source = src;
    guards_.add_type_match(src, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
  } else {
    v = from_result(obj);
  }
  if (src) {
    inputs_by_source_[key] = v;
    if (v->kind == VKind::Module || v->kind == VKind::Object || v->kind == VKind::Dict ||
        v->kind == VKind::List || v->kind == VKind::Deque)
      values_by_object_.emplace(obj, std::make_pair(PyRef::borrow(obj), v));
  }
  return v;
}

ValuePtr CaptureContext::size_value(const ValuePtr& t, int64_t dim) {
  PyRef shape = PyRef::steal(PyObject_GetAttrString(t->meta.get(), "shape"));
  if (!shape) throw PythonError();
  Py_ssize_t rank = PyTuple_GET_SIZE(shape.get());
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank) {
    raise_user(PyExc_IndexError, "Dimension out of range (expected to be in range of [" +
                                     std::to_string(-rank) + ", " + std::to_string(rank - 1) +
                                     "], but got " + std::to_string(dim) + ")");
  }
  PyObject* hint = PyTuple_GET_ITEM(shape.get(), dim);
  ValuePtr v = Value::constant(PyRef::borrow(hint));
  int64_t n = PyLong_AsLongLong(hint);
  // NOTE: an input's sizes 0 and 1 are guarded exactly (0/1 specialisation): a constant.
  // A size of a computed tensor is a symbol even then: it follows from the inputs' sizes.
  if (!t->node || (t->node->op == ir::OpKind::Placeholder && n < 2)) {
    if (!t->node) read_size("a size of a tensor not in the graph");
    return v;
  }
  int index = -1;
  for (size_t k = 0; k < sym_table.size(); ++k)
    if (sym_table[k].first == t->node && sym_table[k].second == dim) index = static_cast<int>(k);
  if (index < 0) {
    index = static_cast<int>(sym_table.size());
    sym_table.emplace_back(t->node, static_cast<int>(dim));
  }
  v->sym = ir::sym_symbol(index);
  any_sym = true;
  return v;
}

ValuePtr CaptureContext::shape_value(const ValuePtr& t) {
  PyRef shape = PyRef::steal(PyObject_GetAttrString(t->meta.get(), "shape"));
  if (!shape) throw PythonError();
  std::vector<ValuePtr> items;
  for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(shape.get()); ++d) items.push_back(size_value(t, d));
  ValuePtr v = Value::tuple(std::move(items));
  v->named_type = torch_api().size_type;
  return v;
}

void CaptureContext::specialise_scalars(const ValuePtr& v) {
  if (!any_scalar || !v) return;
  std::function<void(const ValuePtr&, int)> walk = [&](const ValuePtr& x, int depth) {
    if (!x || depth > 32) return;
    if (x->kind == VKind::Const) {
      if (x->scalar) pin_scalar(x);
      if (x->sym_slice)
        for (auto& it : x->items) walk(it, depth + 1);
      return;
    }
    if (x->kind == VKind::Tuple || x->kind == VKind::List || x->kind == VKind::Dict)
      for (auto& it : x->items) walk(it, depth + 1);
  };
  walk(v, 0);
}

void CaptureContext::pin_scalar(const ValuePtr& x) {
  x->scalar = false;
  if (x->scalar_fn) {
    // NOTE: the numbers it was computed from, by value: that fixes this one too.
    for (const ValuePtr& a : x->scalar_args)
      if (a->scalar) pin_scalar(a);
    return;
  }
  guards_.add_equals_match(x->source, x->obj.get());
}

ValuePtr CaptureContext::scalar_input_tensor(const ValuePtr& v, PyObject* device) {
  TL_CHECK(v->scalar && (v->source || v->scalar_fn))
      << "scalar_input_tensor of a value that is no scalar input";
  if (v->scalar_fn) return scalar_expression_tensor(*this, v, device);
  const bool is_float = PyFloat_CheckExact(v->obj.get());
  const char* dtype_name = is_float ? "float64" : "int64";
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(torch_api().torch.get(), dtype_name));
  PyRef key = dtype ? PyRef::steal(PyTuple_Pack(2, dtype.get(), device)) : PyRef();
  if (!key) throw PythonError();
  ir::SourcePtr src = ir::Source::scalar_tensor(v->source, key, dtype_name);
  const std::string k = src->str();
  auto it = inputs_by_source_.find(k);
  if (it != inputs_by_source_.end()) return it->second;
  PyRef fn = PyRef::steal(PyObject_GetAttrString(torch_api().torch.get(), "scalar_tensor"));
  PyRef args = PyRef::steal(PyTuple_Pack(1, v->obj.get()));
  PyRef kwargs = PyRef::steal(Py_BuildValue("{s:O,s:O}", "dtype", dtype.get(), "device", device));
  if (!fn || !args || !kwargs) throw PythonError();
  PyRef real = PyRef::steal(PyObject_Call(fn.get(), args.get(), kwargs.get()));
  if (!real) throw PythonError();
  ir::Node* node = graph_->add_placeholder(placeholder_name(*v->source), src);
  PyRef meta = to_meta(real.get());
  PyRef dev = PyRef::borrow(device);
  node->meta = tensor_meta(meta.get(), dev);
  node->example = meta;
  // NOTE: no TENSOR_MATCH (the fetch makes this tensor: its dtype, device and shape are fixed)
  // and no storage of the frame's: a fresh tensor on every call aliases nothing.
  example_inputs_.push_back(real);
  ValuePtr t = Value::tensor(node, meta, dev);
  t->obj = torch_api().tensor_type;
  t->source = src;
  inputs_by_source_[k] = t;
  return t;
}

void CaptureContext::specialise(const ValuePtr& v, bool scalars) {
  if (!(any_sym || (scalars && any_scalar)) || !v) return;
  std::function<void(const ValuePtr&, int)> walk = [&](const ValuePtr& x, int depth) {
    if (!x || depth > 32) return;
    if (x->kind == VKind::Const) {
      if (x->scalar && scalars) pin_scalar(x);
      if (x->sym) {
        ir::SymRelation r;
        r.lhs = x->sym;
        r.rhs = ir::sym_int(PyLong_AsLongLong(x->obj.get()));
        r.op = 2;
        r.where = location;
        if (!r.lhs->constant()) sym_relations.push_back(std::move(r));
        x->sym = nullptr;
      }
      if (x->fsym) {
        // NOTE: the float holds only where every size it came from keeps its value.
        std::vector<std::pair<ir::SymExprPtr, int64_t>> parts;
        x->fsym->int_parts(parts);
        for (auto& [e, hint] : parts) {
          if (e->constant()) continue;
          ir::SymRelation r;
          r.lhs = e;
          r.rhs = ir::sym_int(hint);
          r.op = 2;
          r.where = location;
          sym_relations.push_back(std::move(r));
        }
        x->fsym = nullptr;
      }
      if (x->unread_message) {
        for (auto& it : x->items) walk(it, depth + 1);
        x->unread_message = false;
        x->items.clear();
      }
      if (x->sym_slice) {
        for (auto& it : x->items) walk(it, depth + 1);
        x->sym_slice = false;
        x->items.clear();
      }
      return;
    }
    if (x->kind == VKind::Tuple || x->kind == VKind::List || x->kind == VKind::Dict)
      for (auto& it : x->items) walk(it, depth + 1);
  };
  walk(v, 0);
}

void CaptureContext::relate(const ValuePtr& a, int op, const ValuePtr& b, bool outcome) {
  ir::SymRelation r;
  r.lhs = a->sym ? a->sym : ir::sym_int(PyLong_AsLongLong(a->obj.get()));
  r.rhs = b->sym ? b->sym : ir::sym_int(PyLong_AsLongLong(b->obj.get()));
  r.op = op;
  r.outcome = outcome;
  r.where = location;
  for (const auto& o : sym_relations)
    if (o.op == r.op && o.outcome == r.outcome && o.lhs->same_as(*r.lhs) && o.rhs->same_as(*r.rhs))
      return;
  sym_relations.push_back(std::move(r));
}

ValuePtr CaptureContext::from_result(PyObject* obj) {
  if (PySet_CheckExact(obj)) {  // a fresh set made at trace time: a symbolic set of its own
    ValuePtr v = Value::of_kind(VKind::Set);
    v->obj = PyRef::steal(PySet_New(obj));
    if (!v->obj) throw PythonError();
    return v;
  }
  if (PyList_CheckExact(obj) || (PyTuple_CheckExact(obj) && !is_immutable_constant(obj))) {
    std::vector<ValuePtr> items;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(obj); ++i)
      items.push_back(from_result(PySequence_Fast_GET_ITEM(obj, i)));
    return PyList_CheckExact(obj) ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }
  if (PyDict_CheckExact(obj)) {
    ValuePtr v = Value::of_kind(VKind::Dict);
    PyObject *k, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(obj, &pos, &k, &val)) {
      v->keys.push_back(PyRef::borrow(k));
      v->items.push_back(from_result(val));
    }
    return v;
  }
  if (is_tensor(obj)) {
    graph_break("untracked_tensor", "a real tensor was produced at trace time");
  }
  ValuePtr v = Value::constant(PyRef::borrow(obj));
  if (PyTuple_Check(obj) && !PyTuple_CheckExact(obj))
    v->named_type = PyRef::borrow(reinterpret_cast<PyObject*>(Py_TYPE(obj)));
  return v;
}

ValuePtr CaptureContext::result_value(PyObject* meta_result, ir::Node* node, const PyRef& device) {
  if (is_tensor(meta_result)) {
    if (node->meta) {  // a second view of the same node (a getitem)
      TL_CHECK(false) << "result_value on a node that already has metadata";
    }
    node->meta = tensor_meta(meta_result, device);
    node->example = PyRef::borrow(meta_result);
    ValuePtr v = Value::tensor(node, PyRef::borrow(meta_result), device);
    v->obj = torch_api().tensor_type;
    return v;
  }
  node->example = PyRef::borrow(meta_result);
  if (PyTuple_Check(meta_result) || PyList_Check(meta_result)) {
    std::vector<ValuePtr> items;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(meta_result);
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = PySequence_Fast_GET_ITEM(meta_result, i);
      if (!contains_tensor(item)) {
        items.push_back(from_result(item));
        continue;
      }
      PyRef idx = PyRef::steal(PyLong_FromSsize_t(i));
      ir::Node* g = graph_->add_call_function(torch_api().operator_getitem,
                                              {ir::Arg::of_node(node), ir::Arg::constant(idx)}, {});
      g->location = location;
      items.push_back(result_value(item, g, device));
    }
    ValuePtr v =
        PyList_Check(meta_result) ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    if (PyTuple_Check(meta_result) && !PyTuple_CheckExact(meta_result))
      v->named_type = PyRef::borrow(reinterpret_cast<PyObject*>(Py_TYPE(meta_result)));
    return v;
  }
  return from_result(meta_result);
}

ValuePtr CaptureContext::call_op(PyObject* target, const std::string& method,
                                 const std::vector<ValuePtr>& args,
                                 const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  if (!autocast_on) return record_op(target, method, args, kwargs);
  std::vector<ValuePtr> cast_args = args;
  KwArgs cast_kwargs = kwargs;
  PyRef want = autocast_casts(*this, target, method, cast_args, cast_kwargs);
  ValuePtr r = record_op(target, method, cast_args, cast_kwargs);
  if (want)
    check_autocast_result(r, want, method.empty() ? fn_short_name(target) : "Tensor." + method);
  return r;
}

// On CUDA the fused attention kernels return another layout than the meta
// kernel's dense [B, H, N, D] (measured on torch 2.11): cuDNN and flash (the
// half-precision default) give q's layout when q is dense and [B, H, N, D]
// laid out as [B, N, H, D] otherwise (q sliced from a packed qkv), the
// memory-efficient kernel (float32) always the latter. On the CPU torch's
// flash kernel (every dtype; measured on torch 2.13) does as cuDNN does, and
// its math path (dropout, a value head size other than q's) returns the dense
// layout. A result whose real layout differs from the prediction is copied
// into it, and then again by the `transpose(1, 2).contiguous()` that usually
// follows: predict it instead (the runtime still copies when another backend
// ran). `result` is the meta result (owned), `q` the query's meta tensor
// (borrowed, may be null), `device` the real device (borrowed), `drops` true
// when dropout_p is not a constant 0.
bool attention_drops(bool given, PyObject* constant) {
  const bool zero = constant && PyNumber_Check(constant) && PyObject_IsTrue(constant) == 0;
  PyErr_Clear();
  return given && !zero;
}

PyRef fused_attention_layout(PyRef result, PyObject* q, PyObject* device, bool drops) {
  PyRef type = PyRef::steal(PyObject_GetAttrString(device, "type"));
  if (!type) throw PythonError();
  const bool cuda = PyUnicode_CompareWithASCIIString(type.get(), "cuda") == 0;
  const bool cpu = PyUnicode_CompareWithASCIIString(type.get(), "cpu") == 0;
  if ((!cuda && !cpu) || !is_tensor(result.get()) || (cpu && drops)) return result;
  // NOTE: a result that needs grad keeps torch's meta layout on the CPU: the prediction below
  // (empty_like) would drop its requires_grad, and autograd then saw no graph to record.
  if (cpu) {
    PyRef grad = PyRef::steal(PyObject_GetAttrString(result.get(), "requires_grad"));
    if (!grad) throw PythonError();
    if (grad.get() == Py_True) return result;
  }
  auto call = [](PyObject* o, const char* name) {
    PyRef r = PyRef::steal(PyObject_CallMethod(o, name, nullptr));
    if (!r) throw PythonError();
    return r;
  };
  if (PyLong_AsLong(call(result.get(), "dim").get()) != 4) return result;
  PyRef dtype = PyRef::steal(PyObject_GetAttrString(result.get(), "dtype"));
  PyRef half = PyRef::steal(PyObject_GetAttrString(dtype.get(), "itemsize"));
  if (!half) throw PythonError();
  const bool same_head =
      !q || !is_tensor(q) ||
      PyObject_RichCompareBool(call(q, "size").get(), call(result.get(), "size").get(), Py_EQ) == 1;
  if (PyErr_Occurred()) throw PythonError();
  if (cpu && !same_head) return result;  // the math path
  if (q && is_tensor(q) && (cpu || PyLong_AsLong(half.get()) == 2)) {
    // The layout is empty_like(q)'s when q is dense (it keeps q's strides then). NOTE: built
    // with empty_strided: torch's empty_like on meta tensors is Python (torch._refs), a call
    // per attention at every new size of a size-generic graph.
    PyRef q_size = call(q, "size"), q_stride = call(q, "stride");
    auto ints = [](PyObject* seq) {
      Dims out;
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); ++i)
        out.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(seq, i)));
      if (PyErr_Occurred()) throw PythonError();
      return out;
    };
    if (!PyTuple_Check(q_size.get()) || !PyTuple_Check(q_stride.get())) return result;
    const int dense = is_non_overlapping_and_dense({ints(q_size.get()), ints(q_stride.get())});
    PyRef like;
    if (dense == 1) {
      PyRef q_dtype = PyRef::steal(PyObject_GetAttrString(q, "dtype"));
      PyRef q_device = PyRef::steal(PyObject_GetAttrString(q, "device"));
      if (!q_dtype || !q_device) throw PythonError();
      PyRef pos = PyRef::steal(PyTuple_Pack(2, q_size.get(), q_stride.get()));
      PyRef kw = PyRef::steal(
          Py_BuildValue("{s:O,s:O}", "dtype", q_dtype.get(), "device", q_device.get()));
      if (!pos || !kw) throw PythonError();
      like = PyRef::steal(PyObject_Call(torch_api().empty_strided.get(), pos.get(), kw.get()));
      if (!like) throw PythonError();
    }
    int same_shape = dense == 1 ? PyObject_RichCompareBool(call(q, "size").get(),
                                                           call(result.get(), "size").get(), Py_EQ)
                                : 0;
    if (dense < 0 || same_shape < 0) throw PythonError();
    if (same_shape) {
      // NOTE: empty_like drops requires_grad; the prediction keeps the result's (passes read
      // it: a CUDA attention result that needs grad was taken for an inference one).
      PyRef grad = PyRef::steal(PyObject_GetAttrString(result.get(), "requires_grad"));
      if (!grad) throw PythonError();
      if (grad.get() == Py_True &&
          !PyRef::steal(PyObject_CallMethod(like.get(), "requires_grad_", nullptr)))
        throw PythonError();
      return like;
    }
  }
  PyRef t = PyRef::steal(PyObject_CallMethod(result.get(), "transpose", "ii", 1, 2));
  if (t) t = PyRef::steal(PyObject_CallMethod(t.get(), "contiguous", nullptr));
  if (t) t = PyRef::steal(PyObject_CallMethod(t.get(), "transpose", "ii", 1, 2));
  if (!t) throw PythonError();
  return t;
}

ValuePtr CaptureContext::record_op(PyObject* target, const std::string& method,
                                   const std::vector<ValuePtr>& args,
                                   const std::vector<std::pair<std::string, ValuePtr>>& kwargs) {
  // NOTE: numbers a resume function takes per call (capture/scalar_inputs.h).
  if (any_scalar)
    if (ValuePtr r = scalar_op(*this, target, method, args, kwargs)) return r;
  const TorchApi& api = torch_api();
  std::string op_name = method.empty() ? fn_short_name(target) : method;
  if (!method.empty() && data_dependent_methods().count(method)) {
    static const std::unordered_set<std::string> number_reads = {
        "item", "tolist", "__bool__", "__int__", "__float__", "__index__"};
    if (args.size() == 1 && kwargs.empty() && number_reads.count(method))
      if (auto r = folded_call(*this, args[0], method.c_str())) return *r;
    graph_break("data_dependent_op", "Tensor." + method +
                                         "() needs the tensor's values, which are not known "
                                         "while tracing");
  }
  check_effect_order(*this, op_name, args, kwargs);
  // Sizes as symbolic ints (docs/internals/dynamic-shapes.md); the rank is guarded.
  if (!method.empty() && !args.empty() && args[0]->is_tensor() && kwargs.empty()) {
    if (method == "size" && args.size() == 1) return shape_value(args[0]);
    if (method == "size" && args.size() == 2 && args[1]->is_const() &&
        PyLong_Check(args[1]->obj.get())) {
      specialise(args[1]);
      return size_value(args[0], PyLong_AsLongLong(args[1]->obj.get()));
    }
    if ((method == "dim" || method == "ndimension") && args.size() == 1) {
      PyRef shape = PyRef::steal(PyObject_GetAttrString(args[0]->meta.get(), "shape"));
      if (!shape) throw PythonError();
      return Value::constant(PyRef::steal(PyLong_FromSsize_t(PyTuple_GET_SIZE(shape.get()))));
    }
    if (method == "numel" && args.size() == 1) {
      ValuePtr shape = shape_value(args[0]);
      ir::SymExprPtr e = ir::sym_int(1);
      PyRef n = PyRef::steal(PyLong_FromLong(1));
      for (auto& d : shape->items) {
        e = ir::sym_mul(e, d->sym ? d->sym : ir::sym_int(PyLong_AsLongLong(d->obj.get())));
        n = PyRef::steal(PyNumber_Multiply(n.get(), d->obj.get()));
        if (!n) throw PythonError();
      }
      ValuePtr v = Value::constant(n);
      if (!e->constant()) v->sym = e;
      return v;
    }
  }
  // NOTE: these change the shape or strides of the tensor object itself; the graph would keep
  // reading it through the node made before the change (`y.t_(); y + 1` added in the old
  // layout). CPython runs them; the code after them sees the tensor as it now is.
  static const std::unordered_set<std::string> metadata_inplace = {
      "t_",          "transpose_", "swapdims_",  "swapaxes_", "squeeze_",     "unsqueeze_",
      "as_strided_", "resize_",    "resize_as_", "set_",      "share_memory_"};
  if (metadata_inplace.count(op_name))
    graph_break("unsupported_side_effect",
                op_name + "() changes the tensor's shape or strides in place; it runs in CPython",
                "Use the out-of-place form (x = x.t()) inside compiled code.");
  // Device: the real device of the result. Meta execution swaps devices for "meta".
  PyRef device;
  bool has_tensor = false;
  // The first tensor operand, also inside a list or tuple (torch.cat((a, b))) or
  // a keyword, gives the device.
  std::function<void(const ValuePtr&)> find_device = [&](const ValuePtr& a) {
    if (!a) return;
    if (a->is_tensor()) {
      if (!device) device = a->device;
      has_tensor = true;
    } else if (a->kind == VKind::Tuple || a->kind == VKind::List) {
      for (auto& item : a->items) find_device(item);
    }
  };
  for (auto& a : args) find_device(a);
  for (auto& kv : kwargs) find_device(kv.second);
  std::vector<ValuePtr> meta_pos = args;
  PyRef meta_kwargs = PyRef::steal(PyDict_New());
  bool is_to = method == "to" || method == "cuda" || method == "cpu";
  for (auto& [k, v] : kwargs) {
    if (v->is_tensor()) has_tensor = true;
    bool dev = k == "device";
    if (dev && v->is_const() && v->obj.get() != Py_None) {
      device = PyRef::steal(PyObject_CallOneArg(api.device_type.get(), v->obj.get()));
      if (!device) throw PythonError();
      if (is_to) continue;  // meta .to() keeps only the dtype change
    }
    if (PyDict_SetItemString(meta_kwargs.get(), k.c_str(), to_meta_arg(v, dev).get()) < 0)
      throw PythonError();
  }
  // NOTE: `device=None` is the default device, as no device at all: the meta call must still
  // get device="meta" (else it allocates a real tensor and mixes it with meta ones).
  PyObject* given_device = PyDict_GetItemString(meta_kwargs.get(), "device");  // borrowed
  if (method.empty() && factory_functions().count(op_name) &&
      (!given_device || given_device == Py_None) && op_name.find("_like") == std::string::npos) {
    if (PyDict_SetItemString(meta_kwargs.get(), "device", api.meta_device.get()) < 0)
      throw PythonError();
    if (!device || !has_tensor)
      device = PyRef::steal(PyObject_CallFunction(api.device_type.get(), "s", "cpu"));
  }
  std::string call_method = method;
  if (is_to) {
    // x.to(device/dtype/other), x.cuda(), x.cpu(): compute the meta result
    // without moving data; the graph keeps the real call.
    std::vector<ValuePtr> kept{args[0]};
    for (size_t i = 1; i < args.size(); ++i) {
      const ValuePtr& a = args[i];
      if (a->is_tensor()) {
        device = a->device;
        kept.push_back(a);
        continue;
      }
      if (a->is_const() && (PyUnicode_Check(a->obj.get()) ||
                            PyObject_TypeCheck(a->obj.get(), reinterpret_cast<PyTypeObject*>(
                                                                 api.device_type.get())) ||
                            (method != "to" && PyLong_Check(a->obj.get())))) {
        PyObject* spec = a->obj.get();
        if (method == "cuda" && PyLong_Check(spec)) {
          device = PyRef::steal(PyObject_CallFunction(api.device_type.get(), "sO", "cuda", spec));
        } else {
          device = PyRef::steal(PyObject_CallOneArg(api.device_type.get(), spec));
        }
        if (!device) throw PythonError();
        continue;
      }
      kept.push_back(a);
    }
    if (method == "cuda" && (args.size() == 1))
      device = PyRef::steal(PyObject_CallFunction(api.device_type.get(), "s", "cuda"));
    if (method == "cpu")
      device = PyRef::steal(PyObject_CallFunction(api.device_type.get(), "s", "cpu"));
    if (!device) throw PythonError();
    meta_pos = kept;
    if (method != "to") call_method = "";
  }
  if (!device) device = PyRef::steal(PyObject_CallFunction(api.device_type.get(), "s", "cpu"));

  // Run on meta tensors.
  PyRef result;
  if (is_to && call_method.empty()) {
    result = meta_pos[0]->meta;  // .cpu()/.cuda(): same metadata on another device
  } else {
    size_t first = method.empty() ? 0 : 1;
    PyRef pos = PyRef::steal(PyTuple_New(meta_pos.size() - first));
    for (size_t i = first; i < meta_pos.size(); ++i)
      PyTuple_SET_ITEM(pos.get(), i - first, to_meta_arg(meta_pos[i]).release());
    check_eager_only_errors(*this, op_name, args);
    PyRef self = method.empty() ? PyRef() : to_meta_arg(args[0]);
    bool query = is_state_query(method, op_name, args, kwargs);
    PyObject* kw = PyDict_Size(meta_kwargs.get()) ? meta_kwargs.get() : nullptr;
    result = meta_call(target, method, self.get(), pos.get(), kw,
                       /*cacheable=*/!autocast_on && !query);
    // NOTE: a layout that cannot be known would be a wrong stride(): run the op eagerly.
    {
      try {
        result = eager_result_layout(op_name, method.empty() ? target : nullptr, self.get(),
                                     std::move(result), device.get(), pos.get(), kw);
      } catch (const PythonError&) {
        graph_break("op_error", op_name + ": the layout eager's kernel gives its result could " +
                                    "not be determined: " + exception_text());
      }
    }
    // NOTE: its answer is baked into the trace: it must still hold on later calls
    // (torch.autograd._profiler_enabled() once a profiler starts).
    if (query && result && is_immutable_constant(result.get()))
      guards_.add_call_result(target, result.get());
    if (!result) {
      std::string err = exception_text();
      // NOTE: a folded tensor where the op wants a number (`x.view(n, torch.div(s, w))`):
      // eager reads it through __index__; the meta tensor cannot.
      if (auto numbers = with_folded_numbers(*this, method, args, kwargs))
        return record_op(target, method, numbers->first, numbers->second);
      bool data_dep = err.find("data-dependent") != std::string::npos ||
                      err.find("data dependent") != std::string::npos ||
                      data_dependent_methods().count(op_name) ||
                      err.find("item()") != std::string::npos;
      graph_break(data_dep ? "data_dependent_op" : "op_error",
                  (method.empty() ? op_name : "Tensor." + method) +
                      " raised while tracing (it runs eagerly so the real error, if any, "
                      "surfaces): " +
                      err);
    }
  }

  if (!contains_tensor(result.get()) && !(result.get() == Py_None && has_tensor)) {
    // NOTE: a number or sequence computed from tensors (x.size(0), x.numel(), x.stride())
    // holds their sizes.
    if (has_tensor && result.get() != Py_None)
      read_size((method.empty() ? op_name : "Tensor." + method) + " answering a number");
    return from_result(result.get());
  }
  // NOTE: how many results chunk/split/unbind give follows from a size: the trace holds where
  // the split dimension keeps its size and the split arguments their values.
  if (PyTuple_Check(result.get()) || PyList_Check(result.get())) {
    bool unbind = op_name == "unbind";
    bool counted = (op_name == "split" || op_name == "chunk" || unbind) && !args.empty() &&
                   args[0]->is_tensor();
    ValuePtr dim;
    size_t dim_pos = unbind ? 1 : 2;
    if (counted) {
      if (args.size() > dim_pos) dim = args[dim_pos];
      for (auto& [k, v] : kwargs)
        if (k == "dim") dim = v;
      if (!dim) dim = Value::constant(PyRef::steal(PyLong_FromLong(0)));
      counted = dim->is_const() && PyLong_Check(dim->obj.get()) && !dim->sym;
    }
    // NOTE: a torch.return_types result (x.max(dim), sort, topk, aminmax: a structseq) and
    // var_mean/std_mean's pair have as many items at every size.
    bool fixed = (PyTuple_Check(result.get()) && !PyTuple_CheckExact(result.get()) &&
                  PyObject_HasAttrString(reinterpret_cast<PyObject*>(Py_TYPE(result.get())),
                                         "n_sequence_fields")) ||
                 op_name == "var_mean" || op_name == "std_mean";
    if (counted) {
      for (size_t i = 1; i < args.size(); ++i) specialise(args[i]);
      for (auto& kv : kwargs) specialise(kv.second);
      specialise(size_value(args[0], PyLong_AsLongLong(dim->obj.get())));
    } else if (!fixed) {
      read_size((method.empty() ? op_name : "Tensor." + method) + " answering a sequence");
    }
  }
  // NOTE: a result of a tensor subclass (`x.as_subclass(MyT)`) would come back from the graph
  // as a plain tensor, losing its type and overrides.
  if (PyObject_TypeCheck(result.get(), reinterpret_cast<PyTypeObject*>(api.tensor_type.get())) &&
      Py_TYPE(result.get()) != reinterpret_cast<PyTypeObject*>(api.tensor_type.get()) &&
      Py_TYPE(result.get()) != reinterpret_cast<PyTypeObject*>(api.parameter_type.get()))
    graph_break("tensor_subclass",
                (method.empty() ? op_name : "Tensor." + method) + " returned a tensor subclass (" +
                    Py_TYPE(result.get())->tp_name + "), which is not supported; it runs eagerly");
  if (op_name.find("scaled_dot_product_attention") != std::string::npos) {
    ValuePtr p = args.size() > 4 ? args[4] : nullptr;
    for (auto& [k, v] : kwargs)
      if (k == "dropout_p") p = v;
    const bool drops = attention_drops(p != nullptr, p && p->is_const() ? p->obj.get() : nullptr);
    result = fused_attention_layout(std::move(result), args.empty() ? nullptr : args[0]->meta.get(),
                                    device.get(), drops);
  }
  std::vector<ir::Arg> node_args;
  for (auto& a : args) node_args.push_back(value_to_arg(a));
  std::vector<std::pair<std::string, ir::Arg>> node_kwargs;
  for (auto& [k, v] : kwargs) node_kwargs.emplace_back(k, value_to_arg(v));
  ir::Node* node =
      method.empty()
          ? graph_->add_call_function(PyRef::borrow(target), std::move(node_args),
                                      std::move(node_kwargs))
          : graph_->add_call_method(method, std::move(node_args), std::move(node_kwargs));
  node->location = location;
  if (result.get() == Py_None) {
    fold_result(*this, target, method, args, kwargs, *node, nullptr);
    return Value::constant(PyRef::borrow(Py_None));
  }
  ValuePtr out = result_value(result.get(), node, device);
  fold_result(*this, target, method, args, kwargs, *node, out);
  // An op that returns one of its tensor arguments (x.add_(1), out=, a no-op .to() or
  // .contiguous()) returns that very object in eager: `y is x` must hold.
  // NOTE: whether an op returns its argument can follow from the sizes (`.to(memory_format=)`,
  // an in-place op's out=): a size read, unless the answer follows from what the guards and the
  // op's constant arguments fix (a cast to the same dtype, dropout outside training) or is
  // checked again per size (`.contiguous()`: SizeInstances' gives_view). An op that writes its
  // first operand (`x.add_(1)`, `x += y`, `F.relu(x, inplace=True)`) or its out= returns that
  // tensor at every size.
  bool identity_by_dtype = size_blind_identity(method.empty() ? op_name : method, !method.empty());
  for (auto& kv : kwargs) identity_by_dtype = identity_by_dtype && kv.first != "memory_format";
  const bool writes = ir::writes_operand(*node);
  // NOTE: `z.add_(z)`: the written operand, passed twice, is returned as any other argument too.
  const bool returns_written = writes && !args.empty() && args[0] && args[0]->is_tensor() &&
                               args[0]->meta.get() == result.get();
  auto returns_arg = [&](const ValuePtr& a, bool written) {
    if (out->is_tensor() && a && a->is_tensor() && a->meta.get() == result.get()) {
      out->same_object = a->same_object ? a->same_object : a;
      if (!identity_by_dtype && !(writes && (written || returns_written)))
        read_size((method.empty() ? op_name : "Tensor." + method) + " returning its argument");
    }
  };
  for (size_t i = 0; i < args.size(); ++i) returns_arg(args[i], i == 0);
  for (auto& kv : kwargs) returns_arg(kv.second, kv.first == "out");
  return out;
}

bool guarded_by_code(PyObject* obj, const ir::SourcePtr& src) {
  if (!src || !PyFunction_Check(obj)) return false;
  // NOTE: a local, an item of containers a local holds, or a cell of such a function (a
  // recursive local function is in its own closure); not an attribute of an object
  const ir::Source* root = src.get();
  while (root->base && (root->kind == ir::SourceKind::Item ||
                        (root->kind == ir::SourceKind::Attr &&
                         (root->name == "cell_contents" || root->name == "__closure__"))))
    root = root->base.get();
  if (root->kind != ir::SourceKind::Local && root->kind != ir::SourceKind::Closure) return false;
  PyObject* q = PyFunction_GET_CODE(obj)
                    ? reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(obj))->co_qualname
                    : nullptr;
  const char* c = q ? PyUnicode_AsUTF8(q) : nullptr;
  if (!c) {
    PyErr_Clear();
    return false;
  }
  return std::string_view(c).find("<locals>") != std::string_view::npos;
}

}  // namespace tl::capture
