#include "passes/fusion_cost.h"

#include <algorithm>

namespace tl::passes {

double KernelEstimate::cost() const {
  double use = std::clamp(lanes / kFullLanes, 1.0 / kFullLanes, 1.0);
  return kLaunchBytes + bytes / use;
}

EpilogueChoice price_epilogue(const EpilogueCase& c) {
  EpilogueChoice ch;
  double points = double(c.rows) * double(c.row_len);
  double in = points * c.in_bytes, out = points * c.out_bytes;
  double results = double(c.rows) * 4;  // one value a row, in f32 (mean, rstd, ...)
  double row_lanes = double(c.rows) * double(std::min(c.row_len, kLanesPerRow));
  ch.row_on_chip = double(c.row_len) * c.in_bytes <= kRowOnChipBytes;
  // NOTE: a row that stays on chip is read from memory once, however many
  // passes run over it; otherwise each pass reads it again.
  int reads = ch.row_on_chip ? 1 : c.reduce_passes;
  ch.fused = {in * (ch.row_on_chip ? 1 : reads + 1) + out, row_lanes};
  ch.reduction = {in * reads + results, row_lanes};
  ch.epilogue = {in + results + out, points};
  ch.fuse = ch.fused.cost() <= ch.reduction.cost() + ch.epilogue.cost();
  return ch;
}

PrologueChoice price_prologue(const PrologueCase& c) {
  PrologueChoice ch;
  // NOTE: roofline per kernel: the larger of its bytes and its compute. Fused, the producer's
  // inputs are read (and its body run) at every point; apart, the kernel reads its value.
  double fused_bytes = c.other_bytes + c.in_bytes;
  double fused_ops = c.other_ops + c.op_bytes;
  ch.fused = c.points * std::max(fused_bytes, fused_ops) + (c.stored ? c.numel * c.out_bytes : 0);
  double apart_bytes = c.other_bytes + c.out_read_bytes;
  double producer = c.numel * std::max(c.in_elem_bytes + c.out_bytes, c.op_bytes);
  ch.unfused = c.points * std::max(apart_bytes, c.other_ops) + producer + kLaunchBytes;
  ch.fuse = ch.fused <= ch.unfused;
  return ch;
}

}  // namespace tl::passes
