#pragma once
// What the frame hook stores per code object and runs on a cache hit.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/flags.h"
#include "core/py_ref.h"
#include "guards/guard_set.h"
#include "ir/frame_view.h"
#include "runtime/cuda_graphs.h"

namespace tl::frame {

// The options of one torchlite.compile() call. Immutable once built; shared
// by every cache entry it produced.
struct CompileConfig {
  int id = 0;                // distinguishes entries of different compile() calls
  PyRef backend;             // None for the builtin runner, else backend(gm, example_inputs)
  std::string backend_name;  // "torchlite", "inductor", "<callable>"
  bool fullgraph = false;    // raise instead of falling back to eager on a graph break
  int cache_size_limit = 8;  // entries per code object before running eagerly
  PyRef recorder;            // explain(): a list that receives one dict per capture, or None
  Settings settings;         // compile scope from mode/options, the rest torchlite.config's
  std::string mode = "default";
  // settings.cuda_graphs: the one memory pool of every graph this compile() call records.
  std::shared_ptr<runtime::CudaGraphPool> graph_pool = std::make_shared<runtime::CudaGraphPool>();
  // torchlite.compile(dynamic=...): -1 None (automatic), 0 False, 1 True
  // (frame/dynamic_policy.h).
  int dynamic = -1;
};

// What serves() read on its way to a yes, handed to the run() of the same call so nothing is
// read twice (the frame hook keeps it on its stack between the two; nothing runs in between).
struct Served {
  // The graph's inputs as fetched (by the guards, GuardSet::bind_inputs, or serves()); a null
  // entry, or none at all, is read by run().
  std::vector<PyRef> inputs;
  bool chosen = false;          // `graph` is serves()'s choice for these inputs
  std::shared_ptr<void> graph;  // (opaque here; null: run the frame eagerly)
};

// A captured frame, compiled: reads its inputs from the frame by source, runs
// the graph, rebuilds the return value and replays side effects.
class CompiledFrame {
 public:
  virtual ~CompiledFrame() = default;
  // Returns a new reference, or nullptr with a Python exception set, or nullptr with none
  // set: nothing visible happened, run the frame eagerly. `served`: what serves() kept for
  // this call, or null.
  virtual PyObject* run(const ir::FrameView& frame, Served* served) = 0;
  // After the guards passed: false when this entry still cannot serve the call (a
  // size-generic entry whose trace relied on a relation of sizes that fails here). May fill
  // `keep` (null: nothing is kept) for the run() that follows.
  virtual bool serves(const ir::FrameView& /*frame*/, Served* /*keep*/) { return true; }
};

struct CacheEntry {
  guards::GuardSet guards;
  std::shared_ptr<CompiledFrame> compiled;  // null: a graph break, run the frame eagerly
  std::shared_ptr<const CompileConfig> config;
  // Weakrefs to the objects the guards match by identity; when one dies, the
  // entry is removed from its code object (frame/entry_reaper.h).
  std::vector<PyRef> watchers;
  // Its CPU kernels take their sizes at run time (frame/dynamic_policy.h): a
  // recompile for another size costs no kernel compile, so past the cache
  // size limit such entries make room instead of the frame running eagerly.
  bool runtime_sizes = false;
  // The sizes of the graph's tensor inputs at capture, by source (frame/dynamic_policy.h): a
  // later capture of the frame at the same sizes (another flag, a kwarg) keeps constant sizes.
  std::vector<std::pair<std::string, std::vector<int64_t>>> input_sizes;
};

}  // namespace tl::frame
