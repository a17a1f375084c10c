// Statistics rules (csrc/passes/lower_statistics.cpp): the kernels they lower to.
#include <catch2/catch.hpp>

#include "passes/partition.h"
#include "test_graphs.h"

using namespace tl::ir;
using namespace tl::testing;
using tl::passes::partition_graph;

TEST_CASE("var over the last dim is one kernel of two chained sums", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {4, 10});
  Node* v = t.op(".var", {of(x), integer(-1)}, {4}, "float32", {{"correction", integer(0)}});
  t.output({v});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  std::string k = p.kernels[0].kernel.str();
  CHECK(k.find("kernel k0_var[4,10] reduce=1:") == 0);
  size_t first = k.find("reduce_sum"), second = k.find("reduce_sum", first + 1);
  CHECK(second != std::string::npos);
  CHECK(k.find("constant(10)") != std::string::npos);  // divisor n - correction
}

TEST_CASE("argmax without dim reduces every axis into int64", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {3, 5});
  Node* a = t.op("torch.argmax", {of(x)}, {}, "int64");
  t.output({a});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  std::string k = p.kernels[0].kernel.str();
  CHECK(k.find("reduce=2") != std::string::npos);
  CHECK(k.find("i64 = reduce_argmax") != std::string::npos);
}

TEST_CASE("group_norm with three of six channels per group stays extern", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {2, 6, 5});
  Node* g = t.op("torch.nn.functional.group_norm", {of(x), integer(2)}, {2, 6, 5});
  t.output({g});
  auto p = partition_graph(t.g);
  CHECK(p.kernels.empty());
}
