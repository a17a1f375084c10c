#pragma once
// Bytecode assembler for CPython 3.11/3.12: turns a list of instructions whose
// jumps and exception handlers point at labels (not offsets) into a real code
// object. Graph breaks use it to build resume functions from the original code.
//
// Steps, one file each: layout.cpp (code units, CACHE units, jump arguments,
// EXTENDED_ARG to a fixed point), exception_table.cpp, line_table.cpp,
// stack_depth.cpp, assembler.cpp (labels, code object), lift.cpp (decoded
// bytecode back to assembler input).
#include <Python.h>
#include <opcode.h>

#include <string>
#include <vector>

#include "bytecode/decode.h"
#include "core/py_ref.h"

namespace tl::bytecode {

constexpr int kNoLabel = -1;
constexpr int kNoLine = -1;

// One instruction, without EXTENDED_ARG prefixes or CACHE units (the
// assembler writes both). Jumps name their target by label, so inserting or
// removing instructions never invalidates them.
struct Instr {
  int opcode = 0;         // base opcode from <opcode.h>; never EXTENDED_ARG or CACHE
  int arg = 0;            // the full argument; ignored (recomputed) for jumps
  int label = kNoLabel;   // this instruction's label, if anything refers to it
  int target = kNoLabel;  // label of the jump target: required for jumps, else none
  int line = kNoLine;     // source line, or kNoLine for "no location"
};

// A protected range of instructions, by label, inclusive at both ends. Blocks
// may nest (the innermost covering block wins, as in CPython's block stack)
// but must not partially overlap.
struct ExceptionBlock {
  int first = kNoLabel, last = kNoLabel;
  int handler = kNoLabel;  // label of the handler's first instruction
  int depth = 0;           // stack depth kept below the pushed exception
  bool lasti = false;      // the handler also receives the raising offset
};

struct Assembly {
  std::vector<Instr> insts;
  std::vector<ExceptionBlock> blocks;
};

// Everything of a code object that is not derived from the instructions.
struct CodeSpec {
  int argcount = 0, posonlyargcount = 0, kwonlyargcount = 0;
  int flags = 0;
  int firstlineno = 1;
  PyRef consts, names, varnames, freevars, cellvars;  // tuples (of str, but consts)
  PyRef filename, name, qualname;                     // str
};

// ---- the steps; instruction references below are indices, labels resolved ----

// Exception block with instruction indices instead of labels.
struct IndexBlock {
  int first = 0, last = 0, handler = 0, depth = 0;
  bool lasti = false;
};

struct Layout {
  std::string code;          // co_code: prefixes, opcodes, zeroed CACHE units
  std::vector<int> args;     // final argument of each instruction (jumps resolved)
  std::vector<int> offsets;  // byte offset of each instruction's first prefix
  std::vector<int> units;    // code units of each instruction: prefixes + 1 + caches
};

// Lays out code units; `targets[i]` is the index jumped to by instruction i or
// -1. Throws tl::Error (internal) on a jump whose direction its opcode cannot
// encode, or on a non-jump given a target.
Layout layout(const std::vector<Instr>& insts, const std::vector<int>& targets);
// Number of EXTENDED_ARG prefixes an argument needs.
int extended_arg_count(int arg);

// co_exceptiontable from nested or flat blocks: flattened, sorted, merged.
std::string encode_exception_table(const std::vector<IndexBlock>& blocks, const Layout& layout);
// The handler covering each instruction (index into blocks), or -1: the
// innermost block. Throws on partially overlapping blocks.
std::vector<int> innermost_blocks(const std::vector<IndexBlock>& blocks, size_t n_insts);

// co_linetable (PEP 626 locations table) with line numbers only.
std::string encode_line_table(const std::vector<Instr>& insts, const Layout& layout,
                              int firstlineno);

// Exact co_stacksize: the deepest stack over every path from the entry,
// exception handlers included. Throws if two paths reach an instruction with
// different depths or the stack underflows.
int stack_depth(const std::vector<Instr>& insts, const std::vector<int>& targets,
                const std::vector<IndexBlock>& blocks, const Layout& layout);

// ---- entry points ----

// Builds the code object; returns a new reference. Throws tl::Error on
// unknown labels or malformed input, PythonError if CPython rejects the code.
PyRef assemble(const Assembly& assembly, const CodeSpec& spec);

// Decoded bytecode back to assembler input: labels are the instruction
// indices, blocks come from the exception table.
Assembly lift(const Bytecode& bc);
// The non-instruction part of an existing code object (borrowed).
CodeSpec spec_of(PyCodeObject* code);

// Instructions after which execution never goes on with the next one.
inline bool ends_flow(int opcode) {
  switch (opcode) {
    case RETURN_VALUE:
    case RAISE_VARARGS:
    case RERAISE:
    case JUMP_FORWARD:
    case JUMP_BACKWARD:
    case JUMP_BACKWARD_NO_INTERRUPT:
#ifdef RETURN_CONST
    case RETURN_CONST:
#endif
      return true;
    default:
      return false;
  }
}

}  // namespace tl::bytecode
