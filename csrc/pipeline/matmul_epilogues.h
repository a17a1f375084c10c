#pragma once
// mode="max-autotune" for matrix products with a bias: each site's forms
// (passes/matmul_epilogue.h: bias in cuBLAS's call, bias in our kernel, bias and activation in
// cuBLASLt's epilogue) timed at compile time on the graph's sizes, layouts and dtype with random
// operands (torchlite/_epilogue_trials.py builds the torch calls; runtime/cuda_autotune.h times
// them and caches the choice on disk, so another process reads it without timing), and the
// fastest form written into the graph before partition. Each trial and its time goes to
// <trace_dir>autotune_epilogues.txt. CUDA graphs only; a size-generic graph keeps its products.
#include "ir/graph.h"
#include "pipeline/pass_registry.h"

namespace tl::pipeline {

// Returns how many products changed form. With torchlite._epilogue_trials.timer set (read through
// the registered helper epilogue_trials.fake_timer, core/python_helpers.h) (tests: `timer(site,
// label) -> us`), it runs on any device and times nothing.
int choose_matmul_epilogues(ir::Graph& g, PassState& st);

}  // namespace tl::pipeline
