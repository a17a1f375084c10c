#include <pybind11/stl.h>

#include "codegen/common/pass_loops.h"
#include "codegen/cpu/emission_key.h"
#include "passes/partition.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace tl::python {

void bind_passes(py::module_& m) {
  m.def(
      "partition_summary",
      [](const std::shared_ptr<ir::Graph>& g) {
        passes::Partition p = passes::partition_graph(*g);
        py::list kernels, members, externs, extern_ops, order, cpu_loops;
        for (const auto& k : p.kernels) {
          kernels.append(k.kernel.str());
          codegen::LoopSpace s = codegen::cpu::cpu_loop_space(k.kernel);
          py::dict loops;
          loops["outer"] = s.outer;
          loops["red"] = s.red;
          loops["strides"] = s.strides;
          loops["tile"] = codegen::outer_tile(s, k.kernel.inputs.size());
          // Per pass over the reduction axes: the sizes of the loops it runs (pass_loops.h).
          py::list pass_sizes;
          if (!s.red.empty()) {
            codegen::PassPlan plan = codegen::plan_passes(k.kernel, "kernel");
            codegen::Stash stash = codegen::plan_stash(k.kernel, plan);
            for (int q = 1; q <= plan.n_passes; ++q) {
              std::vector<size_t> firsts = codegen::pass_loops(
                  k.kernel, s, codegen::pass_buffers(k.kernel, s, plan, stash, q));
              std::vector<int64_t> sizes;
              for (size_t l = 0; l < firsts.size(); ++l) {
                size_t end = l + 1 < firsts.size() ? firsts[l + 1] : s.red.size();
                int64_t n = 1;
                for (size_t d = firsts[l]; d < end; ++d) n *= s.red[d];
                sizes.push_back(n);
              }
              pass_sizes.append(sizes);
            }
          }
          loops["pass_red"] = pass_sizes;
          cpu_loops.append(loops);
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
        py::list memory;
        auto names = [](const std::vector<const ir::Node*>& nodes) {
          py::list out;
          for (const ir::Node* n : nodes) out.append(n->name);
          return out;
        };
        for (const ir::StepMemory& m : p.memory) {
          py::dict step;
          step["skip"] = m.skip;
          step["kernel_layout"] = m.kernel_layout;
          step["strided_base"] =
              m.strided_base ? py::object(py::str(m.strided_base->name)) : py::object(py::none());
          step["strided_offset"] = m.strided_offset;
          step["outputs"] = names(m.outputs);
          step["inputs"] = names(m.inputs);
          step["input_byte_offsets"] = m.input_byte_offsets;
          step["release_after"] = names(m.release_after);
          memory.append(step);
        }
        py::dict d;
        d["kernel_count"] = p.kernels.size();
        d["kernels"] = kernels;
        d["cpu_loops"] = cpu_loops;
        d["members"] = members;
        d["externs"] = externs;
        d["extern_ops"] = extern_ops;
        d["order"] = order;
        d["memory"] = memory;
        return d;
      },
      "Lowers and fuses a captured graph: kernel_count, kernels (loop IR text), cpu_loops\n"
      "(per kernel the loops the CPU emitter runs: outer and red sizes, per buffer -- inputs,\n"
      "outputs, index pseudo-buffers -- strides over outer then red; tile: the outer points\n"
      "a reduction reduces together, codegen/common/loop_space.h outer_tile), members,\n"
      "externs (node names), extern_ops (their targets), order, and per step its memory plan\n"
      "(ir::StepMemory: skip, kernel_layout, strided_base/offset, outputs, inputs,\n"
      "input_byte_offsets, release_after).");
}

}  // namespace tl::python
