#include "passes/partition_joint.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.h"
#include "ir/effects.h"
#include "passes/graph_info.h"
#include "passes/graph_rewrite.h"
#include "passes/lowering.h"

namespace tl::passes {
namespace {

using NodeSet = std::unordered_set<const ir::Node*>;

// Every node `roots` depend on, the roots included.
NodeSet ancestors(const std::vector<const ir::Node*>& roots) {
  NodeSet seen;
  std::vector<const ir::Node*> work = roots;
  while (!work.empty()) {
    const ir::Node* n = work.back();
    work.pop_back();
    if (!seen.insert(n).second) continue;
    for (const ir::Node* in : node_inputs(*n)) work.push_back(in);
  }
  return seen;
}

std::vector<const ir::Node*> output_nodes(const ir::Graph& g, size_t from, size_t to) {
  std::vector<const ir::Node*> out;
  const auto& args = g.output()->args;
  for (size_t i = from; i < to && i < args.size(); ++i) {
    if (args[i].kind != ir::Arg::Kind::Node)
      TL_THROW(Unsupported) << "training: joint graph output " << i << " is not a tensor";
    out.push_back(args[i].node);
  }
  return out;
}

int64_t bytes_of(const ir::Node& n) {
  if (!n.meta) return 0;
  int64_t count = 1;
  for (int64_t s : n.meta->sizes) count *= s;
  PyRef size = PyRef::steal(PyObject_GetAttrString(n.meta->dtype.get(), "itemsize"));
  if (!size) throw PythonError();
  return count * PyLong_AsLongLong(size.get());
}

// NOTE: only values a kernel recomputes for free from what it reads anyway:
// pointwise ops and views. Matmuls, reductions, random and extern ops are
// always saved (as AOTAutograd's partitioner bans them from recomputation).
bool cheap(const ir::Node& n, const GraphInfo& info) {
  if (n.op == ir::OpKind::Placeholder || !n.meta || is_barrier(n)) return false;
  std::optional<OpLowering> l = lower_node(n, info);
  return l && (l->kind == OpLowering::Kind::Pointwise || l->kind == OpLowering::Kind::View ||
               l->kind == OpLowering::Kind::StridedView);
}

// A reduction whose result is no smaller than a quarter of what it reads
// (log_softmax and softmax normalise rows: their result is their input's
// size), which AOTAutograd's partitioner also lets backward recompute (it bans
// only reductions whose result is 4x smaller than their input). NOTE: a cross
// entropy over bf16 logits otherwise saves its float32 log_softmax: twice the
// logits' bytes (GPT-2 8x512: 822 MB), where the logits are stored anyway.
bool normalizing_reduction(const ir::Node& n, const GraphInfo& info) {
  if (n.op == ir::OpKind::Placeholder || !n.meta || is_barrier(n)) return false;
  std::optional<OpLowering> l = lower_node(n, info);
  if (!l || l->kind != OpLowering::Kind::Reduction) return false;
  int64_t read = 0;
  for (const ir::Node* in : node_inputs(n)) read += in->meta ? bytes_of(*in) : 0;
  return bytes_of(n) * 4 >= read;
}

// The cheap forward values behind `n` that recomputing n needs, back to values
// backward has already (`saved`, or in `bwd`: recomputed) or not cheap (then inputs
// of the recomputation); `deep`: through up to kMaxChain values, else n alone. Empty
// if an input is not a tensor.
constexpr size_t kMaxChain = 8;
// How many replaced values deep a recomputation may read (see choose_saved). NOTE: 4: GPT-2's
// tanh GELU is recomputed through 4 (bench/saved_bytes.py: 2 saves 4.2 MB more of 37 in bf16);
// a bound, not the depth, is what matters: unbounded, the chain ran through every block.
constexpr int kMaxReplacedLinks = 4;
std::vector<const ir::Node*> recompute_chain(const ir::Node* n, const NodeSet& saved,
                                             const NodeSet& bwd, const GraphInfo& info, bool deep,
                                             NodeSet& frontier) {
  std::vector<const ir::Node*> chain{n};
  NodeSet in_chain{n};
  for (size_t k = 0; k < chain.size(); ++k)
    for (const ir::Node* in : node_inputs(*chain[k])) {
      if (!in->meta) return {};
      if (in_chain.count(in) || frontier.count(in)) continue;
      if (!deep || saved.count(in) || bwd.count(in) || chain.size() >= kMaxChain ||
          !cheap(*in, info)) {
        frontier.insert(in);
      } else {
        chain.push_back(in);
        in_chain.insert(in);
      }
    }
  for (const ir::Node* c : chain) frontier.erase(c);
  return chain;
}

// True when an op that is not cheap (a matmul) reads `n` in the forward,
// directly or through views: the forward stores n anyway, so saving it costs
// no bandwidth, and recomputing it in backward would store it once more.
bool read_by_extern(const ir::Node* n, const NodeSet& fwd, const GraphInfo& info) {
  for (const ir::Node* u : info.users_of(n)) {
    if (!fwd.count(u) || u->op == ir::OpKind::Output) continue;
    std::optional<OpLowering> l = lower_node(*u, info);
    if (!l || l->kind == OpLowering::Kind::Reduction) return true;
    bool view = l->kind == OpLowering::Kind::View || l->kind == OpLowering::Kind::StridedView;
    if (view && read_by_extern(u, fwd, info)) return true;
  }
  return false;
}

// True when saving forward value `n` stores nothing the forward does not store
// already: an input, a matmul's or reduction's result, a pointwise value read by
// one, or a view of such a value.
bool free_to_save(const ir::Node* n, const NodeSet& fwd, const GraphInfo& info) {
  if (n->op == ir::OpKind::Placeholder) return true;
  std::optional<OpLowering> l = lower_node(*n, info);
  if (!l || l->kind == OpLowering::Kind::Reduction) return true;
  if (l->kind == OpLowering::Kind::Pointwise) return read_by_extern(n, fwd, info);
  return !l->inputs.empty() && free_to_save(l->inputs[0], fwd, info);
}

// The forward values backward reads, then (recompute) greedily replaces a
// cheap one by the inputs of its recomputation while that stores no more
// bytes: its own inputs, or, for a value the forward stores only to save it,
// those of a chain of cheap values behind it (a silu's bf16 output is
// recomputed from the saved gate through its f32 cast, sigmoid and product,
// where saving the f32 product alone would store more).
// `written`: the primals the forward writes back into (input mutations): backward never
// recomputes from one, since after the forward it holds the new value, not the one the forward
// read (a buffer's `add_(1)` before `x * (buf * 2).exp()` would be added twice).
std::vector<const ir::Node*> choose_saved(const ir::Graph& joint, const NodeSet& fwd, NodeSet& bwd,
                                          bool recompute, bool matmul_inputs,
                                          const NodeSet& written,
                                          std::vector<const ir::Node*>& recomputed) {
  GraphInfo info = analyze_graph(joint);
  NodeSet saved;
  for (auto& n : joint.nodes())
    if (bwd.count(n.get()))
      for (const ir::Node* in : node_inputs(*n))
        if (fwd.count(in)) saved.insert(in);
  NodeSet replaced;  // each value is replaced once at most, so the loop ends
  // Replaced value -> how many replaced values its recomputation reads through (0: it reads
  // saved ones only).
  std::unordered_map<const ir::Node*, int> replaced_links;
  const NodeSet kNone;
  for (bool changed = recompute; changed;) {
    changed = false;
    for (auto& up : joint.nodes()) {
      const ir::Node* n = up.get();
      if (!saved.count(n) || replaced.count(n)) continue;
      // NOTE: a normalizing reduction costs a pass over its inputs to recompute: only
      // replaced by cheap values behind it when that stores fewer bytes (its input's
      // cast and reshapes fuse into the recomputation: passes/move_reshapes.h).
      const bool normalizing = !cheap(*n, info) && normalizing_reduction(*n, info);
      if (!normalizing && !cheap(*n, info)) continue;
      std::vector<const ir::Node*> best;
      NodeSet best_frontier;
      int best_links = 0;
      int64_t best_added = bytes_of(*n) + (normalizing ? 0 : 1);
      // NOTE: a value the forward stores anyway (a matmul's input) is only
      // replaced by values it stores anyway too: else the forward would store
      // more (SwiGLU's silu output beside the product the down projection reads).
      // Through a chain only when backward has every input of it already: the
      // value is then a product of saved ones (the dropped attention probabilities
      // beside the softmax and the mask, GELU's output beside its input), which
      // AOTAutograd's min cut recomputes too, where saving it holds one more
      // tensor a layer from the forward to its backward.
      const bool pointwise =
          !normalizing && lower_node(*n, info)->kind == OpLowering::Kind::Pointwise;
      const bool anyway = pointwise && read_by_extern(n, fwd, info);
      for (bool deep : {false, true}) {
        if (deep && (!(pointwise || normalizing) || (anyway && !matmul_inputs))) continue;
        // NOTE: values backward recomputes anyway cost nothing to read there.
        const NodeSet& recomputed_already = anyway && !matmul_inputs ? kNone : bwd;
        NodeSet frontier;
        std::vector<const ir::Node*> chain =
            recompute_chain(n, saved, recomputed_already, info, deep, frontier);
        if (chain.empty()) continue;
        if (std::any_of(frontier.begin(), frontier.end(),
                        [&](const ir::Node* in) { return written.count(in) > 0; }))
          continue;
        // NOTE: a value saved and then replaced is made where backward first reads it;
        // recomputing n from it makes it at n's first reader instead. A few such links stay
        // within a layer (the dropped probabilities from the replaced dropout scale, GELU's
        // pieces); an unbounded chain of them made every residual sum of a ViT from the one
        // before it: backward began by remaking all of them in one kernel (ViT-B: 25 float32
        // [B, 197, 768] outputs, held to their layers' backward; an NVRTC compile growing
        // with the block count).
        int links = 0;
        for (const ir::Node* in : frontier) {
          auto it = replaced_links.find(in);
          if (it != replaced_links.end()) links = std::max(links, it->second + 1);
        }
        if (links > kMaxReplacedLinks) continue;
        int64_t added = 0, stored = 0;  // stored: bytes the forward would store only to save
        for (const ir::Node* in : frontier) {
          if (saved.count(in) || recomputed_already.count(in)) continue;
          added += bytes_of(*in);
          if ((anyway || normalizing) && !free_to_save(in, fwd, info)) stored += bytes_of(*in);
        }
        if (deep && anyway && added > 0) continue;
        if (added < best_added && stored == 0) {
          best_added = added;
          best_links = links;
          best = std::move(chain);
          best_frontier = std::move(frontier);
        }
      }
      if (best.empty()) continue;
      saved.erase(n);
      replaced.insert(n);
      replaced_links[n] = best_links;
      for (const ir::Node* in : best_frontier)
        if (!bwd.count(in)) saved.insert(in);
      for (const ir::Node* c : best)
        if (bwd.insert(c).second) recomputed.push_back(c);
      changed = true;
    }
  }
  std::vector<const ir::Node*> ordered;
  for (auto& n : joint.nodes())
    if (saved.count(n.get())) {
      if (!n->meta)
        TL_THROW(Unsupported) << "training: backward reads the forward value " << n->name
                              << ", which is not a tensor";
      ordered.push_back(n.get());
    }
  return ordered;
}

// The backward nodes (`bwd` less the saved values) in the order autograd runs them: each node
// that reads a tangent (directly or through another backward node), or has a visible effect, in
// joint order, preceded by the nodes it needs that are not placed yet, in joint order; nodes
// that need no tangent (recomputed forward values, views and casts of saved ones) so run just
// before their first reader. NOTE: in joint order those come first, before the first gradient:
// a value recomputed for the last layer's backward was made at the start and held through every
// other layer's (GPT-2 8x512 on an H100: 36 blocks of 48 MB, three a layer, live at the
// backward's peak beside the logits' gradient; the step's peak 5839 MB, 4520 MB placed so),
// where AOTAutograd's partitioner (reordering_to_mimic_autograd_engine) places them beside
// their use.
std::vector<const ir::Node*> backward_order(const ir::Graph& joint, const NodeSet& bwd,
                                            const NodeSet& saved, const NodeSet& tangents,
                                            const std::vector<const ir::Node*>& grads) {
  std::unordered_map<const ir::Node*, size_t> position;
  NodeSet needs_tangent;
  for (auto& n : joint.nodes()) {
    position[n.get()] = position.size();
    if (!bwd.count(n.get()) || saved.count(n.get())) continue;
    for (const ir::Node* in : node_inputs(*n))
      if (tangents.count(in) || needs_tangent.count(in)) needs_tangent.insert(n.get());
  }
  std::vector<const ir::Node*> order;
  NodeSet placed;
  auto place = [&](const ir::Node* root) {
    std::vector<const ir::Node*> pending, work{root};
    NodeSet seen;
    while (!work.empty()) {
      const ir::Node* n = work.back();
      work.pop_back();
      if (!bwd.count(n) || saved.count(n) || placed.count(n) || !seen.insert(n).second) continue;
      pending.push_back(n);
      for (const ir::Node* in : node_inputs(*n)) work.push_back(in);
    }
    std::sort(pending.begin(), pending.end(),
              [&](const ir::Node* a, const ir::Node* b) { return position[a] < position[b]; });
    for (const ir::Node* n : pending) {
      placed.insert(n);
      order.push_back(n);
    }
  };
  for (auto& n : joint.nodes())
    if (needs_tangent.count(n.get()) || (bwd.count(n.get()) && ir::visible_effect(*n)))
      place(n.get());
  for (const ir::Node* g : grads) place(g);      // NOTE: gradients no tangent reaches
  for (auto& n : joint.nodes()) place(n.get());  // NOTE: none left; kept for safety
  return order;
}

class Copier {
 public:
  explicit Copier(ir::Graph& dst) : dst_(dst) {}

  ir::Node* input(const ir::Node& n, int index) {
    ir::Node* c = dst_.add_placeholder(n.name, ir::Source::local(index, n.name));
    finish(n, c);
    return c;
  }
  void copy(const ir::Node& n) {
    std::vector<ir::Arg> args;
    for (const ir::Arg& a : n.args) args.push_back(arg(a));
    std::vector<std::pair<std::string, ir::Arg>> kwargs;
    for (const auto& [k, v] : n.kwargs) kwargs.emplace_back(k, arg(v));
    ir::Node* c = n.op == ir::OpKind::CallMethod
                      ? dst_.add_call_method(n.target_name, std::move(args), std::move(kwargs))
                      : dst_.add_call_function(n.target, std::move(args), std::move(kwargs));
    c->target_name = n.target_name;
    finish(n, c);
  }
  ir::Arg arg(const ir::Arg& a) const {
    ir::Arg out = a;
    if (a.kind == ir::Arg::Kind::Node) {
      auto it = map_.find(a.node);
      TL_CHECK(it != map_.end()) << "partition_joint: " << a.node->name << " was not copied";
      out.node = it->second;
    }
    for (ir::Arg& item : out.items) item = arg(item);
    return out;
  }
  ir::Arg of(const ir::Node* n) const { return arg(ir::Arg::of_node(const_cast<ir::Node*>(n))); }

  // `torch.zeros(n's sizes, dtype=, device=)` in place of placeholder n.
  void zeros(const ir::Node& n) {
    TL_CHECK(n.meta) << "partition_joint: tangent " << n.name << " is not a tensor";
    std::vector<ir::Arg> sizes;
    for (int64_t s : n.meta->sizes) {
      PyRef v = PyRef::steal(PyLong_FromLongLong(s));
      if (!v) throw PythonError();
      sizes.push_back(ir::Arg::constant(std::move(v)));
    }
    std::vector<std::pair<std::string, ir::Arg>> kwargs;
    kwargs.emplace_back("dtype", ir::Arg::constant(n.meta->dtype));
    kwargs.emplace_back("device", ir::Arg::constant(n.meta->device));
    std::vector<ir::Arg> args;
    args.push_back(ir::Arg::list(std::move(sizes)));
    ir::Node* c = dst_.add_call_function(torch_fn("zeros"), std::move(args), std::move(kwargs));
    c->target_name = "torch.zeros";
    finish(n, c);
    zero_.insert(c);
  }
  // Maps n to what `a` maps to (no node): n's value is a's.
  void same_as(const ir::Node& n, const ir::Node* a) { map_[&n] = map_.at(a); }
  bool is_zero(const ir::Node* copied) const { return zero_.count(copied) > 0; }
  ir::Node* mapped(const ir::Node* n) const { return map_.at(n); }

 private:
  void finish(const ir::Node& from, ir::Node* to) {
    to->meta = from.meta;
    to->example = from.example;
    to->location = from.location;
    map_[&from] = to;
  }
  ir::Graph& dst_;
  std::unordered_map<const ir::Node*, ir::Node*> map_;
  NodeSet zero_;  // zeros() nodes of the copy
};

// `a + b` (torch.add or Tensor.add, no alpha) where one operand is a zero of
// the copy and the other has the sum's sizes and dtype: that other operand.
const ir::Node* sum_with_zero(const ir::Node& n, const Copier& c) {
  if (n.op == ir::OpKind::Placeholder || !n.meta || n.args.size() != 2 || !n.kwargs.empty())
    return nullptr;
  if (n.target_name != "torch.add" && !(n.op == ir::OpKind::CallMethod && n.target_name == "add"))
    return nullptr;
  for (int k : {0, 1}) {
    const ir::Arg &z = n.args[k], &other = n.args[1 - k];
    if (z.kind != ir::Arg::Kind::Node || other.kind != ir::Arg::Kind::Node) return nullptr;
    if (!c.is_zero(c.mapped(z.node)) || !other.node->meta) continue;
    const ir::TensorMeta &m = *other.node->meta, &out = *n.meta;
    if (m.sizes == out.sizes && m.dtype.get() == out.dtype.get()) return other.node;
  }
  return nullptr;
}

}  // namespace

JointSplit partition_joint(const ir::Graph& joint, size_t num_primals, size_t num_forward_outputs,
                           bool recompute, bool matmul_inputs,
                           const std::vector<size_t>& mutated_primals) {
  TL_CHECK(joint.output()) << "partition_joint: the joint graph has no output";
  std::vector<ir::Node*> inputs = joint.placeholders();
  TL_CHECK(inputs.size() >= num_primals) << "partition_joint: fewer inputs than primals";
  const size_t num_outputs = joint.output()->args.size();
  std::vector<const ir::Node*> fwd_outs = output_nodes(joint, 0, num_forward_outputs);
  std::vector<const ir::Node*> grads = output_nodes(joint, num_forward_outputs, num_outputs);

  NodeSet fwd = ancestors(fwd_outs);
  for (size_t i = 0; i < num_primals; ++i) fwd.insert(inputs[i]);
  // NOTE: a tuple-valued forward op's items stay with it, so only tensors cross.
  for (auto& n : joint.nodes())
    for (const ir::Node* in : node_inputs(*n))
      if (fwd.count(in) && !in->meta && n->target_name == "operator.getitem") fwd.insert(n.get());
  NodeSet bwd;
  for (const ir::Node* n : ancestors(grads))
    if (!fwd.count(n)) bwd.insert(n);
  TL_CHECK(mutated_primals.size() <= fwd_outs.size())
      << "partition_joint: " << mutated_primals.size() << " input mutations for " << fwd_outs.size()
      << " forward outputs";
  const size_t first_mutation = fwd_outs.size() - mutated_primals.size();
  NodeSet written;
  for (size_t i : mutated_primals) {
    TL_CHECK(i < num_primals) << "partition_joint: mutated input " << i << " is no primal";
    written.insert(inputs[i]);
  }

  JointSplit split;
  std::vector<const ir::Node*> recomputed;
  std::vector<const ir::Node*> saved =
      choose_saved(joint, fwd, bwd, recompute, matmul_inputs, written, recomputed);
  for (const ir::Node* n : saved) split.saved.push_back(n->name);
  for (const ir::Node* n : recomputed) split.recomputed.push_back(n->name);

  split.forward = std::make_shared<ir::Graph>();
  Copier f(*split.forward);
  int primal_index = 0;
  for (auto& n : joint.nodes()) {
    if (n->op == ir::OpKind::Output || !fwd.count(n.get())) continue;
    if (n->op == ir::OpKind::Placeholder) {
      f.input(*n, primal_index++);
    } else {
      f.copy(*n);
    }
  }
  // NOTE: the new values of mutated inputs are written back by the forward itself, last (as
  // eager's kernels update running statistics in place): passes/store_in_place.h then has the
  // kernel that computes one store it straight into the input, with no copy and no new buffer.
  for (size_t k = 0; k < mutated_primals.size(); ++k) {
    const ir::Node* value = fwd_outs[first_mutation + k];
    const ir::Node* target = inputs[mutated_primals[k]];
    if (value == target) continue;
    ir::Node* c = split.forward->add_call_method("copy_", {f.of(target), f.of(value)}, {});
    c->meta = target->meta;
  }
  std::vector<ir::Arg> outs;
  for (size_t k = 0; k < first_mutation; ++k) outs.push_back(f.of(fwd_outs[k]));
  for (const ir::Node* n : saved) outs.push_back(f.of(n));
  split.forward->set_output(std::move(outs));

  split.backward = std::make_shared<ir::Graph>();
  Copier b(*split.backward);
  int index = 0;
  for (const ir::Node* n : saved) b.input(*n, index++);
  NodeSet tangents;
  for (size_t i = num_primals; i < inputs.size(); ++i) {
    b.input(*inputs[i], index++);
    tangents.insert(inputs[i]);
  }
  const NodeSet saved_set(saved.begin(), saved.end());
  for (const ir::Node* n : backward_order(joint, bwd, saved_set, tangents, grads))
    if (n->op != ir::OpKind::Placeholder) b.copy(*n);
  std::vector<ir::Arg> grad_args;
  for (const ir::Node* n : grads) grad_args.push_back(b.of(n));
  split.backward->set_output(std::move(grad_args));
  split.forward->lint();
  split.backward->lint();
  return split;
}

std::shared_ptr<ir::Graph> with_zero_tangents(const ir::Graph& backward, size_t num_saved,
                                              const std::vector<bool>& zero) {
  std::vector<ir::Node*> inputs = backward.placeholders();
  TL_CHECK(inputs.size() == num_saved + zero.size())
      << "with_zero_tangents: " << inputs.size() << " inputs for " << num_saved << " saved and "
      << zero.size() << " tangents";
  auto g = std::make_shared<ir::Graph>();
  Copier c(*g);
  int index = 0;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (i < num_saved || !zero[i - num_saved]) c.input(*inputs[i], index++);
  for (size_t i = num_saved; i < inputs.size(); ++i)
    if (zero[i - num_saved]) c.zeros(*inputs[i]);
  for (auto& n : backward.nodes()) {
    if (n->op == ir::OpKind::Output || n->op == ir::OpKind::Placeholder) continue;
    if (const ir::Node* other = sum_with_zero(*n, c)) {
      c.same_as(*n, other);
    } else {
      c.copy(*n);
    }
  }
  std::vector<ir::Arg> outs;
  for (const ir::Arg& a : backward.output()->args) outs.push_back(c.arg(a));
  g->set_output(std::move(outs));
  g->lint();
  return g;
}

}  // namespace tl::passes
