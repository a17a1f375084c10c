#pragma once
// Ops that check their operands' values when they run (an index out of range, a class id past
// the number of classes) can raise where the trace saw nothing wrong. A graph that raises after
// it already mutated a tensor (`x.add_(1); ks.append(1); x[idx]`) cannot be rerun eagerly (the
// mutation would happen twice), and the Python side effects recorded before the failing op are
// replayed only after a graph that returns: they would be lost. Such an op is left to CPython
// (a graph break before it), so the graph before it runs whole and its effects are applied first,
// unless its indices can be checked before the graph's first effect (capture/index_bounds.h),
// or the graph's effects so far are all undoable (ir::undoable_effect: a training-mode dropout's
// draw, a no_grad block's grad-mode switch): the frame then saves the generators and the grad
// mode before the graph and, when it raises before any lasting effect, restores them and runs
// eagerly from the start (frame/captured_frame.cpp), which raises eager's error with eager's
// state.
#include <string>
#include <utility>
#include <vector>

#include "capture/context.h"

namespace tl::capture {

// Throws GraphBreak "effect_order" when `op` (a torch function's or Tensor method's name, args
// as recorded) checks values at run time, traced code has made Python side effects, and the
// graph so far has a lasting effect (ir::lasting_effect), unless the op's indices can be checked
// before the first effect (capture/index_bounds.h), or the op checks its indices only with
// device-side asserts (CUDA operands), which eager never raises where the op runs.
void check_effect_order(CaptureContext& ctx, const std::string& op,
                        const std::vector<ValuePtr>& args,
                        const std::vector<std::pair<std::string, ValuePtr>>& kwargs);

// True when graph node `n` is an op that checks its operands' values when it runs (as
// check_effect_order decides for a call): frame/captured_frame.cpp saves the generators before
// a graph that has such an op after random draws.
bool checks_values(const ir::Node& n);

}  // namespace tl::capture
