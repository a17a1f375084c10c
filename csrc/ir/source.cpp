#include "ir/source.h"

#include <cstdio>

#include "core/errors.h"

namespace tl::ir {

namespace {
SourcePtr make(SourceKind kind, SourcePtr base, std::string name, int index, PyRef key) {
  auto s = std::make_shared<Source>();
  s->kind = kind;
  s->base = std::move(base);
  s->name = std::move(name);
  s->index = index;
  s->key = std::move(key);
  return s;
}

std::string key_repr(PyObject* key) {
  PyRef r = PyRef::steal(PyObject_Repr(key));
  if (!r) {
    PyErr_Clear();
    return "?";
  }
  const char* s = PyUnicode_AsUTF8(r.get());
  return s ? s : "?";
}
}  // namespace

SourcePtr Source::local(int slot, std::string name) {
  return make(SourceKind::Local, nullptr, std::move(name), slot, {});
}
SourcePtr Source::closure(int cell, std::string name) {
  return make(SourceKind::Closure, nullptr, std::move(name), cell, {});
}
SourcePtr Source::global(std::string name) {
  return make(SourceKind::Global, nullptr, std::move(name), -1, {});
}
SourcePtr Source::builtin(std::string name) {
  return make(SourceKind::Builtin, nullptr, std::move(name), -1, {});
}
SourcePtr Source::attr(SourcePtr base, std::string name) {
  TL_CHECK(base != nullptr);
  return make(SourceKind::Attr, std::move(base), std::move(name), -1, {});
}
SourcePtr Source::item(SourcePtr base, PyRef key) {
  TL_CHECK(base != nullptr && key);
  return make(SourceKind::Item, std::move(base), "", -1, std::move(key));
}

SourcePtr Source::held(PyRef obj, std::string what) {
  TL_CHECK(obj);
  return make(SourceKind::Held, nullptr, std::move(what), -1, std::move(obj));
}

SourcePtr Source::deref(SourcePtr weakref) {
  TL_CHECK(weakref != nullptr);
  return make(SourceKind::Deref, std::move(weakref), "", -1, {});
}

SourcePtr Source::scalar_tensor(SourcePtr number, PyRef dtype_device, std::string dtype_name) {
  TL_CHECK(number != nullptr && dtype_device && PyTuple_Check(dtype_device.get()) &&
           PyTuple_GET_SIZE(dtype_device.get()) == 2);
  return make(SourceKind::ScalarTensor, std::move(number), std::move(dtype_name), -1,
              std::move(dtype_device));
}

std::string Source::str() const {
  switch (kind) {
    case SourceKind::Local:
      return "L['" + name + "']";
    case SourceKind::Closure:
      return "L['" + name + "']";
    case SourceKind::Global:
      return "G['" + name + "']";
    case SourceKind::Builtin:
      return "G['__builtins__']['" + name + "']";
    case SourceKind::Attr:
      return base->str() + "." + name;
    case SourceKind::Item:
      return base->str() + "[" + key_repr(key.get()) + "]";
    case SourceKind::Deref:
      return base->str() + "()";
    case SourceKind::ScalarTensor:
      // NOTE: the device makes the text unique (sources are deduplicated by it).
      return "scalar_tensor(" + base->str() + ", " + name + ", " +
             key_repr(PyTuple_GET_ITEM(key.get(), 1)) + ")";
    case SourceKind::Held: {
      // NOTE: the address makes the text unique: sources are deduplicated by it.
      char addr[32];
      snprintf(addr, sizeof(addr), " at %p", static_cast<void*>(key.get()));
      return "<" + name + addr + ">";
    }
  }
  return "?";
}

}  // namespace tl::ir
