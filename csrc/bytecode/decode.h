#pragma once
// Decoded CPython 3.11/3.12 bytecode of one code object: instructions with
// resolved arguments, jump targets and line numbers, CACHE entries skipped.
#include <Python.h>

#include <string>
#include <vector>

namespace tl::bytecode {

struct Instruction {
  int opcode = 0;  // base opcode as in <opcode.h> of the building Python
  int arg = 0;     // full argument, EXTENDED_ARG folded in
  // Byte offset in co_code of the instruction's first EXTENDED_ARG prefix (of
  // the opcode itself when it has none): that is where CPython's jumps and
  // exception handlers land, so jump targets resolve by exact offset.
  int offset = 0;
  int next_offset = 0;   // byte offset of the next instruction (after caches)
  int jump_target = -1;  // index into Bytecode::insts of the jump target, or -1
  int line = -1;         // source line (or -1 if none)
  bool starts_line = false;
  std::string opname;  // "LOAD_FAST"
};

struct ExceptionTableEntry {
  int start = 0, end = 0;  // byte offsets [start, end)
  int target = 0;          // byte offset of the handler
  int depth = 0;
  bool lasti = false;
};

struct Bytecode {
  std::vector<Instruction> insts;
  std::vector<ExceptionTableEntry> exception_table;
  // Index of the instruction at a byte offset, or -1.
  int index_at_offset(int offset) const;
};

// Decodes a code object (borrowed). Throws tl::Error on malformed input.
Bytecode decode(PyCodeObject* code);
// Human-readable listing (like dis.dis) for trace dumps.
std::string disassemble(const Bytecode& bc, PyCodeObject* code);
// The name of an opcode of the running Python version.
const char* opcode_name(int opcode);

}  // namespace tl::bytecode
