#pragma once
// Recomputed producers: a pointwise kernel whose value several other kernels read
// (a ReLU's gradient read by a batch norm's two statistic sums and its input
// gradient; `x - mean` read by a sum and the pointwise gradient) is copied into
// the graph once per reading kernel, so each computes it from the kernel's own
// loads instead of a kernel of its own storing it for them. A view several
// kernels read (the reshape after a split reduction's fold) is copied per
// reader too: fusion never stores a view, so a view read by two kernels kept
// its base from joining either (the fold's [C] epilogues ran as kernels of
// their own). As Inductor inlines pointwise values into every reader below its
// read and op-count thresholds.
//
// NOTE: decided on a trial fusion of the graph, and kept only where fusing the
// rewritten graph gives fewer kernels (a copy that cannot join its reader
// would be one kernel more); then the copies are undone.
#include <functional>

#include "ir/graph.h"
#include "passes/partition.h"

namespace tl::passes {

// A copied producer reads at most this many full-size values from memory per point
// (each reader then reads them instead of the one stored value).
constexpr int kRecomputeMaxReads = 3;
// ... and computes at most this many ops per point.
constexpr int kRecomputeMaxOps = 40;
// Rounds of copies at most (each a trial fusion before and after).
constexpr int kRecomputeRounds = 3;

// Rewrites the graph; returns how many producers (kernels or views) were copied. `after_copies`
// (may be null) rewrites the graph once the copies are made, before they are judged: the
// pipeline moves reshapes there (passes/move_reshapes.h), as a copy read only by a reshape
// (a split reduction's view) can now take it.
int recompute_producers(ir::Graph& graph, const OnKernelDevice& on_device = nullptr,
                        const std::function<void(ir::Graph&)>& after_copies = nullptr);

}  // namespace tl::passes
