#include "capture/resume_point.h"

#include <opcode.h>

#include <utility>
#include <vector>

namespace tl::capture {
namespace {

// [first, last] instruction ranges that the trace cannot resume inside.
std::vector<std::pair<int, int>> regions(const bytecode::Bytecode& bc) {
  std::vector<std::pair<int, int>> out;
  const int n = static_cast<int>(bc.insts.size());
  for (int i = 0; i < n; ++i) {
    int t = bc.insts[i].jump_target;
    if (t >= 0 && t <= i) out.emplace_back(t, i);  // a loop: its backward jump
    // A for loop whose body always leaves it has no backward jump.
    if (bc.insts[i].opcode == FOR_ITER && t > i) out.emplace_back(i, t - 1);
  }
  for (const auto& e : bc.exception_table) {
    int h = bc.index_at_offset(e.target);
    if (h < 0 || h + 1 >= n || bc.insts[h].opcode != PUSH_EXC_INFO) continue;
    if (bc.insts[h + 1].opcode == WITH_EXCEPT_START) continue;  // with-blocks are re-entered
    int first = bc.index_at_offset(e.start), last = -1;
    for (int i = 0; i < n; ++i)
      if (bc.insts[i].offset < e.end) last = i;
    if (first >= 0 && last >= first) out.emplace_back(first, last);
  }
  return out;
}

}  // namespace

BreakPoint break_point(const bytecode::Bytecode& bc, int index, std::string& why) {
  BreakPoint at{index, false};
  if (index < 0 || index >= static_cast<int>(bc.insts.size())) {
    why = "break outside the frame's instructions";
    return {-1, false};
  }
  auto ranges = regions(bc);
  for (bool moved = true; moved;) {
    moved = false;
    for (auto [first, last] : ranges) {
      if (first > at.index || at.index > last) continue;
      at.region = true;
      if (first < at.index) {
        at.index = first;
        moved = true;
      }
    }
  }
  if (at.region) return at;
#ifdef KW_NAMES
  if (bc.insts[at.index].opcode == CALL) {
    while (at.index > 0 && (bc.insts[at.index - 1].opcode == KW_NAMES
#ifdef PRECALL
                            || bc.insts[at.index - 1].opcode == PRECALL
#endif
                            ))
      --at.index;
  }
#endif
  return at;
}

}  // namespace tl::capture
