#include "capture/made_in_call.h"

#include <string_view>
#include <unordered_map>

#include "bytecode/resume.h"
#include "core/py_ref.h"

namespace tl::capture {
namespace {

struct CodeNames {
  PyRef code;  // NOTE: held, so its address is never reused by another code object
  std::unordered_set<std::string> names;
};

std::unordered_map<PyCodeObject*, CodeNames>& registry() {
  static auto* r = new std::unordered_map<PyCodeObject*, CodeNames>();  // NOTE: never freed
  return *r;
}

// bytecode/resume.cpp names a resume function's stack parameters ___<n>_stack<k>.
bool is_stack_parameter(const std::string& name) {
  return name.rfind("___", 0) == 0 && name.find("_stack") != std::string::npos;
}

}  // namespace

void record_made_in_call(PyCodeObject* code, const std::string& name) {
  if (is_stack_parameter(name)) return;
  PyCodeObject* user = bytecode::user_code_of(code);
  CodeNames& c = registry()[user];
  if (!c.code) c.code = PyRef::borrow(reinterpret_cast<PyObject*>(user));
  c.names.insert(name);
}

std::unordered_set<std::string> made_in_call_names(PyCodeObject* code) {
  std::unordered_set<std::string> out;
  PyCodeObject* user = bytecode::user_code_of(code);
  if (user == code) return out;
  auto it = registry().find(user);
  if (it != registry().end()) out = it->second.names;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(code->co_localsplusnames); ++i) {
    const char* s = PyUnicode_AsUTF8(PyTuple_GET_ITEM(code->co_localsplusnames, i));
    if (!s) {
      PyErr_Clear();
      continue;
    }
    if (is_stack_parameter(s)) out.insert(s);
  }
  return out;
}

std::string root_local_name(const ir::SourcePtr& src) {
  const ir::Source* root = src.get();
  if (!root) return "";
  while (root->base) root = root->base.get();
  return root->kind == ir::SourceKind::Local ? root->name : "";
}

bool plain_c_instance(PyObject* obj) {
  PyTypeObject* t = Py_TYPE(obj);
  if (t->tp_flags & Py_TPFLAGS_HEAPTYPE) return false;
  // NOTE: numpy's scalars and arrays are values the trace computes with (float(np.float64),
  // a.sum() folded as constants): they keep the identity guard that makes folding sound.
  if (std::string_view(t->tp_name).rfind("numpy.", 0) == 0) return false;
  return !(PyFunction_Check(obj) || PyCFunction_Check(obj) || PyType_Check(obj) ||
           PyModule_Check(obj) || PyMethod_Check(obj) || PyCode_Check(obj) ||
           t == &PyMethodDescr_Type || t == &PyWrapperDescr_Type || t == &PyClassMethodDescr_Type ||
           t == &PyGetSetDescr_Type || t == &PyMemberDescr_Type ||
           t->tp_call == PyCFunction_Type.tp_call ||
           std::string(t->tp_name) == "functools.partial");
}

bool value_made_in_call(const ValuePtr& v, const std::unordered_set<std::string>& fresh) {
  if (!v || v->kind == VKind::Tensor) return false;
  // NOTE: only what wrap() would otherwise guard by identity is worth a record: a name that
  // once held a number made in the call must not loosen an object it holds at another break.
  if (v->kind != VKind::Object && v->kind != VKind::Module &&
      !(v->kind == VKind::Const && v->obj && plain_c_instance(v->obj.get())))
    return false;
  if (!v->source) return true;
  std::string name = root_local_name(v->source);
  return !name.empty() && fresh.count(name) > 0;
}

}  // namespace tl::capture
