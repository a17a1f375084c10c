#pragma once
// Facts about a captured graph that lowering and fusion share: who uses each
// node, and the side-effect barriers no fusion or reordering may cross.
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"

namespace tl::passes {

struct GraphInfo {
  std::unordered_map<const ir::Node*, std::vector<const ir::Node*>> users;  // incl. the output node
  std::unordered_map<const ir::Node*, int> position;                        // index in graph order
  // Number of barriers before a node (a barrier counts itself): fusion stays
  // inside one segment, so nothing moves across a side effect.
  std::unordered_map<const ir::Node*, int> segment;
  // Tensor values on a device other than the kernels' (a CPU tensor made in a
  // CUDA graph before `.to(device)`): neither they nor their readers lower.
  std::unordered_set<const ir::Node*> off_device;
  const std::vector<const ir::Node*>& users_of(const ir::Node* n) const;
};

GraphInfo analyze_graph(const ir::Graph& graph);

// In-place ops, out=, setitem, grad mode switches and RNG ops: their order
// against every other op is observable, so they split fusion segments.
bool is_barrier(const ir::Node& n);

// Every node an argument tree refers to (args and kwargs, nested).
std::vector<const ir::Node*> node_inputs(const ir::Node& n);

}  // namespace tl::passes
