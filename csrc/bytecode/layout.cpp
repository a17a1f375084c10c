// Code-unit layout: EXTENDED_ARG prefixes, the opcode, then its CACHE units.
// Jump arguments depend on offsets, which depend on how many prefixes each
// argument needs, so the layout is repeated until the offsets stop changing.
#include <algorithm>
#include <cstdint>

#include "bytecode/assembler.h"
#include "bytecode/opcode_tables.h"
#include "core/errors.h"

namespace tl::bytecode {

namespace {

bool is_jump(int opcode) { return opcode_flags(opcode) & kJump; }
bool is_backward(int opcode) { return opcode_flags(opcode) & kBackward; }

void check_instruction(const std::vector<Instr>& insts, const std::vector<int>& targets, size_t i) {
  const Instr& in = insts[i];
  TL_CHECK(is_known_opcode(in.opcode) && in.opcode != EXTENDED_ARG && in.opcode != CACHE)
      << "instruction " << i << ": opcode " << in.opcode << " cannot be assembled";
  TL_CHECK(has_arg(in.opcode) || in.arg == 0)
      << "instruction " << i << ": " << opcode_name(in.opcode) << " takes no argument but has "
      << in.arg;
  if (!is_jump(in.opcode)) {
    TL_CHECK(targets[i] < 0) << "instruction " << i << ": " << opcode_name(in.opcode)
                             << " is not a jump but has a target";
    return;
  }
  TL_CHECK(targets[i] >= 0) << "instruction " << i << ": jump " << opcode_name(in.opcode)
                            << " has no target";
  // NOTE: 3.11/3.12 jumps are relative and each opcode encodes one direction
  // (3.12's POP_JUMP_IF_* have no backward form), so the caller must pick it.
  bool backward_target = targets[i] <= static_cast<int>(i);
  TL_CHECK(backward_target == is_backward(in.opcode))
      << "instruction " << i << ": " << opcode_name(in.opcode) << " cannot jump "
      << (backward_target ? "backward" : "forward") << " to instruction " << targets[i];
}

// Recomputes offsets and units from the prefix counts.
void place(const std::vector<Instr>& insts, const std::vector<int>& prefixes, Layout& out) {
  int offset = 0;
  for (size_t i = 0; i < insts.size(); ++i) {
    out.offsets[i] = offset;
    out.units[i] = prefixes[i] + 1 + inline_cache_entries(insts[i].opcode);
    offset += 2 * out.units[i];
  }
}

// Sets jump arguments from the current offsets; true if a jump now needs more
// prefixes than it has.
bool resolve_jumps(const std::vector<Instr>& insts, const std::vector<int>& targets,
                   std::vector<int>& prefixes, Layout& out) {
  bool grew = false;
  for (size_t i = 0; i < insts.size(); ++i) {
    if (targets[i] < 0) continue;
    int next = out.offsets[i] + 2 * out.units[i];  // jumps count from after the caches
    int target = out.offsets[targets[i]];          // and land on the first prefix
    out.args[i] = (is_backward(insts[i].opcode) ? next - target : target - next) / 2;
    // NOTE: growth only lengthens jumps (a target's own prefixes sit before its
    // offset), so counts never shrink and this stops at the least fixed point,
    // the same one CPython's assembler reaches.
    int need = std::max(prefixes[i], extended_arg_count(out.args[i]));
    grew |= need != prefixes[i];
    prefixes[i] = need;
  }
  return grew;
}

void write(const std::vector<Instr>& insts, const std::vector<int>& prefixes, Layout& out) {
  for (size_t i = 0; i < insts.size(); ++i) {
    auto arg = static_cast<uint32_t>(out.args[i]);
    for (int k = prefixes[i]; k > 0; --k) {
      out.code.push_back(static_cast<char>(EXTENDED_ARG));
      out.code.push_back(static_cast<char>((arg >> (8 * k)) & 0xFF));
    }
    out.code.push_back(static_cast<char>(insts[i].opcode));
    out.code.push_back(static_cast<char>(arg & 0xFF));
    // CACHE units are zero, as PyCode_GetCode (co_code) shows them.
    out.code.append(2 * inline_cache_entries(insts[i].opcode), '\0');
  }
}

}  // namespace

int extended_arg_count(int arg) {
  auto a = static_cast<uint32_t>(arg);
  return a > 0xFFFFFF ? 3 : a > 0xFFFF ? 2 : a > 0xFF ? 1 : 0;
}

Layout layout(const std::vector<Instr>& insts, const std::vector<int>& targets) {
  TL_CHECK(targets.size() == insts.size());
  const size_t n = insts.size();
  for (size_t i = 0; i < n; ++i) check_instruction(insts, targets, i);
  Layout out;
  out.args.resize(n);
  out.offsets.resize(n);
  out.units.resize(n);
  std::vector<int> prefixes(n, 0);
  for (size_t i = 0; i < n; ++i) {
    out.args[i] = targets[i] >= 0 ? 0 : insts[i].arg;
    prefixes[i] = extended_arg_count(out.args[i]);
  }
  // Each round adds at least one prefix and a jump needs at most 3, so this
  // ends within 3n + 1 rounds; in practice within two or three.
  do {
    place(insts, prefixes, out);
  } while (resolve_jumps(insts, targets, prefixes, out));
  write(insts, prefixes, out);
  return out;
}

}  // namespace tl::bytecode
