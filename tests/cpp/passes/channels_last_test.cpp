#include "passes/channels_last.h"

#include <catch2/catch.hpp>
#include <cstdlib>

#include "test_graphs.h"

using namespace tl::ir;
using namespace tl::testing;
using tl::PyRef;

namespace {

// x -> conv -> relu -> conv [-> view(2, -1)] -> output
struct TwoConvs {
  TestGraph t;
  Node *conv1 = nullptr, *conv2 = nullptr;
  explicit TwoConvs(bool view_at_end) {
    Node* x = t.input("x", {2, 3, 8, 8});
    Node* w1 = t.input("w1", {4, 3, 3, 3});
    Node* w2 = t.input("w2", {4, 4, 3, 3});
    conv1 = t.op("torch.conv2d", {of(x), of(w1)}, {2, 4, 6, 6});
    Node* r = t.op("torch.relu", {of(conv1)}, {2, 4, 6, 6});
    conv2 = t.op("torch.conv2d", {of(r), of(w2)}, {2, 4, 4, 4});
    Node* out = view_at_end ? t.op(".view", {of(conv2), integer(2), integer(-1)}, {2, 64}) : conv2;
    t.output({out});
    add_examples(t);
  }
};

}  // namespace

TEST_CASE("two convs run channels-last and the output is cloned back to eager strides",
          "[passes]") {
  TwoConvs c(false);
  CHECK(tl::passes::channels_last(c.t.g, true) == 2);
  c.t.g.lint();
  const Node* in1 = c.conv1->args[0].node;
  CHECK(in1->target_name == "contiguous");
  CHECK(c.conv1->meta->strides == std::vector<int64_t>{144, 1, 24, 4});
  const Node* out = c.t.g.output()->args[0].node;
  CHECK(out->target_name == "clone");
  CHECK(out->meta->strides == std::vector<int64_t>{64, 16, 4, 1});
}

TEST_CASE("a view that needs the contiguous layout keeps the graph contiguous", "[passes]") {
  TwoConvs c(true);
  CHECK(tl::passes::channels_last(c.t.g, true) == 0);
  CHECK(c.conv1->args[0].node->op == OpKind::Placeholder);
  CHECK(c.conv2->meta->strides == std::vector<int64_t>{64, 16, 4, 1});
}

TEST_CASE("by default half-precision CUDA and large f32 CPU convs prefer channels-last",
          "[passes]") {
  using tl::passes::kCpuChannelsLastBytes;
  CHECK_FALSE(tl::passes::prefers_channels_last("cpu", resolve("torch.float64").get()));
  CHECK_FALSE(tl::passes::prefers_channels_last("cpu", resolve("torch.float32").get()));
  CHECK_FALSE(tl::passes::prefers_channels_last("cpu", resolve("torch.float32").get(), std::nullopt,
                                                kCpuChannelsLastBytes - 1));
  CHECK(tl::passes::prefers_channels_last("cpu", resolve("torch.float32").get(), std::nullopt,
                                          kCpuChannelsLastBytes));
  CHECK_FALSE(tl::passes::prefers_channels_last("cpu", resolve("torch.float64").get(), std::nullopt,
                                                kCpuChannelsLastBytes));
  CHECK_FALSE(tl::passes::prefers_channels_last("cpu", resolve("torch.float32").get(), false,
                                                kCpuChannelsLastBytes));
  CHECK_FALSE(tl::passes::prefers_channels_last("cpu", resolve("torch.bfloat16").get()));
  CHECK_FALSE(tl::passes::prefers_channels_last("cuda", resolve("torch.float32").get()));
  CHECK(tl::passes::prefers_channels_last("cuda", resolve("torch.bfloat16").get()));
  CHECK(tl::passes::prefers_channels_last("cuda", resolve("torch.float16").get()));
}
