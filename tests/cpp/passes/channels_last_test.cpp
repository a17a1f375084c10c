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

TEST_CASE("the CPU cost model prices each convolution class in both layouts", "[passes]") {
  using tl::passes::cpu_conv_cost;
  auto ratio = [](tl::passes::ConvCost c) { return c.channels_last / c.contiguous; };
  // Depthwise 3x3 (weight O, 1, 3, 3): faster channels-last at any size.
  CHECK(ratio(cpu_conv_cost({2, 64, 16, 16}, {64, 1, 3, 3}, {2, 64, 16, 16}, false)) < 1);
  CHECK(ratio(cpu_conv_cost({8, 96, 112, 112}, {96, 1, 3, 3}, {8, 96, 112, 112}, true)) < 1);
  // Dense 3x3 and grouped (4 channels a group): slower channels-last.
  CHECK(ratio(cpu_conv_cost({2, 64, 16, 16}, {64, 64, 3, 3}, {2, 64, 16, 16}, true)) > 1);
  CHECK(ratio(cpu_conv_cost({2, 128, 8, 8}, {128, 4, 3, 3}, {2, 128, 8, 8}, true)) > 1);
  // 1x1: even, except a few output pixels single-threaded (torch's per-image GEMM) and a
  // strided one whose weight outweighs its input.
  CHECK(ratio(cpu_conv_cost({2, 64, 16, 16}, {256, 64, 1, 1}, {2, 256, 16, 16}, true)) == 1);
  CHECK(ratio(cpu_conv_cost({2, 368, 2, 2}, {368, 368, 1, 1}, {2, 368, 2, 2}, true)) < 1);
  CHECK(ratio(cpu_conv_cost({2, 368, 2, 2}, {368, 368, 1, 1}, {2, 368, 2, 2}, false)) == 1);
  CHECK(ratio(cpu_conv_cost({2, 368, 1, 1}, {368, 368, 1, 1}, {2, 368, 1, 1}, true)) == 1);
  CHECK(ratio(cpu_conv_cost({2, 1024, 4, 4}, {2048, 1024, 1, 1}, {2, 2048, 2, 2}, true)) > 1);
  CHECK(ratio(cpu_conv_cost({2, 64, 32, 32}, {128, 64, 1, 1}, {2, 128, 16, 16}, true)) == 1);
  // Time per flop: a depthwise convolution costs more than a dense one of the same flops.
  auto dw = cpu_conv_cost({2, 64, 16, 16}, {64, 1, 3, 3}, {2, 64, 16, 16}, true);
  auto dense = cpu_conv_cost({2, 64, 16, 16}, {64, 64, 3, 3}, {2, 64, 16, 16}, true);
  CHECK(dw.contiguous * 64 > dense.contiguous);
}

TEST_CASE("f32 CPU graphs estimated faster channels-last prefer it below the byte threshold",
          "[passes]") {
  using tl::passes::ConvCost;
  PyRef f32 = resolve("torch.float32");
  CHECK(tl::passes::prefers_channels_last("cpu", f32.get(), std::nullopt, 0, ConvCost{10, 5}));
  // Within the margin (conversion copies are not priced): stays contiguous.
  CHECK_FALSE(
      tl::passes::prefers_channels_last("cpu", f32.get(), std::nullopt, 0, ConvCost{10, 9.5}));
  CHECK_FALSE(
      tl::passes::prefers_channels_last("cpu", f32.get(), std::nullopt, 0, ConvCost{10, 20}));
  CHECK_FALSE(tl::passes::prefers_channels_last("cpu", f32.get(), false, 0, ConvCost{10, 5}));
  CHECK_FALSE(tl::passes::prefers_channels_last("cpu", resolve("torch.float64").get(), std::nullopt,
                                                0, ConvCost{10, 5}));
}
