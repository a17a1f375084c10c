#include "bytecode/decode.h"

#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <sstream>

#include "bytecode/opcode_tables.h"
#include "core/errors.h"
#include "core/py_ref.h"
#include "ir/graph.h"

namespace tl::bytecode {

namespace {

// One (start, end, line) range of code.co_lines(); line is -1 for None.
struct LineRange {
  int start, end, line;
};

std::string code_name(PyCodeObject* code) {
  const char* s = PyUnicode_AsUTF8(code->co_qualname);
  if (!s) clear_expected_error();
  return s ? s : "<code>";
}

// Splits co_code into instructions: EXTENDED_ARG prefixes are folded into the
// instruction they extend (as dis._unpack_opargs does), CACHE units skipped.
std::vector<Instruction> split(PyCodeObject* code) {
  PyRef bytes = PyRef::steal(PyCode_GetCode(code));  // de-specialized copy
  if (!bytes) throw PythonError();
  auto* p = reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(bytes.get()));
  const int n = static_cast<int>(PyBytes_GET_SIZE(bytes.get()));
  TL_CHECK(n % 2 == 0) << "odd co_code length " << n << " in " << code_name(code);
  std::vector<Instruction> insts;
  insts.reserve(n / 2);
  for (int i = 0; i < n;) {
    Instruction inst;
    inst.offset = i;
    uint32_t ext = 0;
    for (; i < n && p[i] == EXTENDED_ARG; i += 2) ext = (ext | p[i + 1]) << 8;
    TL_CHECK(i < n) << "EXTENDED_ARG at the end of " << code_name(code);
    inst.opcode = p[i];
    TL_CHECK(is_known_opcode(inst.opcode))
        << "unknown opcode " << inst.opcode << " at offset " << i << " in " << code_name(code);
    // NOTE: like CPython's oparg, a C int; dis does the same wrap-around.
    inst.arg = has_arg(inst.opcode) ? static_cast<int>(ext | p[i + 1]) : 0;
    inst.next_offset = i + 2 + 2 * inline_cache_entries(inst.opcode);
    TL_CHECK(inst.next_offset <= n)
        << "truncated caches at offset " << i << " in " << code_name(code);
    inst.opname = opcode_name(inst.opcode);
    i = inst.next_offset;
    insts.push_back(std::move(inst));
  }
  return insts;
}

// Offset of the opcode itself, after the EXTENDED_ARG prefixes.
int opcode_offset(const Instruction& inst) {
  return inst.next_offset - 2 - 2 * inline_cache_entries(inst.opcode);
}

// Jump arguments count code units from the instruction after the caches.
void resolve_jumps(Bytecode& bc, PyCodeObject* code) {
  for (Instruction& inst : bc.insts) {
    unsigned flags = opcode_flags(inst.opcode);
    if (!(flags & kJump)) continue;
    int target = inst.next_offset + (flags & kBackward ? -2 : 2) * inst.arg;
    inst.jump_target = bc.index_at_offset(target);
    TL_CHECK(inst.jump_target >= 0)
        << inst.opname << " at offset " << inst.offset << " jumps to " << target
        << ", which is no instruction, in " << code_name(code);
  }
}

std::vector<LineRange> line_ranges(PyCodeObject* code) {
  PyRef it =
      PyRef::steal(PyObject_CallMethod(reinterpret_cast<PyObject*>(code), "co_lines", nullptr));
  if (!it) throw PythonError();
  PyRef iter = PyRef::steal(PyObject_GetIter(it.get()));
  if (!iter) throw PythonError();
  std::vector<LineRange> out;
  while (PyRef item = PyRef::steal(PyIter_Next(iter.get()))) {
    int start = 0, end = 0;
    PyObject* line = nullptr;  // borrowed from item
    if (!PyArg_ParseTuple(item.get(), "iiO", &start, &end, &line)) throw PythonError();
    int l = line == Py_None ? -1 : static_cast<int>(PyLong_AsLong(line));
    throw_if_python_error();
    out.push_back({start, end, l});
  }
  throw_if_python_error();
  return out;
}

// Line of each instruction (that of its first code unit), and whether a new
// line starts there the way dis.findlinestarts counts it: the first range whose
// line differs from the last line seen, ranges without a line ignored.
void assign_lines(Bytecode& bc, PyCodeObject* code) {
  std::vector<LineRange> ranges = line_ranges(code);
  std::vector<int> starts;
  int last = -1;
  for (const LineRange& r : ranges) {
    if (r.line >= 0 && r.line != last) starts.push_back(r.start);
    if (r.line >= 0) last = r.line;
  }
  size_t r = 0, s = 0;
  for (Instruction& inst : bc.insts) {
    while (r < ranges.size() && ranges[r].end <= inst.offset) ++r;
    if (r < ranges.size() && ranges[r].start <= inst.offset) inst.line = ranges[r].line;
    int last_prefix = opcode_offset(inst);
    while (s < starts.size() && starts[s] < inst.offset) ++s;
    inst.starts_line = s < starts.size() && starts[s] <= last_prefix;
  }
}

// co_exceptiontable: entries of 4 varints (start, length, target, depth<<1 |
// lasti) in code units; 6-bit groups, most significant first, 0x40 = more.
std::vector<ExceptionTableEntry> parse_exception_table(PyCodeObject* code) {
  PyObject* table = code->co_exceptiontable;  // borrowed
  TL_CHECK(PyBytes_Check(table)) << "co_exceptiontable is not bytes in " << code_name(code);
  auto* p = reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(table));
  const size_t n = static_cast<size_t>(PyBytes_GET_SIZE(table));
  size_t i = 0;
  auto varint = [&] {
    TL_CHECK(i < n) << "truncated exception table in " << code_name(code);
    uint8_t b = p[i++];
    int v = b & 63;
    while (b & 64) {
      TL_CHECK(i < n) << "truncated exception table in " << code_name(code);
      b = p[i++];
      v = (v << 6) | (b & 63);
    }
    return v;
  };
  std::vector<ExceptionTableEntry> out;
  while (i < n) {
    ExceptionTableEntry e;
    e.start = varint() * 2;
    e.end = e.start + varint() * 2;
    e.target = varint() * 2;
    int dl = varint();
    e.depth = dl >> 1;
    e.lasti = dl & 1;
    out.push_back(e);
  }
  return out;
}

const char* const kCompareOps[] = {"<", "<=", "==", "!=", ">", ">="};
// dis._nb_ops: the BINARY_OP arguments, in-place forms after the plain ones.
const char* const kBinaryOps[] = {
    "+",  "&",  "//",  "<<",  "@",  "*",  "%",  "|",  "**",  ">>",  "-",  "/",  "^",
    "+=", "&=", "//=", "<<=", "@=", "*=", "%=", "|=", "**=", ">>=", "-=", "/=", "^="};

std::string tuple_str(PyObject* tuple, int i) {  // borrows tuple
  if (!tuple || !PyTuple_Check(tuple) || i < 0 || i >= PyTuple_GET_SIZE(tuple)) return "?";
  PyObject* item = PyTuple_GET_ITEM(tuple, i);  // borrowed
  if (!PyUnicode_Check(item)) return ir::const_repr(item);
  const char* s = PyUnicode_AsUTF8(item);
  if (!s) clear_expected_error();
  return s ? s : "?";
}

std::string name_repr(const Instruction& inst, PyCodeObject* code) {
  int arg = inst.arg, shift = 0;
  const char* prefix = "";
  if (inst.opcode == LOAD_GLOBAL) shift = 1, prefix = "NULL + ";
#if PY_VERSION_HEX >= 0x030C0000
  if (inst.opcode == LOAD_ATTR) shift = 1, prefix = "NULL|self + ";
  if (inst.opcode == LOAD_SUPER_ATTR) shift = 2, prefix = "NULL|self + ";
#endif
  std::string name = tuple_str(code->co_names, arg >> shift);
  return (shift && (arg & 1) ? prefix : "") + name;
}

// The part in parentheses of a dis line: the resolved argument.
std::string arg_repr(const Bytecode& bc, const Instruction& inst, PyCodeObject* code) {
  unsigned flags = opcode_flags(inst.opcode);
  if (flags & kJump) return "to " + std::to_string(bc.insts[inst.jump_target].offset);
  if (flags & kConst) {
    PyObject* consts = code->co_consts;  // borrowed
    if (inst.arg >= PyTuple_GET_SIZE(consts)) return "?";
    return ir::const_repr(PyTuple_GET_ITEM(consts, inst.arg));
  }
  if (flags & kName) return name_repr(inst, code);
  if (flags & (kLocal | kFree)) return tuple_str(code->co_localsplusnames, inst.arg);
  if (flags & kCompare) {
#if PY_VERSION_HEX >= 0x030C0000
    int op = inst.arg >> 4;  // the low bits hold a specialization mask
#else
    int op = inst.arg;
#endif
    return op >= 0 && op < 6 ? kCompareOps[op] : "?";
  }
  if (inst.opcode == BINARY_OP) {
    return inst.arg >= 0 && inst.arg < 26 ? kBinaryOps[inst.arg] : "?";
  }
  return "";
}

}  // namespace

int Bytecode::index_at_offset(int offset) const {
  auto it = std::upper_bound(insts.begin(), insts.end(), offset,
                             [](int off, const Instruction& inst) { return off < inst.offset; });
  if (it == insts.begin()) return -1;
  --it;
  // Exact, or inside the EXTENDED_ARG prefixes of that instruction.
  if (offset % 2 != 0 || offset > opcode_offset(*it)) return -1;
  return static_cast<int>(it - insts.begin());
}

Bytecode decode(PyCodeObject* code) {
  TL_CHECK(code != nullptr && PyCode_Check(reinterpret_cast<PyObject*>(code)));
  Bytecode bc;
  bc.insts = split(code);
  resolve_jumps(bc, code);
  assign_lines(bc, code);
  bc.exception_table = parse_exception_table(code);
  return bc;
}

std::string disassemble(const Bytecode& bc, PyCodeObject* code) {
  std::vector<bool> is_target(bc.insts.size(), false);
  for (const Instruction& inst : bc.insts)
    if (inst.jump_target >= 0) is_target[inst.jump_target] = true;
  for (const ExceptionTableEntry& e : bc.exception_table) {
    int i = bc.index_at_offset(e.target);
    if (i >= 0) is_target[i] = true;
  }
  std::ostringstream os;
  for (size_t i = 0; i < bc.insts.size(); ++i) {
    const Instruction& inst = bc.insts[i];
    if (inst.starts_line && i > 0) os << "\n";
    if (inst.starts_line) {
      os << std::setw(4) << inst.line;
    } else {
      os << "    ";
    }
    os << (is_target[i] ? " >> " : "    ") << std::setw(5) << inst.offset << " ";
    std::string repr = arg_repr(bc, inst, code);
    if (!has_arg(inst.opcode)) {
      os << inst.opname << "\n";
      continue;
    }
    os << std::left << std::setw(26) << inst.opname << std::right << std::setw(5) << inst.arg;
    if (!repr.empty()) os << " (" << repr << ")";
    os << "\n";
  }
  if (!bc.exception_table.empty()) {
    os << "ExceptionTable:\n";
    for (const ExceptionTableEntry& e : bc.exception_table) {
      os << "  " << e.start << " to " << e.end - 2 << " -> " << e.target << " [" << e.depth << "]"
         << (e.lasti ? " lasti" : "") << "\n";
    }
  }
  return os.str();
}

}  // namespace tl::bytecode
