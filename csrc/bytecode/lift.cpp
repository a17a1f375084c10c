// Decoded bytecode back to assembler input, so that a resume function can be
// built by editing the original instruction list rather than its bytes.
#include <algorithm>

#include "bytecode/assembler.h"
#include "core/errors.h"

namespace tl::bytecode {

namespace {

// Index of the instruction whose code units (caches included) end at `end`.
int index_ending_at(const Bytecode& bc, int end) {
  auto it = std::lower_bound(bc.insts.begin(), bc.insts.end(), end,
                             [](const Instruction& in, int e) { return in.offset < e; });
  TL_CHECK(it != bc.insts.begin()) << "exception range ends at offset " << end;
  --it;
  TL_CHECK(it->next_offset == end)
      << "exception range ends at offset " << end << ", inside an instruction";
  return static_cast<int>(it - bc.insts.begin());
}

int index_at(const Bytecode& bc, int offset, const char* what) {
  int i = bc.index_at_offset(offset);
  TL_CHECK(i >= 0) << what << " at offset " << offset << " is not an instruction";
  return i;
}

PyRef checked(PyObject* p) {  // steals p
  if (!p) throw PythonError();
  return PyRef::steal(p);
}

}  // namespace

Assembly lift(const Bytecode& bc) {
  Assembly out;
  out.insts.reserve(bc.insts.size());
  for (size_t i = 0; i < bc.insts.size(); ++i) {
    const Instruction& in = bc.insts[i];
    Instr instr;
    instr.opcode = in.opcode;
    instr.arg = in.arg;
    // Every instruction is labelled by its original index: edits that insert
    // instructions can still name the original jump and handler targets.
    instr.label = static_cast<int>(i);
    instr.target = in.jump_target >= 0 ? in.jump_target : kNoLabel;
    instr.line = in.line >= 0 ? in.line : kNoLine;
    out.insts.push_back(instr);
  }
  for (const ExceptionTableEntry& e : bc.exception_table) {
    ExceptionBlock b;
    b.first = index_at(bc, e.start, "exception range start");
    b.last = index_ending_at(bc, e.end);
    b.handler = index_at(bc, e.target, "exception handler");
    b.depth = e.depth;
    b.lasti = e.lasti;
    out.blocks.push_back(b);
  }
  return out;
}

CodeSpec spec_of(PyCodeObject* code) {
  CodeSpec s;
  s.argcount = code->co_argcount;
  s.posonlyargcount = code->co_posonlyargcount;
  s.kwonlyargcount = code->co_kwonlyargcount;
  s.flags = code->co_flags;
  s.firstlineno = code->co_firstlineno;
  s.consts = PyRef::borrow(code->co_consts);
  s.names = PyRef::borrow(code->co_names);
  s.varnames = checked(PyCode_GetVarnames(code));
  s.freevars = checked(PyCode_GetFreevars(code));
  s.cellvars = checked(PyCode_GetCellvars(code));
  s.filename = PyRef::borrow(code->co_filename);
  s.name = PyRef::borrow(code->co_name);
  s.qualname = PyRef::borrow(code->co_qualname);
  return s;
}

}  // namespace tl::bytecode
