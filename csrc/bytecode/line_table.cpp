// co_linetable in the PEP 626 locations format (InternalDocs/locations.md):
// each entry starts with 1|code(4)|length-1(3) and covers at most 8 code
// units, prefixes and CACHE units included. Only two of the forms are needed
// for line numbers without columns: 13 (a signed line delta) and 15 (no
// location, which leaves the running line unchanged).
#include <algorithm>
#include <cstdint>

#include "bytecode/assembler.h"
#include "core/errors.h"

namespace tl::bytecode {

namespace {

constexpr int kNoColumns = 13;
constexpr int kNoLocation = 15;
constexpr int kMaxUnits = 8;

// 6-bit groups, least significant first, 0x40 = more follows.
void write_varint(std::string& out, uint32_t v) {
  while (v >= 64) {
    out.push_back(static_cast<char>((v & 63) | 64));
    v >>= 6;
  }
  out.push_back(static_cast<char>(v));
}

void write_svarint(std::string& out, int v) {
  write_varint(out, v < 0 ? (static_cast<uint32_t>(-v) << 1) | 1 : static_cast<uint32_t>(v) << 1);
}

void write_first_byte(std::string& out, int code, int units) {
  out.push_back(static_cast<char>(0x80 | (code << 3) | (units - 1)));
}

// Emits `units` code units at `line`, split into entries of at most 8 units.
void write_run(std::string& out, int line, int units, int& prev_line) {
  while (units > 0) {
    int len = std::min(units, kMaxUnits);
    if (line == kNoLine) {
      write_first_byte(out, kNoLocation, len);
    } else {
      write_first_byte(out, kNoColumns, len);
      write_svarint(out, line - prev_line);
      prev_line = line;
    }
    units -= len;
  }
}

}  // namespace

std::string encode_line_table(const std::vector<Instr>& insts, const Layout& layout,
                              int firstlineno) {
  std::string out;
  int prev_line = firstlineno;  // deltas start from co_firstlineno
  size_t i = 0;
  while (i < insts.size()) {
    // Neighbours on one line share entries, which keeps the table short.
    int line = insts[i].line < 0 ? kNoLine : insts[i].line;
    int units = 0;
    for (; i < insts.size() && (insts[i].line < 0 ? kNoLine : insts[i].line) == line; ++i)
      units += layout.units[i];
    write_run(out, line, units, prev_line);
  }
  return out;
}

}  // namespace tl::bytecode
