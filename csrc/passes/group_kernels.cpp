#include "passes/group_kernels.h"

#include <algorithm>
#include <unordered_set>
#include <vector>

namespace tl::passes {
namespace {

using NodeSet = std::unordered_set<const ir::Node*>;

// Pointwise, over plain loads: no index math (a CPU kernel keeps sizes its index math
// divides by in the code), no reductions.
bool groupable(const ir::Kernel& k) {
  if (k.reduction_axes != 0 || k.outputs.empty()) return false;
  return std::none_of(k.exprs.begin(), k.exprs.end(), [](const ir::Expr& e) {
    return e.op == ir::ExprOp::Gather || e.op == ir::ExprOp::Index ||
           e.op == ir::ExprOp::CheckIndex;
  });
}

bool same_expr(const ir::Expr& a, const ir::Expr& b) {
  return a.op == b.op && a.type == b.type && a.operands == b.operands && a.buffer == b.buffer &&
         (a.value == b.value || (a.value != a.value && b.value != b.value)) && a.ivalue == b.ivalue;
}

// The same computation over buffers of the same types (shapes and strides aside: the code
// generators decide from those whether two members share code).
bool same_body(const ir::Kernel& a, const ir::Kernel& b) {
  if (a.inputs.size() != b.inputs.size() || a.outputs.size() != b.outputs.size() ||
      a.exprs.size() != b.exprs.size() || a.aliased_io != b.aliased_io)
    return false;
  for (size_t i = 0; i < a.inputs.size(); ++i)
    if (a.inputs[i].type != b.inputs[i].type) return false;
  for (size_t o = 0; o < a.outputs.size(); ++o)
    if (a.outputs[o].expr != b.outputs[o].expr || a.outputs[o].view.type != b.outputs[o].view.type)
      return false;
  for (size_t i = 0; i < a.exprs.size(); ++i)
    if (!same_expr(a.exprs[i], b.exprs[i])) return false;
  return true;
}

struct Member {
  NodeSet reads, writes;
};

Member member_of(const ir::Schedule& s, size_t step) {
  const ir::ScheduledKernel& fk = s.kernels[s.order[step].kernel];
  Member m;
  m.reads.insert(fk.inputs.begin(), fk.inputs.end());
  m.writes.insert(fk.outputs.begin(), fk.outputs.end());
  for (const ir::Node* n : fk.store_into)
    if (n) m.writes.insert(n);
  if (step < s.memory.size()) {
    m.reads.insert(s.memory[step].inputs.begin(), s.memory[step].inputs.end());
    m.writes.insert(s.memory[step].outputs.begin(), s.memory[step].outputs.end());
  }
  m.reads.erase(nullptr);
  m.writes.erase(nullptr);
  return m;
}

bool meets(const NodeSet& a, const NodeSet& b) {
  return std::any_of(a.begin(), a.end(), [&](const ir::Node* n) { return b.count(n) > 0; });
}

void arg_nodes(const ir::Arg& a, NodeSet& out) {
  if (a.kind == ir::Arg::Kind::Node && a.node) out.insert(a.node);
  for (const ir::Arg& i : a.items) arg_nodes(i, out);
}

// The graph values a step never run (a view folded into a kernel's reads or allocation) names.
NodeSet skipped_reads(const ir::Schedule& s, size_t step) {
  NodeSet reads;
  if (const ir::Node* n = s.order[step].extern_node) {
    for (const ir::Arg& a : n->args) arg_nodes(a, reads);
    for (const auto& kw : n->kwargs) arg_nodes(kw.second, reads);
  }
  return reads;
}

}  // namespace

bool is_copy_kernel(const ir::Kernel& k) {
  // NOTE: casts allowed: a half copy loads, computes in f32 and casts back (codegen folds it).
  // Grouping needs no more than that: it runs each member's own body.
  return k.reduction_axes == 0 && k.inputs.size() == 1 && k.outputs.size() == 1 &&
         std::all_of(k.exprs.begin(), k.exprs.end(), [](const ir::Expr& e) {
           return e.op == ir::ExprOp::Load || e.op == ir::ExprOp::Cast;
         });
}

size_t group_kernels(ir::Schedule& s, bool copies_only) {
  size_t saved = 0;
  auto skipped = [&](size_t i) { return i < s.memory.size() && s.memory[i].skip; };
  auto kernel_step = [&](size_t i) {
    if (s.order[i].kernel < 0 || skipped(i)) return false;
    const ir::Kernel& k = s.kernels[s.order[i].kernel].kernel;
    return copies_only ? is_copy_kernel(k) : groupable(k);
  };
  const bool planned = s.memory.size() == s.order.size();
  for (size_t i = 0; i < s.order.size();) {
    if (!kernel_step(i)) {
      ++i;
      continue;
    }
    // A window of consecutive kernel steps, none reading or writing what another writes: any
    // order of them computes the same. Steps never run (views folded into a kernel's reads)
    // may sit between them.
    Member all = member_of(s, i);
    std::vector<size_t> members = {i}, skips;
    size_t end = i + 1;
    for (; end < s.order.size(); ++end) {
      if (skipped(end)) {
        skips.push_back(end);
        continue;
      }
      if (!kernel_step(end)) break;
      Member m = member_of(s, end);
      if (meets(m.reads, all.writes) || meets(m.writes, all.reads) || meets(m.writes, all.writes))
        break;
      all.reads.insert(m.reads.begin(), m.reads.end());
      all.writes.insert(m.writes.begin(), m.writes.end());
      members.push_back(end);
    }
    // Its kernels by body, in order of first appearance; each body's kernels become neighbours.
    std::vector<std::vector<size_t>> groups;
    for (size_t m : members) {
      const ir::Kernel& k = s.kernels[s.order[m].kernel].kernel;
      auto g = std::find_if(groups.begin(), groups.end(), [&](const std::vector<size_t>& g) {
        return same_body(s.kernels[s.order[g[0]].kernel].kernel, k);
      });
      if (g == groups.end())
        groups.push_back({m});
      else
        g->push_back(m);
    }
    if (groups.size() < members.size()) {
      // NOTE: a skipped view of a member's output goes after the members (the runtime names
      // its operand's slot when it reaches it); the others before (a member may read them).
      std::vector<size_t> sequence, after;
      for (size_t k : skips)
        (meets(skipped_reads(s, k), all.writes) ? after : sequence).push_back(k);
      const size_t before = sequence.size();
      for (const auto& g : groups) sequence.insert(sequence.end(), g.begin(), g.end());
      sequence.insert(sequence.end(), after.begin(), after.end());
      std::vector<ir::ScheduleStep> order;
      std::vector<ir::StepMemory> memory;
      std::vector<const ir::Node*> released;
      for (size_t at : sequence) {
        order.push_back(s.order[at]);
        if (!planned) continue;
        memory.push_back(std::move(s.memory[at]));
        // NOTE: the window's releases wait for its end: a value two of its kernels read
        // is released after whichever of them now runs last.
        released.insert(released.end(), memory.back().release_after.begin(),
                        memory.back().release_after.end());
        memory.back().release_after.clear();
      }
      // NOTE: on the last member (the group's launch), not on a skipped step after it.
      if (planned) memory[sequence.size() - after.size() - 1].release_after = std::move(released);
      for (size_t j = 0; j < sequence.size(); ++j) {
        s.order[i + j] = order[j];
        if (planned) s.memory[i + j] = std::move(memory[j]);
      }
      size_t at = i + before;
      for (const auto& g : groups) {
        for (size_t j = 0; j < g.size(); ++j, ++at) {
          ir::Kernel& k = s.kernels[s.order[at].kernel].kernel;
          if (g.size() < 2) continue;
          k.runtime_sizes = true;
          k.grouped = true;
          s.order[at].launch_with_next = j + 1 < g.size();
        }
        saved += g.size() - 1;
      }
    }
    i = end;
  }
  return saved;
}

}  // namespace tl::passes
