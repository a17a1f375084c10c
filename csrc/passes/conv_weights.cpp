#include "passes/conv_weights.h"

#include <unordered_map>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "passes/channels_last.h"
#include "passes/graph_rewrite.h"

namespace tl::passes {
namespace {

using ir::Node;

// Channels-last and not also contiguous: a tensor with one channel or one
// pixel is both, and torch's choice of layout for it is not this pass's to guess.
bool strictly_channels_last(const ir::TensorMeta& m) {
  return m.sizes.size() == 4 && m.strides == channels_last_strides(m.sizes) &&
         m.strides != contiguous_strides(m.sizes);
}

bool contiguous_kxk(const ir::TensorMeta& w) {
  return w.sizes.size() == 4 && w.sizes[2] * w.sizes[3] > 1 &&
         w.strides == contiguous_strides(w.sizes) && w.strides != channels_last_strides(w.sizes);
}

// A graph input the caller reads from an object (a module's parameter, a
// global), which stays the same tensor from call to call; an argument does not.
bool read_from_an_object(const Node& n) {
  if (n.op != ir::OpKind::Placeholder || !n.source) return false;
  ir::SourceKind k = n.source->kind;
  return k == ir::SourceKind::Attr || k == ir::SourceKind::Item || k == ir::SourceKind::Global ||
         k == ir::SourceKind::Deref;
}

bool eligible(const Node& conv, const Node** weight) {
  if (!is_conv4d(conv)) return false;
  const Node* in = tensor_arg(conv, 0, "input");
  const Node* w = tensor_arg(conv, 1, "weight");
  *weight = w;
  return read_from_an_object(*w) && contiguous_kxk(*w->meta) && strictly_channels_last(*in->meta) &&
         strictly_channels_last(*conv.meta);
}

PyRef& channels_last_weight() {
  static PyRef* fn = new PyRef();  // NOTE: kept for the process
  return *fn;
}

}  // namespace

void set_channels_last_weight(PyRef fn) { channels_last_weight() = std::move(fn); }

int cache_conv_weights(ir::Graph& graph) {
  if (tracks_grad(graph)) return 0;
  std::vector<std::pair<Node*, const Node*>> convs;  // (conv, its weight), in graph order
  for (auto& n : graph.nodes()) {
    const Node* w = nullptr;
    if (eligible(*n, &w)) convs.emplace_back(n.get(), w);
  }
  if (convs.empty()) return 0;
  const PyRef& fn = channels_last_weight();
  TL_CHECK(fn) << "torchlite._C.channels_last_weight was not registered (passes/conv_weights.h)";
  std::unordered_map<const Node*, Node*> copies;  // weight -> its cached copy (shared weights)
  for (auto& [conv, w] : convs) {
    Node*& copy = copies[w];
    // NOTE: before the first reader, so every convolution sharing the weight sees the copy.
    if (!copy)
      copy = insert_call(graph, conv, fn, "", {ir::Arg::of_node(const_cast<Node*>(w))}, {},
                         w->meta->device);
    replace_uses({conv}, w, copy);
  }
  return static_cast<int>(convs.size());
}

}  // namespace tl::passes
