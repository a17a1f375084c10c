#pragma once
// Per-opcode facts of the building CPython (3.11, 3.12 or 3.13): inline CACHE
// units, whether the oparg is a jump, a constant, a name, a local or a cell.
// The decoder, the disassembler and the bytecode assembler read them here so
// that only one table has to follow CPython.
#include <Python.h>
#include <opcode.h>

namespace tl::bytecode {

enum OpFlag : unsigned {
  kJump = 1u << 0,       // relative jump (3.11 to 3.13 have no absolute jumps)
  kBackward = 1u << 1,   // the jump goes backward: target = next_offset - 2 * arg
  kConst = 1u << 2,      // arg indexes co_consts
  kName = 1u << 3,       // arg (maybe shifted) indexes co_names
  kLocal = 1u << 4,      // arg indexes the fast locals
  kFree = 1u << 5,       // arg indexes the fast locals (cell or free variable)
  kCompare = 1u << 6,    // arg encodes a comparison operator
  kLocalPair = 1u << 7,  // 3.13 superinstructions: arg = first local << 4 | second local
};

// False for numbers that are not base opcodes of this Python (specialized
// forms, for instance, which PyCode_GetCode never yields).
bool is_known_opcode(int opcode);
// Number of 2-byte CACHE units that follow the opcode; 0 for unknown opcodes.
int inline_cache_entries(int opcode);
// OpFlag bits of the opcode; 0 for unknown opcodes.
unsigned opcode_flags(int opcode);
inline bool has_arg(int opcode) { return opcode >= HAVE_ARGUMENT; }

}  // namespace tl::bytecode
