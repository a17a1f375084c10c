// Plan rewrites that spare the host the torch view calls (~2-15 us each) of a graph's extern
// steps, and value lifetimes. Every rewrite is decided from the trace-time meta values, where
// torch's own aliasing rules ran: a view is replaced only by the same memory, addressed with the
// same sizes, strides and offset.
#include "passes/memory_plan.h"

#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.h"
#include "core/py_ref.h"
#include "passes/graph_info.h"

namespace tl::passes {
namespace {

using NodeSet = std::unordered_set<const ir::Node*>;

const ir::Node* first_node_arg(const ir::Node& n) {
  return !n.args.empty() && n.args[0].kind == ir::Arg::Kind::Node ? n.args[0].node : nullptr;
}

// The meta value of `n` starts at its storage's start (as_strided offsets and
// kernel byte offsets from it are then the same). NOTE: a view of its own fresh storage at offset 0
// counts too: F.linear of a 3-D input returns addmm's 2-D result viewed back to 3-D, and the views
// after it (transformers' q/k/v `view(...).transpose(1, 2)`) are then one as_strided call.
bool starts_its_storage(const ir::Node& n) {
  PyObject* ex = n.example.get();
  if (!n.meta || !ex) return false;
  PyRef off = PyRef::steal(PyObject_CallMethod(ex, "storage_offset", nullptr));
  if (!off || !PyLong_Check(off.get())) {
    PyErr_Clear();
    return false;
  }
  return PyLong_AsLongLong(off.get()) == 0;
}

int64_t item_size(const ir::TensorMeta& m) {
  PyRef size = PyRef::steal(PyObject_GetAttrString(m.dtype.get(), "itemsize"));
  int64_t v = size ? PyLong_AsLongLong(size.get()) : -1;
  if (v <= 0) PyErr_Clear();
  return v;
}

// Elements between the first and the last addressed by a layout, plus one.
int64_t span(const ir::TensorMeta& m) {
  int64_t s = 1;
  for (size_t d = 0; d < m.sizes.size(); ++d) {
    if (m.sizes[d] == 0) return 0;
    s += (m.sizes[d] - 1) * m.strides[d];
  }
  return s;
}

// `view` reads the value `from`, which starts a kernel's output `root`, and
// is a torch view of all of root's memory: root can be allocated as `view`.
bool views_all_of(const ir::Schedule& plan, const ir::Node& view, const ir::Node& from,
                  const ir::Node& root) {
  if (first_node_arg(view) != &from || !view.meta || !root.meta || !plan.view_fact(view).view_op)
    return false;
  const ir::TensorMeta &v = *view.meta, &r = *root.meta;
  // NOTE: no views of values autograd records: those must keep torch's view chain.
  if (v.requires_grad || r.requires_grad || v.dtype.get() != r.dtype.get()) return false;
  int64_t n = span(r);
  return n > 0 && span(v) == n && plan.view_offset(view, root) == std::optional<int64_t>(0);
}

class Planner {
 public:
  Planner(const ir::Graph& graph, ir::Schedule& schedule) : graph_(graph), s_(schedule) {
    mem_.assign(s_.order.size(), {});
    reads_.assign(s_.order.size(), {});
    for (size_t idx = 0; idx < s_.order.size(); ++idx) {
      const ir::ScheduleStep& item = s_.order[idx];
      ir::StepMemory& m = mem_[idx];
      int i = static_cast<int>(idx);
      if (item.extern_node) {
        reads_[idx] = node_inputs(*item.extern_node);
        for (const ir::Node* r : reads_[idx]) use(r, i);
        extern_step_of_[item.extern_node] = i;
        continue;
      }
      TL_CHECK(item.kernel >= 0 && item.kernel < static_cast<int>(s_.kernels.size()))
          << "plan item names kernel " << item.kernel;
      const ir::ScheduledKernel& fk = s_.kernels[item.kernel];
      m.inputs = fk.inputs;
      m.input_byte_offsets.assign(fk.inputs.size(), 0);
      m.outputs = fk.outputs;
      for (const ir::Node* in : fk.inputs) {
        use(in, i);
        auto producer = extern_step_of_.find(in);
        if (producer != extern_step_of_.end()) mem_[producer->second].kernel_layout = true;
      }
      for (const ir::Node* into : fk.store_into)
        if (into) use(into, i);
    }
    TL_CHECK(graph_.output()) << "graph without output";
    for (const ir::Arg& a : graph_.output()->args)
      if (a.kind == ir::Arg::Kind::Node) {
        outputs_.insert(a.node);
        last_use_[a.node] = static_cast<int>(s_.order.size());  // kept to the end
      }
  }

  void plan_views() {
    skip_empty_factories();
    fold_output_views();
    collapse_view_chains();
    drop_unread_views();
  }

  void plan_lifetimes() {
    int n_steps = static_cast<int>(mem_.size());
    std::vector<std::vector<const ir::Node*>> produced(n_steps);
    NodeSet made;
    for (int step = 0; step < n_steps; ++step) {
      const ir::Node* ext = s_.order[step].extern_node;
      produced[step] = ext ? std::vector{ext} : mem_[step].outputs;
      made.insert(produced[step].begin(), produced[step].end());
    }
    // NOTE: only values some step makes: a kernel output allocated as a view is made under the
    // view's name, and its own name holds nothing to release.
    // NOTE: a graph input is released too (the runtime's own reference to it): where the
    // caller hands its inputs over (Executable::run_owned: a training backward's saved
    // values), each is freed after its last reader, as eager's autograd frees a node's saved
    // tensors after that node, instead of all living to the end of the backward.
    for (const auto& [node, step] : last_use_)
      if (step < n_steps && (made.count(node) || node->op == ir::OpKind::Placeholder))
        mem_[step].release_after.push_back(node);
    for (int step = 0; step < n_steps; ++step)
      for (const ir::Node* n : produced[step])
        if (!last_use_.count(n)) mem_[step].release_after.push_back(n);
    s_.memory = std::move(mem_);
  }

 private:
  // Step `step` reads `n` (the value lives to its latest reader).
  void use(const ir::Node* n, int step) {
    auto [it, added] = last_use_.try_emplace(n, step);
    if (!added && it->second < step) it->second = step;
  }

  const ir::Node* extern_at(size_t idx) const { return s_.order[idx].extern_node; }

  // A zero-element tensor from a factory (a KV cache's first `torch.tensor([])`,
  // then concatenated with the new keys) that only kernels read is never made:
  // kernels read none of its elements, and the factory call costs ~10 us a call.
  void skip_empty_factories() {
    static const char* const kFactories[] = {"torch.tensor", "torch.empty", "torch.zeros",
                                             "torch.ones", "torch.full"};
    NodeSet read_by_extern;
    for (size_t idx = 0; idx < mem_.size(); ++idx)
      if (extern_at(idx)) read_by_extern.insert(reads_[idx].begin(), reads_[idx].end());
    for (size_t idx = 0; idx < mem_.size(); ++idx) {
      const ir::Node* n = extern_at(idx);
      if (!n || !n->meta || read_by_extern.count(n) || outputs_.count(n)) continue;
      int64_t numel = 1;
      for (int64_t d : n->meta->sizes) numel *= d;
      bool factory = false;
      for (const char* f : kFactories) factory |= n->target_name == f;
      mem_[idx].skip = factory && numel == 0;
    }
  }

  // A kernel output read only by a chain of torch views (`view`, `reshape`,
  // `contiguous`, ...: each the only reader of the one before) that covers all
  // of its memory is allocated in the last view's layout: the kernel writes the
  // same bytes, and the view calls (~3 us each on the host) are never made.
  void fold_output_views() {
    for (size_t idx = 0; idx < mem_.size(); ++idx) {
      if (extern_at(idx)) continue;
      const ir::ScheduledKernel& fk = s_.kernels[s_.order[idx].kernel];
      for (size_t i = 0; i < fk.outputs.size(); ++i) {
        // NOTE: an output stored into a graph input has no allocation of its own to fold into.
        if (i < fk.store_into.size() && fk.store_into[i]) continue;
        std::vector<int> chain;
        const ir::Node* last = nullptr;
        for (const ir::Node* cur = fk.outputs[i];;) {
          const ir::Node* user = s_.view_fact(*cur).sole_user;
          auto step = user ? extern_step_of_.find(user) : extern_step_of_.end();
          if (step == extern_step_of_.end() || !views_all_of(s_, *user, *cur, *fk.outputs[i]))
            break;
          chain.push_back(step->second);
          last = cur = user;
        }
        if (!last) continue;
        mem_[idx].outputs[i] = last;
        for (int c : chain) mem_[c].skip = true;
      }
    }
  }

  // A view read through a chain of other views of a fresh value (a kernel's
  // output, or a matmul's) is computed from that value in one step: for a
  // kernel, its data pointer plus an offset; for an extern, one as_strided call
  // (GPT-2's query: view, split, getitem, view, transpose of a linear's output).
  void collapse_view_chains() {
    NodeSet kernel_made;  // allocated by the runtime: laid out as planned, at offset 0
    for (size_t idx = 0; idx < mem_.size(); ++idx)
      if (!extern_at(idx)) kernel_made.insert(mem_[idx].outputs.begin(), mem_[idx].outputs.end());
    // The fresh value whose memory `n` addresses through `depth` views, or null.
    auto root_of = [&](const ir::Node* n, int& depth) -> const ir::Node* {
      for (depth = 0;; ++depth) {
        if (kernel_made.count(n)) return n;
        auto step = extern_step_of_.find(n);
        if (step == extern_step_of_.end() || mem_[step->second].skip) return nullptr;
        if (s_.view_fact(*n).fresh_result) return starts_its_storage(*n) ? n : nullptr;
        if (!(n = s_.view_fact(*n).viewed)) return nullptr;
      }
    };
    // `n`'s element offset into `root`'s memory, when the two share an element type.
    auto offset_in = [&](const ir::Node& n, const ir::Node& root) -> std::optional<int64_t> {
      if (!n.meta || n.meta->requires_grad || root.meta->dtype.get() != n.meta->dtype.get())
        return std::nullopt;
      return s_.view_offset(n, root);
    };
    for (size_t idx = 0; idx < mem_.size(); ++idx) {
      ir::StepMemory& m = mem_[idx];
      if (m.skip) continue;
      int i = static_cast<int>(idx);
      if (const ir::Node* n = extern_at(idx)) {
        int depth = 0;
        const ir::Node* root = s_.view_fact(*n).viewed ? root_of(n, depth) : nullptr;
        auto off = root && depth >= 2 ? offset_in(*n, *root) : std::nullopt;
        if (!off) continue;
        m.strided_base = root;
        m.strided_offset = *off;
        reads_[idx] = {root};
        use(root, i);
        continue;
      }
      const auto& ins = s_.kernels[s_.order[idx].kernel].inputs;
      for (size_t j = 0; j < ins.size(); ++j) {
        int depth = 0;
        const ir::Node* root = s_.view_fact(*ins[j]).viewed ? root_of(ins[j], depth) : nullptr;
        auto off = root && depth >= 1 ? offset_in(*ins[j], *root) : std::nullopt;
        int64_t size = off ? item_size(*root->meta) : -1;
        if (size <= 0) continue;
        m.inputs[j] = root;
        m.input_byte_offsets[j] = *off * size;
        use(root, i);
      }
    }
  }

  // Views (and splits) whose values no step reads any more, and the graph does
  // not return, are not made. Their sizes were guarded, so dropping them drops
  // no error eager would raise.
  void drop_unread_views() {
    NodeSet read;
    for (size_t idx = mem_.size(); idx-- > 0;) {
      ir::StepMemory& m = mem_[idx];
      if (m.skip) continue;
      if (const ir::Node* n = extern_at(idx)) {
        const ir::ViewFact& fact = s_.view_fact(*n);
        bool view = fact.split || fact.viewed;
        if (view && !read.count(n) && !outputs_.count(n)) {
          m.skip = true;
          continue;
        }
        read.insert(reads_[idx].begin(), reads_[idx].end());
      } else {
        read.insert(m.inputs.begin(), m.inputs.end());
      }
    }
  }

  const ir::Graph& graph_;
  ir::Schedule& s_;
  std::vector<ir::StepMemory> mem_;                  // per step of s_.order
  std::vector<std::vector<const ir::Node*>> reads_;  // per extern step: the values it reads
  std::unordered_map<const ir::Node*, int> extern_step_of_;
  std::unordered_map<const ir::Node*, int> last_use_;  // value -> step index
  NodeSet outputs_;                                    // values the graph returns
};

}  // namespace

void plan_memory(const ir::Graph& graph, ir::Schedule& schedule) {
  Planner planner(graph, schedule);
  planner.plan_views();
  planner.plan_lifetimes();
}

ir::Schedule op_by_op_schedule(const ir::Graph& graph) {
  ir::Schedule s;
  for (const auto& n : graph.nodes())
    if (n->op == ir::OpKind::CallFunction || n->op == ir::OpKind::CallMethod)
      s.order.push_back({n.get(), -1});
  // NOTE: lifetimes only: without kernels no view folds into an allocation, and every node runs
  // as the user wrote it.
  Planner(graph, s).plan_lifetimes();
  return s;
}

}  // namespace tl::passes
