#include "passes/conv_bias.h"

#include <string>
#include <vector>

#include "core/errors.h"
#include "passes/graph_info.h"
#include "passes/graph_rewrite.h"

namespace tl::passes {
namespace {

using ir::Arg;
using ir::Node;

bool is_convolution(const Node& n) {
  if (n.op != ir::OpKind::CallFunction) return false;
  const std::string& t = n.target_name;
  for (const char* name : {"torch.conv1d", "torch.conv2d", "torch.conv3d", "torch.conv_transpose1d",
                           "torch.conv_transpose2d", "torch.conv_transpose3d", "torch.convolution"})
    if (t == name) return true;
  return false;
}

// The graph's users of `n` in graph order (the output node included).
std::vector<Node*> users_of(const ir::Graph& g, const Node* n) {
  std::vector<Node*> out;
  for (auto& u : g.nodes())
    for (const Node* in : node_inputs(*u))
      if (in == n) {
        out.push_back(u.get());
        break;
      }
  return out;
}

PyRef bias_shape(int64_t channels, size_t spatial_dims) {
  PyRef shape = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(spatial_dims + 1)));
  if (!shape) throw PythonError();
  for (size_t i = 0; i <= spatial_dims; ++i) {
    PyObject* v = PyLong_FromLongLong(i == 0 ? channels : 1);
    if (!v) throw PythonError();
    PyTuple_SET_ITEM(shape.get(), static_cast<Py_ssize_t>(i), v);
  }
  return shape;
}

}  // namespace

int split_convolution_bias(ir::Graph& g) {
  std::vector<Node*> convs;
  for (auto& n : g.nodes())
    if (is_convolution(*n)) convs.push_back(n.get());
  int split = 0;
  for (Node* conv : convs) {
    const Node* b = tensor_arg(*conv, 2, "bias");
    const Node* w = tensor_arg(*conv, 1, "weight");
    if (!b || !w || !conv->meta || conv->meta->requires_grad) continue;
    if (b->meta->sizes.size() != 1 || w->meta->sizes.size() < 3) continue;
    if (b->meta->dtype.get() != conv->meta->dtype.get()) continue;
    std::vector<Node*> users = users_of(g, conv);
    if (users.empty()) continue;
    // NOTE: the convolution keeps its node, meta and example: a bias changes
    // neither its output's sizes nor its strides.
    Arg* bias = find_arg(*conv, 2, "bias");
    TL_CHECK(bias) << "convolution %" << conv->name << " lost its bias argument";
    *bias = Arg::constant(PyRef::borrow(Py_None));
    const PyRef& dev = conv->meta->device;
    Node* bias_node = const_cast<Node*>(b);
    Node* column =
        insert_call(g, users[0], {}, "view",
                    {Arg::of_node(bias_node),
                     Arg::constant(bias_shape(b->meta->sizes[0], w->meta->sizes.size() - 2))},
                    {}, dev);
    Node* sum = insert_call(g, users[0], torch_fn("add"), "",
                            {Arg::of_node(conv), Arg::of_node(column)}, {}, dev);
    // NOTE: the users were traced against the convolution's strides; an add
    // laid out otherwise (not seen: TensorIterator follows a dense operand)
    // would change what they read, so the bias goes back into the call.
    if (sum->meta->sizes != conv->meta->sizes || sum->meta->strides != conv->meta->strides ||
        sum->meta->dtype.get() != conv->meta->dtype.get()) {
      g.erase(sum);
      g.erase(column);
      *find_arg(*conv, 2, "bias") = Arg::of_node(bias_node);
      continue;
    }
    replace_uses(users, conv, sum);
    ++split;
  }
  return split;
}

}  // namespace tl::passes
