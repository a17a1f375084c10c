#pragma once
// The ordered list of named compiler passes compile_graph runs. Each pass is a
// function over the graph with its name, the settings it reads and the
// devices it applies to; new passes (autodiff, symbolic shapes, CUDA graphs)
// register here instead of being called from a driver.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/flags.h"
#include "ir/graph.h"
#include "passes/partition.h"
#include "pipeline/pass_context.h"
#include "runtime/compiled_graph.h"

namespace tl::pipeline {

// What the passes of one compile_graph call share.
struct PassState {
  const PassContext& ctx;
  std::shared_ptr<ir::Graph> graph;  // the graph being compiled (for passes that share it)
  runtime::KernelDevice device;
  passes::Partition partition;  // written by torchlite.partition
};

enum DeviceMask : unsigned { kCpu = 1, kCuda = 2, kAnyDevice = kCpu | kCuda };

struct Pass {
  std::string name;                   // "torchlite.functionalize"
  std::vector<std::string> settings;  // names in core/flags.h it reads
  unsigned devices = kAnyDevice;
  std::function<bool(const Settings&)> enabled;  // null: always on
  std::function<void(ir::Graph&, PassState&)> run;
};

// The registered passes, in the order they run (built-ins first registered).
std::vector<Pass> registered_passes();
// Adds `pass` just before the pass named `before` (at the end when "" or not
// found). Throws ValueError when a pass of that name exists.
void register_pass(Pass pass, const std::string& before = "");
// Removes the pass named `name`; false when there was none.
bool unregister_pass(const std::string& name);

// The built-in passes, in order (builtin_passes.cpp).
std::vector<Pass> builtin_passes();

}  // namespace tl::pipeline
