// Data-movement lowerings (csrc/passes/lower_data.cpp) on hand-built graphs.
#include <catch2/catch.hpp>

#include "passes/partition.h"
#include "test_graphs.h"

using namespace tl::ir;
using namespace tl::testing;
using tl::passes::partition_graph;

TEST_CASE("cat along rows reads each part at clamped rows", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {2, 3});
  Node* y = t.input("y", {1, 3});
  Node* c = t.op("torch.cat", {Arg::list({of(x), of(y)})}, {3, 3});
  t.output({c});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  const std::string s = p.kernels[0].kernel.str();
  CHECK(s.find("index(axis0)") != std::string::npos);
  CHECK(s.find("gather(in0") != std::string::npos);
  CHECK(s.find("load(in1)") != std::string::npos);  // one row: no row index to shift
  CHECK(s.find("where(") != std::string::npos);
  CHECK(s.find("in0 : f32 strides=[0,1]") != std::string::npos);  // rows come from the gather
}

TEST_CASE("stack of two pointwise results is one kernel with plain loads", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {4});
  Node* a = t.op("torch.sin", {of(x)}, {4});
  Node* b = t.op("torch.cos", {of(x)}, {4});
  Node* s = t.op("torch.stack", {Arg::list({of(a), of(b)})}, {2, 4});
  t.output({s});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.kernels[0].members.size() == 3);
  CHECK(p.kernels[0].kernel.str().find("gather") == std::string::npos);
}

TEST_CASE("flip keeps unflipped axes direct and only gathers the flipped one", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {3, 5});
  Node* f = t.op("torch.flip", {of(x), ints({1})}, {3, 5});
  t.output({f});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  const std::string s = p.kernels[0].kernel.str();
  CHECK(s.find("in0 : f32 strides=[5,0]") != std::string::npos);
  CHECK(s.find("index(axis1)") != std::string::npos);
}

TEST_CASE("a gathered producer is stored, not fused into the gathering kernel", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {6});
  Node* a = t.op("torch.exp", {of(x)}, {6});
  Node* f = t.op("torch.flip", {of(a), ints({0})}, {6});
  t.output({f});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 2);
  CHECK(p.kernels[1].inputs == std::vector<const Node*>{a});
}

TEST_CASE("a cat part's producer computes in the cat's kernel at clamped coordinates", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {2, 3});
  Node* y = t.input("y", {1, 3});
  Node* a = t.op("torch.neg", {of(y)}, {1, 3});
  Node* b = t.op("torch.exp", {of(x)}, {2, 3});
  Node* c = t.op("torch.cat", {Arg::list({of(b), of(a)})}, {3, 3});
  t.output({c});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.kernels[0].members.size() == 3);
  const std::string s = p.kernels[0].kernel.str();
  CHECK(s.find("neg(") != std::string::npos);
  CHECK(s.find("exp(") != std::string::npos);
  // x's rows are clamped into [0, 2); y has one row, read without a row index
  CHECK(s.find("minimum(") != std::string::npos);
  CHECK(s.find("gather(in0") != std::string::npos);
}
