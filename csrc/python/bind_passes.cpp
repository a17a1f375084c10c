#include <pybind11/stl.h>

#include "passes/partition.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace tl::python {

void bind_passes(py::module_& m) {
  m.def(
      "partition_summary",
      [](const std::shared_ptr<ir::Graph>& g) {
        passes::Partition p = passes::partition_graph(*g);
        py::list kernels, members, externs, extern_ops, order;
        for (const auto& k : p.kernels) {
          kernels.append(k.kernel.str());
          py::list names;
          for (const ir::Node* n : k.members) names.append(n->name);
          members.append(names);
        }
        for (const auto& item : p.order) {
          if (item.extern_node) {
            externs.append(item.extern_node->name);
            extern_ops.append(item.extern_node->target_name);
            order.append(item.extern_node->name);
          } else {
            order.append("kernel " + std::to_string(item.kernel));
          }
        }
        py::dict d;
        d["kernel_count"] = p.kernels.size();
        d["kernels"] = kernels;
        d["members"] = members;
        d["externs"] = externs;
        d["extern_ops"] = extern_ops;
        d["order"] = order;
        return d;
      },
      "Lowers and fuses a captured graph: kernel_count, kernels (loop IR text), members,\n"
      "externs (node names), extern_ops (their targets) and order.");
}

}  // namespace tl::python
