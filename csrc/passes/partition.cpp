// Lowering, fusion and scheduling in one call: kernels in the order of their
// last member, externs in graph order, each after everything it reads; then the
// view facts and the memory plan the runtime executes.
#include "passes/partition.h"

#include <cstdlib>
#include <functional>

#include "core/errors.h"
#include "passes/fuse.h"
#include "passes/graph_info.h"
#include "passes/memory_plan.h"
#include "passes/store_in_place.h"
#include "passes/view_facts.h"

namespace tl::passes {

Partition partition_graph(const ir::Graph& graph, bool inputs_unaliased,
                          const OnKernelDevice& on_device) {
  GraphInfo info = analyze_graph(graph);
  if (on_device)
    for (const auto& n : graph.nodes())
      if (n->meta && !on_device(*n->meta)) info.off_device.insert(n.get());
  Fusion fusion = fuse(graph, info);
  Partition p;
  for (size_t i = 0; i < fusion.groups.size(); ++i) {
    p.kernels.push_back(build_kernel(fusion.groups[i], fusion, info, static_cast<int>(i)));
    p.kernels.back().kernel.verify();
  }
  auto group_of = [&](const ir::Node* n) {
    auto it = fusion.group_of.find(n);
    return it == fusion.group_of.end() ? -1 : it->second;
  };
  std::vector<int> state_group(fusion.groups.size(), 0);  // 0 new, 1 visiting, 2 emitted
  std::unordered_map<const ir::Node*, int> state_node;
  std::function<void(const ir::Node*)> emit = [&](const ir::Node* n) {
    if (n->op != ir::OpKind::CallFunction && n->op != ir::OpKind::CallMethod) return;
    if (fusion.dead.count(n)) return;
    int gi = group_of(n);
    int& st = gi >= 0 ? state_group[gi] : state_node[n];
    if (st == 2) return;
    TL_CHECK(st == 0) << "partition has a cycle through " << n->name << "\n" << graph.str();
    st = 1;
    std::vector<const ir::Node*> members = gi >= 0 ? fusion.groups[gi].members : std::vector{n};
    for (const ir::Node* m : members)
      for (const ir::Node* in : node_inputs(*m))
        if (gi < 0 || group_of(in) != gi) emit(in);
    st = 2;
    p.order.push_back(gi >= 0 ? PlanItem{nullptr, gi} : PlanItem{n, -1});
  };
  for (const auto& n : graph.nodes()) {
    int gi = group_of(n.get());
    if (gi < 0 || fusion.groups[gi].members.back() == n.get()) emit(n.get());
  }
  if (inputs_unaliased) store_in_place(graph, info, fusion, p);
  describe_views(graph, p);
  plan_memory(graph, p);
  return p;
}

}  // namespace tl::passes
