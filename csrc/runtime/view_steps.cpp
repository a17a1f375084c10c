// Plan rewrites that spare the host the torch view calls (~2-15 us each) of
// a graph's extern steps. Every rewrite is decided from the trace-time meta
// values, where torch's own aliasing rules ran: a view is replaced only by
// the same memory, addressed with the same sizes, strides and offset.
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.h"
#include "runtime/compiled_step.h"

namespace tl::runtime {
namespace {

const ir::Node* first_node_arg(const ir::Node& n) {
  return !n.args.empty() && n.args[0].kind == ir::Arg::Kind::Node ? n.args[0].node : nullptr;
}

// The meta value of `n` is a base tensor starting at its storage's start.
bool starts_its_storage(const ir::Node& n) {
  PyObject* ex = n.example.get();
  if (!n.meta || !ex) return false;
  PyRef base = PyRef::steal(PyObject_GetAttrString(ex, "_base"));
  PyRef off = PyRef::steal(PyObject_CallMethod(ex, "storage_offset", nullptr));
  if (!base || !off || !PyLong_Check(off.get())) {
    PyErr_Clear();
    return false;
  }
  return base.get() == Py_None && PyLong_AsLongLong(off.get()) == 0;
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

}  // namespace

// A kernel output read only by a chain of torch views (`view`, `reshape`,
// `contiguous`, ...: each the only reader of the one before) that covers all
// of its memory is allocated in the last view's layout: the kernel writes the
// same bytes, and the view calls (~3 us each on the host) are never made.
void CompiledGraph::fold_output_views(
    const std::unordered_map<const ir::Node*, int>& extern_step_of, const SlotMap& slots) {
  for (auto& s : steps_) {
    if (s.kernel < 0) continue;
    const auto& outs = partition_.kernels[s.kernel].outputs;
    for (size_t i = 0; i < outs.size(); ++i) {
      std::vector<int> chain;
      const ir::Node* last = nullptr;
      for (const ir::Node* cur = outs[i];;) {
        const ir::Node* user = partition_.view_fact(*cur).sole_user;
        auto step = user ? extern_step_of.find(user) : extern_step_of.end();
        if (step == extern_step_of.end() || !views_all_of(partition_, *user, *cur, *outs[i])) break;
        chain.push_back(step->second);
        last = cur = user;
      }
      if (!last) continue;
      s.allocs[i] = alloc_of(*last->meta);
      s.out_slots[i] = slots.at(last);
      for (int idx : chain) steps_[idx].skip = true;
    }
  }
}

// A view read through a chain of other views of a fresh value (a kernel's
// output, or a matmul's) is computed from that value in one step: for a
// kernel, its data pointer plus an offset; for an extern, one as_strided call
// (GPT-2's query: view, split, getitem, view, transpose of a linear's output).
void CompiledGraph::collapse_view_chains(
    const std::unordered_map<const ir::Node*, int>& extern_step_of, const SlotMap& slots) {
  std::unordered_set<int> kernel_made;  // allocated by us: laid out as planned, at offset 0
  for (auto& s : steps_)
    if (s.kernel >= 0) kernel_made.insert(s.out_slots.begin(), s.out_slots.end());
  // The fresh value whose memory `n` addresses through `depth` views, or null.
  auto root_of = [&](const ir::Node* n, int& depth) -> const ir::Node* {
    for (depth = 0;; ++depth) {
      auto slot = slots.find(n);
      if (slot != slots.end() && kernel_made.count(slot->second)) return n;
      auto step = extern_step_of.find(n);
      if (step == extern_step_of.end() || steps_[step->second].skip) return nullptr;
      if (partition_.view_fact(*n).fresh_result) return starts_its_storage(*n) ? n : nullptr;
      if (!(n = partition_.view_fact(*n).viewed)) return nullptr;
    }
  };
  // `n`'s element offset into `root`'s memory, when the two share an element type.
  auto offset_in = [&](const ir::Node& n, const ir::Node& root) -> std::optional<int64_t> {
    if (!n.meta || n.meta->requires_grad || root.meta->dtype.get() != n.meta->dtype.get())
      return std::nullopt;
    return partition_.view_offset(n, root);
  };
  for (size_t idx = 0; idx < steps_.size(); ++idx) {
    Step& s = steps_[idx];
    if (s.skip) continue;
    if (s.call) {
      int depth = 0;
      const ir::Node* root =
          partition_.view_fact(*s.node).viewed ? root_of(s.node, depth) : nullptr;
      auto off = root && depth >= 2 ? offset_in(*s.node, *root) : std::nullopt;
      if (!off) continue;
      int slot = slots.at(root);
      s.call =
          NodeCall::as_strided(*s.node, slot, s.node->meta->sizes, s.node->meta->strides, *off);
      values_.use(slot, static_cast<int>(idx));
      continue;
    }
    const auto& ins = partition_.kernels[s.kernel].inputs;
    for (size_t j = 0; j < ins.size(); ++j) {
      int depth = 0;
      const ir::Node* root =
          partition_.view_fact(*ins[j]).viewed ? root_of(ins[j], depth) : nullptr;
      auto off = root && depth >= 1 ? offset_in(*ins[j], *root) : std::nullopt;
      int64_t size = off ? item_size(*root->meta) : -1;
      if (size <= 0) continue;
      s.in_slots[j] = slots.at(root);
      s.in_offsets[j] = *off * size;
      values_.use(s.in_slots[j], static_cast<int>(idx));
    }
  }
}

// Views (and splits) whose values no step reads any more, and the graph does
// not return, are not made. Their sizes were guarded, so dropping them drops
// no error eager would raise.
void CompiledGraph::drop_unread_views() {
  std::vector<char> read(n_values_, 0);
  for (size_t idx = steps_.size(); idx-- > 0;) {
    Step& s = steps_[idx];
    if (s.skip) continue;
    if (s.call) {
      int out = s.out_slots[0];
      const ir::ViewFact& fact = partition_.view_fact(*s.node);
      bool view = fact.split || fact.viewed;
      if (view && !read[out] && !values_.is_output(out)) {
        s.skip = true;
        continue;
      }
      for (int slot : s.call->used_slots()) read[slot] = 1;
    } else {
      for (int slot : s.in_slots) read[slot] = 1;
    }
  }
}

}  // namespace tl::runtime
