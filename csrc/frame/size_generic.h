#pragma once
// Size-generic entries (docs/internals/dynamic-shapes.md, layer 2, first slice): a capture
// whose graph does not depend on the sizes of its inputs serves every size of their dynamic
// dimensions from one cache entry. A new size then costs no capture: the entry replays the
// captured graph on meta tensors of the new sizes (torch's own shape rules, op by op) and
// compiles it, its kernels found in the JIT cache (layer 1: runtime sizes).
//
// When a capture may be size-generic (size_generic_blocker):
// - the trace read no size (CaptureResult::reads_sizes: shape, size(), len(), numel(), an op
//   answering with a number or with a tuple whose length follows from a size); reading one
//   keeps the entry exact (today's guards), which is always correct;
// - no graph break, the builtin compiler, CPU or CUDA tensor inputs, no op autograd records
//   (inference: no_grad or no input that requires grad);
// - every op is a torch op, a Tensor method or Python's operator on tensors (its meaning at
//   other sizes is the same op on other sizes: the replay runs it there on meta tensors, as
//   capture did), with a tensor result (or a setitem), that writes no `out=` tensor and has no
//   effect beyond its result and an in-place write of its first operand (hooks, backward,
//   seeds); an op whose view-or-copy answer follows from strides (reshape, flatten, contiguous,
//   a memory format) must give the trace's answer at each new size, else that size is captured
//   again;
// - an in-place write (`x += y`, `relu_`, `x[:, :n] = v`, an input's `add_`) is decided again at
//   each new size as capture decided it: no tensor operand may partly overlap the memory it
//   writes (the inputs placed in their real storages), and the values of the graph must share
//   memory as they did in the trace (whom a write reaches); else that size is captured again
//   (where the overlap is real, capture leaves the op to eager, which raises).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "capture/capture.h"
#include "frame/compiled_frame.h"
#include "ir/graph.h"
#include "pipeline/pass_context.h"
#include "runtime/compiled_graph.h"

namespace tl::frame {

// Why `res` cannot serve other sizes, or "" when it can (see above). `resumes`: res broke and
// goes on in a resume function (bytecode/resume.h); its graph before the break may still serve
// every size (every size value handed to CPython there was specialised: capture.cpp).
std::string size_generic_blocker(const capture::CaptureResult& res, const CompileConfig& config,
                                 bool resumes = false);

// Lets the dynamic dimensions of res's tensor inputs change in its guards: every dimension of
// size >= 2 under dynamic=True or an automatic recompile (`all_dims`), else the dimensions
// marked with mark_dynamic; never mark_static ones; only contiguous tensors. Returns the
// dimensions made dynamic ("L['x'].size(0), ..."), "" when none (the entry stays exact).
std::string make_sizes_dynamic(capture::CaptureResult& res, bool all_dims);

// When every size symbol of `res` is a dimension of an input tensor: its relations become
// SIZE_RELATION guards of res.guards (checked in C++ with the other guards, once per call) and
// the answer is true. False (nothing changed) when a symbol is a computed tensor's size: its
// relations are then checked by replaying the graph at the new sizes (SizeInstances).
bool relations_to_guards(capture::CaptureResult& res);

// Each size symbol of res's graph as (position of its node in the graph, dimension): what
// clone_graph keeps. Taken before compile_graph, whose passes insert and erase nodes (a dense
// attention mask, a padded linear): positions counted after them point at other nodes.
std::vector<std::pair<size_t, int>> symbol_positions(const capture::CaptureResult& res);

// A deep copy of `g` (nodes, arguments, metadata, examples).
std::shared_ptr<ir::Graph> clone_graph(const ir::Graph& g);

// Drops the trace-time (meta) values of g's nodes: what a compiled graph that is kept needs
// no more (the passes and the replay read them; the runtime reads TensorMeta and arguments).
void drop_examples(ir::Graph& g);

// The compiled graphs of one size-generic capture, one per layout of its inputs.
class SizeInstances {
 public:
  // `captured`: the graph as captured (before compile_graph's passes), kept to replay.
  SizeInstances(std::shared_ptr<const ir::Graph> captured, pipeline::PassContext ctx,
                std::string func_name);
  // The graph compiled for `inputs` (borrowed, one per placeholder): `first` for the layout it
  // was compiled for (remember_first), else one compiled now or earlier. Null when the graph's
  // ops raise at these sizes or compile to no kernels: the frame then runs eagerly (eager
  // raises the real error).
  // Throws tl::Error on a compile failure.
  std::shared_ptr<runtime::CompiledGraph> get(PyObject* const* inputs, size_t n,
                                              const std::shared_ptr<runtime::CompiledGraph>& first);
  void remember_first(const std::vector<PyRef>& example_inputs);
  // The size symbols of res's graph (`positions`: symbol_positions, taken before the passes)
  // and the relations its trace relied on.
  // `in_guards`: relations_to_guards took the relations (the guards check them).
  void set_symbols(const capture::CaptureResult& res, std::vector<std::pair<size_t, int>> positions,
                   bool in_guards);
  // Whether this entry holds at `inputs`' sizes: every relation the trace relied on (`t > 16`,
  // `d == 64`) still comes out the same. False: the caller captures again. Compiles the
  // instance for these sizes on first sight; `graph` is then what get() would return.
  bool serves(PyObject* const* inputs, size_t n,
              const std::shared_ptr<runtime::CompiledGraph>& first,
              std::shared_ptr<runtime::CompiledGraph>& graph);
  // serves() may answer false (otherwise it is always true and need not be asked).
  bool may_refuse() const { return may_refuse_; }
  // For explain() and guards.txt: one line per in-place write whose overlap with what it reads
  // is decided at each new size ("WRITE_OVERLAP <op> ... # <where>"), "" when none.
  std::string per_size_checks() const;

 private:
  struct Instance {
    std::shared_ptr<runtime::CompiledGraph> graph;  // null: runs eagerly (or not served)
    bool served = true;
  };
  Instance instantiate(PyObject* const* inputs, size_t n);
  // For the recompiles log: " (the trace relied on <relation>, <where>)" for a relation false
  // at `symbols` whatever the unbound ones are, else "".
  std::string failed_relation(const std::vector<int64_t>& symbols,
                              const std::vector<bool>& bound) const;
  // The inputs' sizes and strides, one key (-1 for a non-tensor).
  std::vector<int64_t> layout_key(PyObject* const* inputs, size_t n);
  // layout_key's fast path: the getter and method of the last type seen, valid while its
  // version tag is `layout_tag_` (0: none). No reference to the type is held: the tag is unique
  // per type, so a new type at the same address cannot match.
  PyTypeObject* layout_type_ = nullptr;
  unsigned int layout_tag_ = 0;
  PyGetSetDef* shape_getter_ = nullptr;
  PyRef stride_method_;
  std::map<std::vector<int64_t>, Instance>::iterator add(std::vector<int64_t> key, Instance made);
  std::vector<std::pair<size_t, int>> symbols_;  // symbol k: (node position, dim)
  std::vector<ir::SymRelation> relations_;
  // relations, a reshape/contiguous whose view-or-copy may change, or an in-place write whose
  // overlap with what it reads may change
  bool may_refuse_ = false;
  bool writes_ = false;                    // the graph writes an operand in place
  std::vector<int64_t> captured_aliases_;  // with writes_: the captured graph's alias_pattern
  std::shared_ptr<const ir::Graph> captured_;
  pipeline::PassContext ctx_;
  std::string func_name_;
  std::vector<int64_t> first_key_;
  int traced_instances_ = 0;  // instances whose pipeline went to the trace (settings.trace)
  // NOTE: read and written under the GIL only. A compile may release it: two threads may
  // then compile one layout twice, and the second result is dropped; a graph being run is
  // kept alive by the caller's shared_ptr when the map is cleared.
  std::map<std::vector<int64_t>, Instance> by_layout_;
};

}  // namespace tl::frame
