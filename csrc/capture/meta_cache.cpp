#include "capture/meta_cache.h"

#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "capture/fast_meta.h"
#include "capture/torch_api.h"
#include "core/errors.h"
#include "core/flags.h"

namespace tl::capture {
namespace {

// How one output of a cached call is rebuilt from the new call's arguments.
enum class OutKind { SameAsArg, ViewOfArg, Fresh, ViewOfNew };

struct OutSpec {
  OutKind kind = OutKind::Fresh;
  size_t arg = 0;        // SameAsArg, ViewOfArg: index among the call's tensors;
                         // ViewOfNew: index among the entry's new bases
  PyRef sizes, strides;  // all but SameAsArg (immutable tuples, shared)
  Py_ssize_t offset = 0;
  PyRef dtype;
};

struct Entry {
  PyRef target;    // keeps the function alive, so its address in the key stays its own
  char container;  // 't' one tensor, '(' a tuple, '[' a list
  std::vector<OutSpec> outs;
  // Tensors the op made and returned only views of (F.linear on 3-d input
  // returns a view of its 2-d matmul result): rebuilt once per call, shared
  // by the outputs that view them.
  std::vector<OutSpec> new_bases;
  std::vector<PyObject*> new_base_ids;  // while describing only (borrowed)
};

// NOTE: a full cache is dropped whole: entries are small and a model rarely has
// more distinct op signatures than this.
constexpr size_t kMaxEntries = 8192;

struct Cache {
  std::mutex mutex;  // captures hold the GIL; the lock keeps the map sound regardless
  std::unordered_map<std::string, Entry> entries;
  long long hits = 0;
};

// NOTE: never destroyed: entries own Python references, which must not be
// released after the interpreter has finalised.
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

struct Types {
  PyObject* tensor;
  PyObject* size;
  PyObject* dtype;
  PyObject* device;
  PyObject* memory_format;
  PyObject* layout;
  PyObject* strided;
  PyObject* get_default_dtype;
  std::unordered_set<PyObject*> complex_dtypes;
};

PyObject* torch_attr(const char* name) {
  PyObject* o = PyObject_GetAttrString(torch_api().torch.get(), name);
  if (!o) throw PythonError();
  return o;  // kept for the process's lifetime
}

const Types& types() {
  static const Types* t = [] {
    const TorchApi& api = torch_api();
    auto* t = new Types();
    t->tensor = api.tensor_type.get();
    t->size = api.size_type.get();
    t->dtype = api.dtype_type.get();
    t->device = api.device_type.get();
    t->memory_format = torch_attr("memory_format");
    t->layout = torch_attr("layout");
    t->strided = torch_attr("strided");
    t->get_default_dtype = torch_attr("get_default_dtype");
    for (const char* c : {"complex32", "complex64", "complex128"}) {
      PyObject* d = PyObject_GetAttrString(api.torch.get(), c);
      if (d) t->complex_dtypes.insert(d);
      clear_expected_error();
    }
    return t;
  }();
  return *t;
}

PyRef attr(PyObject* o, const char* name) {
  PyRef r = PyRef::steal(PyObject_GetAttrString(o, name));
  if (!r) throw PythonError();
  return r;
}

PyRef call0(PyObject* o, const char* name) {
  PyRef r = PyRef::steal(PyObject_CallMethod(o, name, nullptr));
  if (!r) throw PythonError();
  return r;
}

bool in_place(const std::string& name) {
  static const std::unordered_set<std::string> dunders = {
      "__iadd__",    "__isub__",    "__imul__",    "__itruediv__", "__ifloordiv__", "__imod__",
      "__ipow__",    "__imatmul__", "__iand__",    "__ior__",      "__ixor__",      "__ilshift__",
      "__irshift__", "__setitem__", "__delitem__", "__setstate__", "__set__"};
  if (dunders.count(name)) return true;
  bool dunder = name.size() > 4 && name.compare(0, 2, "__") == 0 &&
                name.compare(name.size() - 2, 2, "__") == 0;
  return !dunder && !name.empty() && name.back() == '_';
}

// Serialises a call's arguments into a key, collecting its tensors in order.
// `ok` turns false at anything whose meta result might depend on more than
// what the key records.
struct KeyBuilder {
  std::string key;
  std::vector<PyObject*> tensors;
  bool ok = true;

  void i64(long long v) {
    key += std::to_string(v);
    key += ',';
  }

  void ints(PyObject* seq) {
    key += '<';
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; ++i) i64(PyLong_AsLongLong(PyTuple_GET_ITEM(seq, i)));
    key += '>';
  }

  void tensor(PyObject* t) {
    const Types& ty = types();
    if (Py_TYPE(t) != reinterpret_cast<PyTypeObject*>(ty.tensor)) {
      ok = false;  // a subclass may override what ops do
      return;
    }
    if (attr(t, "layout").get() != ty.strided) {
      ok = false;
      return;
    }
    // Outputs that need grad are never cached, but whether they would depends
    // on the inputs' flags (and the grad mode, also in the key).
    key += attr(t, "requires_grad").get() == Py_True ? 'g' : 'n';
    PyRef dtype = attr(t, "dtype");
    if (ty.complex_dtypes.count(dtype.get())) {
      ok = false;  // conjugate and negative bits are not in the key
      return;
    }
    PyRef shape = attr(t, "shape");
    PyRef stride = call0(t, "stride");
    PyRef offset = call0(t, "storage_offset");
    if (!PyTuple_Check(shape.get()) || !PyTuple_Check(stride.get())) {
      ok = false;
      return;
    }
    key += 'T';
    i64(static_cast<long long>(tensors.size()));
    key += std::to_string(reinterpret_cast<uintptr_t>(dtype.get()));  // dtypes are singletons
    ints(shape.get());
    ints(stride.get());
    i64(PyLong_AsLongLong(offset.get()));
    throw_if_python_error();
    tensors.push_back(t);
  }

  void add(PyObject* o) {
    if (!ok) return;
    const Types& ty = types();
    if (o == Py_None) {
      key += 'N';
    } else if (o == Py_Ellipsis) {
      key += 'E';
    } else if (PyBool_Check(o)) {
      key += o == Py_True ? "b1" : "b0";
    } else if (PyLong_CheckExact(o)) {
      int overflow = 0;
      long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
      if (overflow) ok = false;
      key += 'i';
      i64(v);
    } else if (PyFloat_CheckExact(o)) {
      double d = PyFloat_AS_DOUBLE(o);
      uint64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      key += 'f';
      key += std::to_string(bits);
      key += ',';
    } else if (PyUnicode_CheckExact(o)) {
      Py_ssize_t n = 0;
      const char* s = PyUnicode_AsUTF8AndSize(o, &n);
      if (!s) throw PythonError();
      key += 's';
      i64(n);
      key.append(s, static_cast<size_t>(n));
    } else if (PySlice_Check(o)) {
      auto* s = reinterpret_cast<PySliceObject*>(o);
      key += ':';
      add(s->start);
      add(s->stop);
      add(s->step);
    } else if (PyTuple_CheckExact(o) || PyList_CheckExact(o) ||
               Py_TYPE(o) == reinterpret_cast<PyTypeObject*>(ty.size)) {
      key += PyList_CheckExact(o)                                     ? '['
             : Py_TYPE(o) == reinterpret_cast<PyTypeObject*>(ty.size) ? 'S'
                                                                      : '(';
      Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
      for (Py_ssize_t i = 0; i < n; ++i) add(PySequence_Fast_GET_ITEM(o, i));
      key += ')';
    } else if (Py_TYPE(o) == reinterpret_cast<PyTypeObject*>(ty.tensor) ||
               PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(ty.tensor))) {
      tensor(o);
    } else if (Py_TYPE(o) == reinterpret_cast<PyTypeObject*>(ty.dtype) ||
               Py_TYPE(o) == reinterpret_cast<PyTypeObject*>(ty.memory_format) ||
               Py_TYPE(o) == reinterpret_cast<PyTypeObject*>(ty.layout)) {
      key += 'o';  // singletons: the address names them
      key += std::to_string(reinterpret_cast<uintptr_t>(o));
      key += ',';
    } else if (Py_TYPE(o) == reinterpret_cast<PyTypeObject*>(ty.device)) {
      PyRef s = PyRef::steal(PyObject_Str(o));
      if (!s) throw PythonError();
      key += 'D';
      add(s.get());
    } else {
      ok = false;
    }
  }
};

bool same_storage(PyObject* a, PyObject* b) {
  PyRef ca = attr(a, "_cdata"), cb = attr(b, "_cdata");
  int eq = PyObject_RichCompareBool(ca.get(), cb.get(), Py_EQ);
  if (eq < 0) throw PythonError();
  return eq == 1;
}

PyRef root_of(PyObject* t) {
  PyRef base = attr(t, "_base");
  return base.get() == Py_None ? PyRef::borrow(t) : base;
}

// Describes one output tensor of a call relative to its argument tensors, or
// returns false when it cannot be rebuilt from them.
bool describe(PyObject* out, const std::vector<PyObject*>& args, Entry& e, OutSpec& spec) {
  const Types& ty = types();
  if (Py_TYPE(out) != reinterpret_cast<PyTypeObject*>(ty.tensor)) return false;
  if (attr(out, "requires_grad").get() != Py_False || attr(out, "layout").get() != ty.strided)
    return false;
  for (size_t k = 0; k < args.size(); ++k) {
    if (args[k] == out) {
      spec.kind = OutKind::SameAsArg;
      spec.arg = k;
      return true;
    }
  }
  // NOTE: a plain tuple, not the torch.Size: tuples of ints are untracked by the cyclic
  // collector, torch.Size (a subclass) is not, and the cache keeps one per op signature and
  // size (every new sequence length adds its own entries).
  spec.sizes = PyRef::steal(PySequence_Tuple(attr(out, "shape").get()));
  if (!spec.sizes) throw PythonError();
  spec.strides = call0(out, "stride");
  spec.dtype = attr(out, "dtype");
  PyRef offset = call0(out, "storage_offset");
  spec.offset = PyLong_AsSsize_t(offset.get());
  throw_if_python_error();
  PyRef base = attr(out, "_base");
  if (base.get() == Py_None) {
    // NOTE: not a view yet sharing an argument's memory (`y.detach()`, `x.data`): a fresh
    // rebuild would lose that, and an in-place op through it would no longer be seen as
    // writing the argument. Such calls are not cached.
    PyRef storage = call0(out, "untyped_storage");
    for (PyObject* a : args)
      if (same_storage(call0(a, "untyped_storage").get(), storage.get())) return false;
    spec.kind = OutKind::Fresh;
    return spec.offset == 0;
  }
  for (size_t k = 0; k < args.size(); ++k) {
    if (root_of(args[k]).get() != base.get()) continue;
    if (attr(args[k], "dtype").get() != spec.dtype.get()) return false;  // view(dtype)
    spec.kind = OutKind::ViewOfArg;
    spec.arg = k;
    return true;
  }
  // A view of a tensor the op made itself.
  if (Py_TYPE(base.get()) != reinterpret_cast<PyTypeObject*>(ty.tensor)) return false;
  // NOTE: a view of `x.detach()` is a view of x's memory too (no `_base` chain shows it).
  PyRef base_storage = call0(base.get(), "untyped_storage");
  for (PyObject* a : args)
    if (same_storage(call0(a, "untyped_storage").get(), base_storage.get())) return false;
  size_t slot = 0;
  while (slot < e.new_base_ids.size() && e.new_base_ids[slot] != base.get()) ++slot;
  if (slot == e.new_base_ids.size()) {
    OutSpec b;
    if (!describe(base.get(), {}, e, b) || b.kind != OutKind::Fresh) return false;
    e.new_bases.push_back(std::move(b));
    e.new_base_ids.push_back(base.get());
  }
  if (e.new_bases[slot].dtype.get() != spec.dtype.get()) return false;
  spec.kind = OutKind::ViewOfNew;
  spec.arg = slot;
  return true;
}

bool describe_result(PyObject* result, const std::vector<PyObject*>& args, Entry& e) {
  if (PyTuple_CheckExact(result) || PyList_CheckExact(result)) {
    e.container = PyList_CheckExact(result) ? '[' : '(';
    Py_ssize_t n = PySequence_Fast_GET_SIZE(result);
    for (Py_ssize_t i = 0; i < n; ++i) {
      OutSpec s;
      if (!describe(PySequence_Fast_GET_ITEM(result, i), args, e, s)) return false;
      e.outs.push_back(std::move(s));
    }
    return n > 0;
  }
  e.container = 't';
  OutSpec s;
  if (!describe(result, args, e, s)) return false;
  e.outs.push_back(std::move(s));
  return true;
}

PyRef fresh(const OutSpec& s) {
  const TorchApi& api = torch_api();
  PyRef pos = PyRef::steal(PyTuple_Pack(2, s.sizes.get(), s.strides.get()));
  PyRef kw = PyRef::steal(
      Py_BuildValue("{s:O,s:O}", "dtype", s.dtype.get(), "device", api.meta_device.get()));
  if (!pos || !kw) return PyRef();
  return PyRef::steal(PyObject_Call(api.empty_strided.get(), pos.get(), kw.get()));
}

PyRef view(PyObject* base, const OutSpec& s) {
  return PyRef::steal(
      PyObject_CallMethod(base, "as_strided", "OOn", s.sizes.get(), s.strides.get(), s.offset));
}

PyRef rebuild_one(const OutSpec& s, const std::vector<PyObject*>& args,
                  const std::vector<PyRef>& new_bases) {
  switch (s.kind) {
    case OutKind::SameAsArg:
      return PyRef::borrow(args[s.arg]);
    case OutKind::ViewOfArg:
      return view(args[s.arg], s);
    case OutKind::ViewOfNew:
      return view(new_bases[s.arg].get(), s);
    case OutKind::Fresh:
      return fresh(s);
  }
  return PyRef();
}

// Null with the Python error set if a rebuild fails.
PyRef rebuild(const Entry& e, const std::vector<PyObject*>& args) {
  std::vector<PyRef> new_bases;
  for (const OutSpec& b : e.new_bases) {
    new_bases.push_back(fresh(b));
    if (!new_bases.back()) return PyRef();
  }
  if (e.container == 't') return rebuild_one(e.outs[0], args, new_bases);
  auto n = static_cast<Py_ssize_t>(e.outs.size());
  PyRef seq = PyRef::steal(e.container == '[' ? PyList_New(n) : PyTuple_New(n));
  if (!seq) return seq;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyRef item = rebuild_one(e.outs[static_cast<size_t>(i)], args, new_bases);
    if (!item) return item;
    if (e.container == '[')
      PyList_SET_ITEM(seq.get(), i, item.release());
    else
      PyTuple_SET_ITEM(seq.get(), i, item.release());
  }
  return seq;
}

PyRef call_now(PyObject* target, const std::string& method, PyObject* self, PyObject* pos,
               PyObject* kwargs) {
  PyRef fn = method.empty() ? PyRef::borrow(target)
                            : PyRef::steal(PyObject_GetAttrString(self, method.c_str()));
  if (!fn) return fn;
  return PyRef::steal(PyObject_Call(fn.get(), pos, kwargs));
}

}  // namespace

PyRef meta_call(PyObject* target, const std::string& method, PyObject* self, PyObject* pos,
                PyObject* kwargs, bool cacheable) {
  std::string name;
  if (cacheable) {
    if (method.empty()) {
      PyRef n = PyRef::steal(PyObject_GetAttrString(target, "__name__"));
      if (n && PyUnicode_Check(n.get())) name = PyUnicode_AsUTF8(n.get());
      clear_expected_error();
    } else {
      name = method;
    }
    cacheable =
        !name.empty() && !in_place(name) && !(kwargs && PyDict_GetItemString(kwargs, "out"));
  }
  if (!cacheable) return call_now(target, method, self, pos, kwargs);
  if (PyRef fast = fast_meta_call(target, method, self, pos, kwargs)) {
    if (process_settings().check_meta) {
      PyRef real = call_now(target, method, self, pos, kwargs);
      check_fast_meta(name, fast.get(), real.get());
    }
    return fast;
  }

  KeyBuilder kb;
  try {
    const Types& ty = types();
    // NOTE: built by push_back/append: GCC 12 warns (-Wrestrict, wrongly) on string
    // assignment from a literal here.
    kb.key.push_back(method.empty() ? 'f' : 'm');
    if (method.empty()) kb.key += std::to_string(reinterpret_cast<uintptr_t>(target));
    kb.key += name;
    kb.key += '|';
    PyRef dd = PyRef::steal(PyObject_CallNoArgs(ty.get_default_dtype));  // float promotion
    if (!dd) throw PythonError();
    kb.add(dd.get());
    PyRef grad = PyRef::steal(PyObject_CallNoArgs(torch_api().is_grad_enabled_fn.get()));
    if (!grad) throw PythonError();
    kb.add(grad.get());
    if (self) kb.add(self);
    kb.key += '|';
    kb.add(pos);
    if (kwargs) {
      PyObject *k, *v;
      Py_ssize_t i = 0;
      while (kb.ok && PyDict_Next(kwargs, &i, &k, &v)) {
        kb.key += '|';
        kb.add(k);
        kb.add(v);
      }
    }
  } catch (const PythonError&) {
    clear_expected_error();
    kb.ok = false;
  }
  if (!kb.ok) return call_now(target, method, self, pos, kwargs);

  Cache& c = cache();
  std::optional<Entry> hit;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.entries.find(kb.key);
    if (it != c.entries.end()) hit = it->second;
  }
  if (hit) {
    PyRef r = rebuild(*hit, kb.tensors);
    if (r) {
      std::lock_guard<std::mutex> lock(c.mutex);
      ++c.hits;
      return r;
    }
    clear_expected_error();  // fall back to the op itself
  }

  PyRef result = call_now(target, method, self, pos, kwargs);
  if (!result) return result;
  Entry e;
  try {
    if (!describe_result(result.get(), kb.tensors, e)) return result;
  } catch (const PythonError&) {
    clear_expected_error();
    return result;
  }
  e.target = PyRef::borrow(target);
  e.new_base_ids.clear();
  std::unordered_map<std::string, Entry> dropped;  // released outside the lock
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.entries.size() >= kMaxEntries) dropped.swap(c.entries);
  c.entries.emplace(std::move(kb.key), std::move(e));
  return result;
}

void clear_meta_cache() {
  Cache& c = cache();
  std::unordered_map<std::string, Entry> old;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    old.swap(c.entries);
  }
  // `old` releases its Python references here, outside the lock.
}

long long meta_cache_hits() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.hits;
}

}  // namespace tl::capture
