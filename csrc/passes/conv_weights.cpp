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

// The same strides where they matter: an axis of size 1 is never stepped over.
bool same_layout(const ir::TensorMeta& m, const std::vector<int64_t>& strides) {
  for (size_t d = 0; d < m.sizes.size(); ++d)
    if (m.sizes[d] > 1 && m.strides[d] != strides[d]) return false;
  return true;
}

// NOTE: not also channels-last once size-1 axes are ignored (a depthwise weight, O x 1 x k x
// k): torch calls that channels-last already and neither it nor contiguous() copies it.
bool contiguous_kxk(const ir::TensorMeta& w) {
  return w.sizes.size() == 4 && w.sizes[2] * w.sizes[3] > 1 &&
         w.strides == contiguous_strides(w.sizes) &&
         !same_layout(w, channels_last_strides(w.sizes));
}

// A graph input the caller reads from an object (a module's parameter, a
// global), which stays the same tensor from call to call; an argument does not.
bool read_from_an_object(const Node& n) {
  if (n.op != ir::OpKind::Placeholder || !n.source) return false;
  ir::SourceKind k = n.source->kind;
  return k == ir::SourceKind::Attr || k == ir::SourceKind::Item || k == ir::SourceKind::Global ||
         k == ir::SourceKind::Deref;
}

// A channels-last convolution of a contiguous k x k weight that is a graph input
// (`from_an_object`: read from a module or global, not an argument).
bool eligible(const Node& conv, const Node** weight, bool from_an_object) {
  if (!is_conv4d(conv)) return false;
  const Node* in = tensor_arg(conv, 0, "input");
  const Node* w = tensor_arg(conv, 1, "weight");
  *weight = w;
  if (!w || w->op != ir::OpKind::Placeholder || !w->meta) return false;
  if (from_an_object && !read_from_an_object(*w)) return false;
  return contiguous_kxk(*w->meta) && strictly_channels_last(*in->meta) &&
         strictly_channels_last(*conv.meta);
}

bool ends_with(const std::string& s, const char* tail) {
  std::string t = tail;
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

bool not_transposed(const Node& n, size_t pos) {
  const ir::Arg* tr = find_arg(n, pos, "transposed");
  return tr && tr->kind == ir::Arg::Kind::Const && tr->value.get() == Py_False;
}

bool four_d(const Node* t) { return t && t->meta && t->meta->sizes.size() == 4; }

// The ATen forms a training graph's halves hold (torchlite/_training.py): the forward's
// `aten.convolution(input, weight, bias, stride, padding, dilation, transposed, ...)` and the
// backward's `aten.convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
// dilation, transposed, ...)`, whose data gradient reads the weight as the forward does (and
// whose weight gradient's layout follows the channels-last input either way; a result laid out
// otherwise than its metadata is copied by the runtime: runtime/compiled_graph.cpp).
bool eligible_aten(const Node& n, const Node** weight, bool from_an_object) {
  if (n.op != ir::OpKind::CallFunction) return false;
  std::vector<const Node*> channels_last;
  const Node* w = nullptr;
  if (ends_with(n.target_name, "aten::convolution")) {
    if (!not_transposed(n, 6) || !n.meta) return false;
    w = tensor_arg(n, 1, "weight");
    // NOTE: not the result: its metadata is the meta kernel's (contiguous on the CPU), while
    // the backend returns channels-last for a channels-last input whatever the weight's layout.
    channels_last = {tensor_arg(n, 0, "input")};
  } else if (ends_with(n.target_name, "aten::convolution_backward")) {
    if (!not_transposed(n, 7)) return false;
    w = tensor_arg(n, 2, "weight");
    channels_last = {tensor_arg(n, 0, "grad_output"), tensor_arg(n, 1, "input")};
  } else {
    return false;
  }
  *weight = w;
  if (!four_d(w) || w->op != ir::OpKind::Placeholder) return false;
  if (from_an_object && !read_from_an_object(*w)) return false;
  for (const Node* t : channels_last)
    if (!four_d(t) || !strictly_channels_last(*t->meta)) return false;
  return contiguous_kxk(*w->meta);
}

std::vector<std::pair<Node*, const Node*>> eligible_convs(ir::Graph& graph, bool from_an_object) {
  std::vector<std::pair<Node*, const Node*>> convs;  // (conv, its weight), in graph order
  for (auto& n : graph.nodes()) {
    const Node* w = nullptr;
    // NOTE: the ATen forms for the default path only: the cache serves inference graphs.
    if (eligible(*n, &w, from_an_object) || (!from_an_object && eligible_aten(*n, &w, false)))
      convs.emplace_back(n.get(), w);
  }
  return convs;
}

PyRef& channels_last_weight() {
  static PyRef* fn = new PyRef();  // NOTE: kept for the process
  return *fn;
}

}  // namespace

void set_channels_last_weight(PyRef fn) { channels_last_weight() = std::move(fn); }

int cache_conv_weights(ir::Graph& graph) {
  if (tracks_grad(graph)) return 0;
  auto convs = eligible_convs(graph, /*from_an_object=*/true);
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

int convert_conv_weights(ir::Graph& graph) {
  if (tracks_grad(graph)) return 0;
  auto convs = eligible_convs(graph, /*from_an_object=*/false);
  if (convs.empty()) return 0;
  // NOTE: the copies go before the graph's first computation, one after the other, so their
  // kernels are neighbours no other step separates (passes/group_kernels.h groups only a window
  // of consecutive independent kernels).
  const Node* first = nullptr;
  for (auto& n : graph.nodes())
    if (n->op != ir::OpKind::Placeholder) {
      first = n.get();
      break;
    }
  TL_CHECK(first) << "a graph with a convolution has no node after its inputs";
  std::unordered_map<const Node*, Node*> copies;  // weight -> its copy (shared weights)
  for (auto& [conv, w] : convs) {
    Node*& copy = copies[w];
    if (!copy) {
      copy = insert_call(graph, first, {}, "contiguous", {ir::Arg::of_node(const_cast<Node*>(w))},
                         {{"memory_format", ir::Arg::constant(torch_fn("channels_last"))}},
                         w->meta->device);
      // NOTE: a weight torch already calls channels-last (excluded above) would come back as
      // itself, a no-op.
      TL_CHECK(same_layout(*copy->meta, channels_last_strides(copy->meta->sizes)) &&
               !same_layout(*copy->meta, w->meta->strides))
          << "contiguous(memory_format=channels_last) of a conv weight is not channels-last";
    }
    replace_uses({conv}, w, copy);
  }
  return static_cast<int>(convs.size());
}

}  // namespace tl::passes
