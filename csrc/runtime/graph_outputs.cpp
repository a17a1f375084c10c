#include "runtime/graph_outputs.h"

#include "core/errors.h"

namespace tl::runtime {

void GraphOutputs::set(const ir::Graph& graph, const std::function<int(const ir::Node*)>& slot_of) {
  TL_CHECK(graph.output()) << "graph without output";
  for (auto& a : graph.output()->args) {
    if (a.kind == ir::Arg::Kind::Node) {
      slots_.push_back(slot_of(a.node));
    } else {
      slots_.push_back(-1);
      consts_.push_back(a.value);
    }
  }
}

std::vector<PyRef> GraphOutputs::outputs(const std::vector<PyRef>& values) const {
  std::vector<PyRef> out;
  out.reserve(slots_.size());
  size_t c = 0;
  for (int slot : slots_) out.push_back(slot >= 0 ? values[slot] : consts_[c++]);
  return out;
}

}  // namespace tl::runtime
