#include "capture/opcode_tables.h"

#include <array>
#include <string>

#include "capture/bytecode.h"

namespace tl::capture {

namespace {

struct OpInfo {
  int opcode;
  const char* name;
  int caches;
  unsigned flags;
};

// NOTE: the tables of internal/pycore_opcode.h use array designators, which
// only compile as C, and csrc/capture has no C sources; so the table is
// written here from the `opcode` module of each version (opname, hasjrel,
// hasconst, hasname, haslocal, hasfree, hascompare, _inline_cache_entries).
// The numbers come from <opcode.h>; tests/cpp/capture/bytecode_test.cpp
// checks every entry against the running Python's `opcode` module.
#define OP(name, caches, flags) \
  { name, #name, caches, flags }
#if PY_VERSION_HEX >= 0x030D0000
#error "torchlite decodes bytecode of CPython 3.11 and 3.12 only"
#elif PY_VERSION_HEX >= 0x030C0000
constexpr OpInfo kOps[] = {
    OP(CACHE, 0, 0),
    OP(POP_TOP, 0, 0),
    OP(PUSH_NULL, 0, 0),
    OP(INTERPRETER_EXIT, 0, 0),
    OP(END_FOR, 0, 0),
    OP(END_SEND, 0, 0),
    OP(NOP, 0, 0),
    OP(UNARY_NEGATIVE, 0, 0),
    OP(UNARY_NOT, 0, 0),
    OP(UNARY_INVERT, 0, 0),
    OP(RESERVED, 0, 0),
    OP(BINARY_SUBSCR, 1, 0),
    OP(BINARY_SLICE, 0, 0),
    OP(STORE_SLICE, 0, 0),
    OP(GET_LEN, 0, 0),
    OP(MATCH_MAPPING, 0, 0),
    OP(MATCH_SEQUENCE, 0, 0),
    OP(MATCH_KEYS, 0, 0),
    OP(PUSH_EXC_INFO, 0, 0),
    OP(CHECK_EXC_MATCH, 0, 0),
    OP(CHECK_EG_MATCH, 0, 0),
    OP(WITH_EXCEPT_START, 0, 0),
    OP(GET_AITER, 0, 0),
    OP(GET_ANEXT, 0, 0),
    OP(BEFORE_ASYNC_WITH, 0, 0),
    OP(BEFORE_WITH, 0, 0),
    OP(END_ASYNC_FOR, 0, 0),
    OP(CLEANUP_THROW, 0, 0),
    OP(STORE_SUBSCR, 1, 0),
    OP(DELETE_SUBSCR, 0, 0),
    OP(GET_ITER, 0, 0),
    OP(GET_YIELD_FROM_ITER, 0, 0),
    OP(LOAD_BUILD_CLASS, 0, 0),
    OP(LOAD_ASSERTION_ERROR, 0, 0),
    OP(RETURN_GENERATOR, 0, 0),
    OP(RETURN_VALUE, 0, 0),
    OP(SETUP_ANNOTATIONS, 0, 0),
    OP(LOAD_LOCALS, 0, 0),
    OP(POP_EXCEPT, 0, 0),
    OP(STORE_NAME, 0, kName),
    OP(DELETE_NAME, 0, kName),
    OP(UNPACK_SEQUENCE, 1, 0),
    OP(FOR_ITER, 1, kJump),
    OP(UNPACK_EX, 0, 0),
    OP(STORE_ATTR, 4, kName),
    OP(DELETE_ATTR, 0, kName),
    OP(STORE_GLOBAL, 0, kName),
    OP(DELETE_GLOBAL, 0, kName),
    OP(SWAP, 0, 0),
    OP(LOAD_CONST, 0, kConst),
    OP(LOAD_NAME, 0, kName),
    OP(BUILD_TUPLE, 0, 0),
    OP(BUILD_LIST, 0, 0),
    OP(BUILD_SET, 0, 0),
    OP(BUILD_MAP, 0, 0),
    OP(LOAD_ATTR, 9, kName),
    OP(COMPARE_OP, 1, kCompare),
    OP(IMPORT_NAME, 0, kName),
    OP(IMPORT_FROM, 0, kName),
    OP(JUMP_FORWARD, 0, kJump),
    OP(POP_JUMP_IF_FALSE, 0, kJump),
    OP(POP_JUMP_IF_TRUE, 0, kJump),
    OP(LOAD_GLOBAL, 4, kName),
    OP(IS_OP, 0, 0),
    OP(CONTAINS_OP, 0, 0),
    OP(RERAISE, 0, 0),
    OP(COPY, 0, 0),
    OP(RETURN_CONST, 0, kConst),
    OP(BINARY_OP, 1, 0),
    OP(SEND, 1, kJump),
    OP(LOAD_FAST, 0, kLocal),
    OP(STORE_FAST, 0, kLocal),
    OP(DELETE_FAST, 0, kLocal),
    OP(LOAD_FAST_CHECK, 0, kLocal),
    OP(POP_JUMP_IF_NOT_NONE, 0, kJump),
    OP(POP_JUMP_IF_NONE, 0, kJump),
    OP(RAISE_VARARGS, 0, 0),
    OP(GET_AWAITABLE, 0, 0),
    OP(MAKE_FUNCTION, 0, 0),
    OP(BUILD_SLICE, 0, 0),
    OP(JUMP_BACKWARD_NO_INTERRUPT, 0, kJump | kBackward),
    OP(MAKE_CELL, 0, kFree),
    OP(LOAD_CLOSURE, 0, kFree),
    OP(LOAD_DEREF, 0, kFree),
    OP(STORE_DEREF, 0, kFree),
    OP(DELETE_DEREF, 0, kFree),
    OP(JUMP_BACKWARD, 0, kJump | kBackward),
    OP(LOAD_SUPER_ATTR, 1, kName),
    OP(CALL_FUNCTION_EX, 0, 0),
    OP(LOAD_FAST_AND_CLEAR, 0, kLocal),
    OP(EXTENDED_ARG, 0, 0),
    OP(LIST_APPEND, 0, 0),
    OP(SET_ADD, 0, 0),
    OP(MAP_ADD, 0, 0),
    OP(COPY_FREE_VARS, 0, 0),
    OP(YIELD_VALUE, 0, 0),
    OP(RESUME, 0, 0),
    OP(MATCH_CLASS, 0, 0),
    OP(FORMAT_VALUE, 0, 0),
    OP(BUILD_CONST_KEY_MAP, 0, 0),
    OP(BUILD_STRING, 0, 0),
    OP(LIST_EXTEND, 0, 0),
    OP(SET_UPDATE, 0, 0),
    OP(DICT_MERGE, 0, 0),
    OP(DICT_UPDATE, 0, 0),
    OP(CALL, 3, 0),
    OP(KW_NAMES, 0, kConst),
    OP(CALL_INTRINSIC_1, 0, 0),
    OP(CALL_INTRINSIC_2, 0, 0),
    OP(LOAD_FROM_DICT_OR_GLOBALS, 0, kName),
    OP(LOAD_FROM_DICT_OR_DEREF, 0, kFree),
    OP(INSTRUMENTED_LOAD_SUPER_ATTR, 0, 0),
    OP(INSTRUMENTED_POP_JUMP_IF_NONE, 0, 0),
    OP(INSTRUMENTED_POP_JUMP_IF_NOT_NONE, 0, 0),
    OP(INSTRUMENTED_RESUME, 0, 0),
    OP(INSTRUMENTED_CALL, 0, 0),
    OP(INSTRUMENTED_RETURN_VALUE, 0, 0),
    OP(INSTRUMENTED_YIELD_VALUE, 0, 0),
    OP(INSTRUMENTED_CALL_FUNCTION_EX, 0, 0),
    OP(INSTRUMENTED_JUMP_FORWARD, 0, 0),
    OP(INSTRUMENTED_JUMP_BACKWARD, 0, 0),
    OP(INSTRUMENTED_RETURN_CONST, 0, 0),
    OP(INSTRUMENTED_FOR_ITER, 0, 0),
    OP(INSTRUMENTED_POP_JUMP_IF_FALSE, 0, 0),
    OP(INSTRUMENTED_POP_JUMP_IF_TRUE, 0, 0),
    OP(INSTRUMENTED_END_FOR, 0, 0),
    OP(INSTRUMENTED_END_SEND, 0, 0),
    OP(INSTRUMENTED_INSTRUCTION, 0, 0),
    OP(INSTRUMENTED_LINE, 0, 0),
};
#elif PY_VERSION_HEX >= 0x030B0000
constexpr OpInfo kOps[] = {
    OP(CACHE, 0, 0),
    OP(POP_TOP, 0, 0),
    OP(PUSH_NULL, 0, 0),
    OP(NOP, 0, 0),
    OP(UNARY_POSITIVE, 0, 0),
    OP(UNARY_NEGATIVE, 0, 0),
    OP(UNARY_NOT, 0, 0),
    OP(UNARY_INVERT, 0, 0),
    OP(BINARY_SUBSCR, 4, 0),
    OP(GET_LEN, 0, 0),
    OP(MATCH_MAPPING, 0, 0),
    OP(MATCH_SEQUENCE, 0, 0),
    OP(MATCH_KEYS, 0, 0),
    OP(PUSH_EXC_INFO, 0, 0),
    OP(CHECK_EXC_MATCH, 0, 0),
    OP(CHECK_EG_MATCH, 0, 0),
    OP(WITH_EXCEPT_START, 0, 0),
    OP(GET_AITER, 0, 0),
    OP(GET_ANEXT, 0, 0),
    OP(BEFORE_ASYNC_WITH, 0, 0),
    OP(BEFORE_WITH, 0, 0),
    OP(END_ASYNC_FOR, 0, 0),
    OP(STORE_SUBSCR, 1, 0),
    OP(DELETE_SUBSCR, 0, 0),
    OP(GET_ITER, 0, 0),
    OP(GET_YIELD_FROM_ITER, 0, 0),
    OP(PRINT_EXPR, 0, 0),
    OP(LOAD_BUILD_CLASS, 0, 0),
    OP(LOAD_ASSERTION_ERROR, 0, 0),
    OP(RETURN_GENERATOR, 0, 0),
    OP(LIST_TO_TUPLE, 0, 0),
    OP(RETURN_VALUE, 0, 0),
    OP(IMPORT_STAR, 0, 0),
    OP(SETUP_ANNOTATIONS, 0, 0),
    OP(YIELD_VALUE, 0, 0),
    OP(ASYNC_GEN_WRAP, 0, 0),
    OP(PREP_RERAISE_STAR, 0, 0),
    OP(POP_EXCEPT, 0, 0),
    OP(STORE_NAME, 0, kName),
    OP(DELETE_NAME, 0, kName),
    OP(UNPACK_SEQUENCE, 1, 0),
    OP(FOR_ITER, 0, kJump),
    OP(UNPACK_EX, 0, 0),
    OP(STORE_ATTR, 4, kName),
    OP(DELETE_ATTR, 0, kName),
    OP(STORE_GLOBAL, 0, kName),
    OP(DELETE_GLOBAL, 0, kName),
    OP(SWAP, 0, 0),
    OP(LOAD_CONST, 0, kConst),
    OP(LOAD_NAME, 0, kName),
    OP(BUILD_TUPLE, 0, 0),
    OP(BUILD_LIST, 0, 0),
    OP(BUILD_SET, 0, 0),
    OP(BUILD_MAP, 0, 0),
    OP(LOAD_ATTR, 4, kName),
    OP(COMPARE_OP, 2, kCompare),
    OP(IMPORT_NAME, 0, kName),
    OP(IMPORT_FROM, 0, kName),
    OP(JUMP_FORWARD, 0, kJump),
    OP(JUMP_IF_FALSE_OR_POP, 0, kJump),
    OP(JUMP_IF_TRUE_OR_POP, 0, kJump),
    OP(POP_JUMP_FORWARD_IF_FALSE, 0, kJump),
    OP(POP_JUMP_FORWARD_IF_TRUE, 0, kJump),
    OP(LOAD_GLOBAL, 5, kName),
    OP(IS_OP, 0, 0),
    OP(CONTAINS_OP, 0, 0),
    OP(RERAISE, 0, 0),
    OP(COPY, 0, 0),
    OP(BINARY_OP, 1, 0),
    OP(SEND, 0, kJump),
    OP(LOAD_FAST, 0, kLocal),
    OP(STORE_FAST, 0, kLocal),
    OP(DELETE_FAST, 0, kLocal),
    OP(POP_JUMP_FORWARD_IF_NOT_NONE, 0, kJump),
    OP(POP_JUMP_FORWARD_IF_NONE, 0, kJump),
    OP(RAISE_VARARGS, 0, 0),
    OP(GET_AWAITABLE, 0, 0),
    OP(MAKE_FUNCTION, 0, 0),
    OP(BUILD_SLICE, 0, 0),
    OP(JUMP_BACKWARD_NO_INTERRUPT, 0, kJump | kBackward),
    OP(MAKE_CELL, 0, kFree),
    OP(LOAD_CLOSURE, 0, kFree),
    OP(LOAD_DEREF, 0, kFree),
    OP(STORE_DEREF, 0, kFree),
    OP(DELETE_DEREF, 0, kFree),
    OP(JUMP_BACKWARD, 0, kJump | kBackward),
    OP(CALL_FUNCTION_EX, 0, 0),
    OP(EXTENDED_ARG, 0, 0),
    OP(LIST_APPEND, 0, 0),
    OP(SET_ADD, 0, 0),
    OP(MAP_ADD, 0, 0),
    OP(LOAD_CLASSDEREF, 0, kFree),
    OP(COPY_FREE_VARS, 0, 0),
    OP(RESUME, 0, 0),
    OP(MATCH_CLASS, 0, 0),
    OP(FORMAT_VALUE, 0, 0),
    OP(BUILD_CONST_KEY_MAP, 0, 0),
    OP(BUILD_STRING, 0, 0),
    OP(LOAD_METHOD, 10, kName),
    OP(LIST_EXTEND, 0, 0),
    OP(SET_UPDATE, 0, 0),
    OP(DICT_MERGE, 0, 0),
    OP(DICT_UPDATE, 0, 0),
    OP(PRECALL, 1, 0),
    OP(CALL, 4, 0),
    OP(KW_NAMES, 0, kConst),
    OP(POP_JUMP_BACKWARD_IF_NOT_NONE, 0, kJump | kBackward),
    OP(POP_JUMP_BACKWARD_IF_NONE, 0, kJump | kBackward),
    OP(POP_JUMP_BACKWARD_IF_FALSE, 0, kJump | kBackward),
    OP(POP_JUMP_BACKWARD_IF_TRUE, 0, kJump | kBackward),
};
#else
#error "torchlite decodes bytecode of CPython 3.11 and 3.12 only"
#endif
#undef OP

// Indexed by opcode; name == nullptr for numbers this Python does not define.
struct Table {
  std::array<OpInfo, 256> ops{};
  std::array<std::string, 256> unknown_names;
  Table() {
    for (int i = 0; i < 256; ++i)
      unknown_names[i].append("<").append(std::to_string(i)).append(">");
    for (const OpInfo& op : kOps) ops[op.opcode] = op;
  }
};

const Table& table() {
  static const Table t;
  return t;
}

const OpInfo* info(int opcode) {
  if (opcode < 0 || opcode > 255) return nullptr;
  const OpInfo& op = table().ops[opcode];
  return op.name ? &op : nullptr;
}

}  // namespace

bool is_known_opcode(int opcode) { return info(opcode) != nullptr; }

int inline_cache_entries(int opcode) {
  const OpInfo* op = info(opcode);
  return op ? op->caches : 0;
}

unsigned opcode_flags(int opcode) {
  const OpInfo* op = info(opcode);
  return op ? op->flags : 0;
}

const char* opcode_name(int opcode) {
  if (const OpInfo* op = info(opcode)) return op->name;
  // Like dis.opname: "<N>" for numbers without a name.
  return opcode >= 0 && opcode < 256 ? table().unknown_names[opcode].c_str() : "<?>";
}

}  // namespace tl::capture
