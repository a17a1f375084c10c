// Labels to indices, the four encoding steps, then CPython's own code-object
// constructor (which validates what it can and computes the fast-locals
// layout, arguments that are also cells included).
#include "bytecode/assembler.h"

#include <unordered_map>

#include "core/errors.h"

namespace tl::bytecode {

namespace {

class Labels {
 public:
  explicit Labels(const std::vector<Instr>& insts) {
    for (size_t i = 0; i < insts.size(); ++i) {
      int label = insts[i].label;
      if (label == kNoLabel) continue;
      bool fresh = index_.emplace(label, static_cast<int>(i)).second;
      TL_CHECK(fresh) << "label " << label << " is defined twice (instruction " << i << ")";
    }
  }
  int index(int label, const char* what) const {
    auto it = index_.find(label);
    TL_CHECK(it != index_.end()) << what << " names label " << label
                                 << ", which no instruction has";
    return it->second;
  }

 private:
  std::unordered_map<int, int> index_;
};

void check_tuple(const PyRef& t, const char* field) {
  TL_CHECK(t && PyTuple_Check(t.get())) << "CodeSpec." << field << " must be a tuple";
}

void check_str(const PyRef& s, const char* field) {
  TL_CHECK(s && PyUnicode_Check(s.get())) << "CodeSpec." << field << " must be a str";
}

void check_spec(const CodeSpec& spec) {
  check_tuple(spec.consts, "consts");
  check_tuple(spec.names, "names");
  check_tuple(spec.varnames, "varnames");
  check_tuple(spec.freevars, "freevars");
  check_tuple(spec.cellvars, "cellvars");
  check_str(spec.filename, "filename");
  check_str(spec.name, "name");
  check_str(spec.qualname, "qualname");
}

PyRef bytes_of(const std::string& s) {
  PyRef b = PyRef::steal(PyBytes_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size())));
  if (!b) throw PythonError();
  return b;
}

// Returns a new reference; all object arguments are borrowed.
PyRef new_code(const CodeSpec& spec, int stacksize, PyObject* code, PyObject* linetable,
               PyObject* exceptiontable) {
  const int nlocals = static_cast<int>(PyTuple_GET_SIZE(spec.varnames.get()));
#if PY_VERSION_HEX >= 0x030C0000
  auto* make = &PyUnstable_Code_NewWithPosOnlyArgs;
#else
  auto* make = &PyCode_NewWithPosOnlyArgs;
#endif
  PyCodeObject* co =
      make(spec.argcount, spec.posonlyargcount, spec.kwonlyargcount, nlocals, stacksize, spec.flags,
           code, spec.consts.get(), spec.names.get(), spec.varnames.get(), spec.freevars.get(),
           spec.cellvars.get(), spec.filename.get(), spec.name.get(), spec.qualname.get(),
           spec.firstlineno, linetable, exceptiontable);
  if (!co) throw PythonError();
  return PyRef::steal(reinterpret_cast<PyObject*>(co));
}

}  // namespace

PyRef assemble(const Assembly& assembly, const CodeSpec& spec) {
  check_spec(spec);
  const std::vector<Instr>& insts = assembly.insts;
  TL_CHECK(!insts.empty()) << "cannot assemble a code object without instructions";
  Labels labels(insts);
  std::vector<int> targets(insts.size(), -1);
  for (size_t i = 0; i < insts.size(); ++i)
    if (insts[i].target != kNoLabel) targets[i] = labels.index(insts[i].target, "a jump");
  std::vector<IndexBlock> blocks;
  for (const ExceptionBlock& b : assembly.blocks) {
    blocks.push_back({labels.index(b.first, "an exception block's first"),
                      labels.index(b.last, "an exception block's last"),
                      labels.index(b.handler, "an exception handler"), b.depth, b.lasti});
  }
  Layout lay = layout(insts, targets);
  int stacksize = stack_depth(insts, targets, blocks, lay);
  PyRef code = bytes_of(lay.code);
  PyRef linetable = bytes_of(encode_line_table(insts, lay, spec.firstlineno));
  PyRef exceptiontable = bytes_of(encode_exception_table(blocks, lay));
  return new_code(spec, stacksize, code.get(), linetable.get(), exceptiontable.get());
}

}  // namespace tl::bytecode
