#include "passes/fold_batch_norm.h"

#include <catch2/catch.hpp>

#include "test_graphs.h"

using namespace tl::ir;
using namespace tl::testing;
using tl::PyRef;
using tl::passes::fold_batch_norm;
using tl::passes::fold_batch_norm_blocker;

namespace {

// conv2d(x, w, b) -> F.batch_norm(eval) -> relu; `extra_user` also returns the conv.
struct ConvBn {
  TestGraph t;
  Node *conv = nullptr, *bn = nullptr;
  ConvBn(bool training, bool extra_user, const char* dtype = "float32") {
    Node* x = t.input("x", {2, 3, 8, 8}, dtype);
    Node* w = t.input("w", {4, 3, 3, 3}, dtype);
    Node* b = t.input("b", {4}, dtype);
    conv = t.op("torch.conv2d", {of(x), of(w), of(b)}, {2, 4, 6, 6}, dtype);
    Node* mean = t.input("mean", {4}, dtype);
    Node* var = t.input("var", {4}, dtype);
    bn = t.op("torch.nn.functional.batch_norm",
              {of(conv), of(mean), of(var), Arg::constant(PyRef::borrow(Py_None)),
               Arg::constant(PyRef::borrow(Py_None)), pybool(training), num(0.1), num(1e-5)},
              {2, 4, 6, 6}, dtype);
    Node* r = t.op("torch.relu", {of(bn)}, {2, 4, 6, 6}, dtype);
    extra_user ? t.output({r, conv}) : t.output({r});
    add_examples(t);
  }
};

bool has_target(const Graph& g, const std::string& name) {
  for (auto& n : g.nodes())
    if (n->target_name == name) return true;
  return false;
}

}  // namespace

// NOTE: the pass folds when called; the pipeline calls it only under the fold_batch_norm setting.
TEST_CASE("an eval batch norm after a single-use conv folds into it", "[passes]") {
  ConvBn c(false, false);
  CHECK(fold_batch_norm_blocker(c.t.g, *c.bn).empty());
  CHECK(fold_batch_norm(c.t.g) == 1);
  c.t.g.lint();
  CHECK_FALSE(has_target(c.t.g, "torch.nn.functional.batch_norm"));
  CHECK(has_target(c.t.g, "torch.rsqrt"));
  // relu now reads the conv, whose weight and bias are the folded nodes
  const Node* relu = c.t.g.output()->args[0].node;
  REQUIRE(relu->args[0].node == c.conv);
  CHECK(c.conv->args[1].node->target_name == "torch.mul");
  CHECK(c.conv->args[2].node->target_name == "torch.mul");  // no beta: (b - mean) * s
}

TEST_CASE("a training-mode batch norm is not folded", "[passes]") {
  ConvBn c(true, false);
  CHECK(fold_batch_norm_blocker(c.t.g, *c.bn).find("not an inference") == 0);
  CHECK(fold_batch_norm(c.t.g) == 0);
}

TEST_CASE("a batch norm whose conv output has another user is not folded", "[passes]") {
  ConvBn c(false, true);
  CHECK(fold_batch_norm_blocker(c.t.g, *c.bn) == "the convolution's output has other users");
  CHECK(fold_batch_norm(c.t.g) == 0);
}

TEST_CASE("a batch norm over integer or mixed dtypes is not folded", "[passes]") {
  ConvBn c(false, false);
  c.t.g.placeholders()[3]->meta->dtype = resolve("torch.float64");  // running mean
  CHECK(fold_batch_norm_blocker(c.t.g, *c.bn) == "dtypes differ or are not f32/f64/f16/bf16");
}

TEST_CASE("a batch norm tracked by autograd is not folded", "[passes]") {
  ConvBn c(false, false);
  c.conv->meta->requires_grad = true;
  CHECK(fold_batch_norm_blocker(c.t.g, *c.bn).find("autograd") == 0);
}

TEST_CASE("a batch norm after a non-convolution is not folded", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {2, 4, 5, 5});
  Node* mean = t.input("mean", {4});
  Node* var = t.input("var", {4});
  Node* bn = t.op("torch.nn.functional.batch_norm", {of(x), of(mean), of(var)}, {2, 4, 5, 5});
  t.output({bn});
  CHECK(fold_batch_norm_blocker(t.g, *bn) == "its input is not a convolution");
}
