// co_stacksize by a walk over every path, as CPython's compiler does it.
// CPython never checks co_stacksize at run time, so a value too small
// corrupts memory silently (pytorch PR #99934): it has to be exact, handlers
// included.
#include <algorithm>
#include <climits>
#include <deque>

#include "bytecode/assembler.h"
#include "bytecode/opcode_tables.h"
#include "core/errors.h"

namespace tl::bytecode {

namespace {

int effect(const Instr& in, int arg, bool jump) {
  // NOTE: CPython says 0, because its compiler sizes the stack before it adds
  // the generator prologue; but the value sent on the first resumption really
  // sits on the stack until the POP_TOP after it, so count it.
  if (in.opcode == RETURN_GENERATOR) return 1;
  int e = PyCompile_OpcodeStackEffectWithJump(in.opcode, arg, jump ? 1 : 0);
  TL_CHECK(e != PY_INVALID_STACK_EFFECT)
      << "no stack effect for " << opcode_name(in.opcode) << " " << arg;
  return e;
}

class Walk {
 public:
  explicit Walk(size_t n) : depth_(n, -1) {}

  // Records that execution reaches instruction i with `depth` values.
  void reach(int i, int depth, int from) {
    TL_CHECK(i >= 0 && i < static_cast<int>(depth_.size()))
        << "execution runs past the last instruction after instruction " << from;
    TL_CHECK(depth >= 0) << "stack underflow reaching instruction " << i << " from " << from;
    max_ = std::max(max_, depth);
    if (depth_[i] < 0) {
      depth_[i] = depth;
      work_.push_back(i);
      return;
    }
    TL_CHECK(depth_[i] == depth) << "instruction " << i << " is reached with stack depths "
                                 << depth_[i] << " and " << depth << " (from " << from << ")";
  }
  bool next(int& i) {
    if (work_.empty()) return false;
    i = work_.front();
    work_.pop_front();
    return true;
  }
  int depth(int i) const { return depth_[i]; }
  int max() const { return max_; }

 private:
  std::vector<int> depth_;
  std::deque<int> work_;
  int max_ = 0;
};

}  // namespace

int stack_depth(const std::vector<Instr>& insts, const std::vector<int>& targets,
                const std::vector<IndexBlock>& blocks, const Layout& layout) {
  if (insts.empty()) return 0;
  std::vector<int> cover = innermost_blocks(blocks, insts.size());
  Walk walk(insts.size());
  walk.reach(0, 0, -1);
  for (int i = 0; walk.next(i);) {
    const Instr& in = insts[i];
    const int d = walk.depth(i);
    if (cover[i] >= 0) {
      // Unwinding keeps `depth` values, then pushes lasti (if asked) and the
      // exception.
      const IndexBlock& b = blocks[cover[i]];
      walk.reach(b.handler, b.depth + (b.lasti ? 1 : 0) + 1, i);
    }
    if (targets[i] >= 0) walk.reach(targets[i], d + effect(in, layout.args[i], true), i);
    if (!ends_flow(in.opcode)) walk.reach(i + 1, d + effect(in, layout.args[i], false), i);
  }
  return walk.max();
}

}  // namespace tl::bytecode
