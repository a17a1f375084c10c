// Reductions with two results (csrc/passes/lower_tuple.cpp): both getitems of the tuple
// come out of one kernel, and the tuple node itself never runs.
#include <catch2/catch.hpp>

#include "passes/partition.h"
#include "test_graphs.h"

using namespace tl::ir;
using namespace tl::testing;
using tl::passes::partition_graph;

namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// m = x.<op>(...) (a tuple) and its two getitems, as capture records them.
struct Tuple {
  Node *m, *first, *second;
};
Tuple tuple_op(TestGraph& t, const std::string& fn, std::vector<Arg> args,
               std::vector<std::pair<std::string, Arg>> kwargs, std::vector<int64_t> sizes,
               const char* first_dtype, const char* second_dtype) {
  Node* m = t.op(fn, std::move(args), {}, "float32", std::move(kwargs), {}, true);
  Node* a = t.op("operator.getitem", {of(m), integer(0)}, sizes, first_dtype);
  Node* b = t.op("operator.getitem", {of(m), integer(1)}, sizes, second_dtype);
  return {m, a, b};
}

}  // namespace

TEST_CASE("max with dim computes values and indices in one kernel pass", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {4, 10});
  Tuple m = tuple_op(t, "torch.max", {of(x), integer(1)}, {}, {4}, "float32", "int64");
  t.output({m.first, m.second});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  CHECK(plan(p) == "k0");
  const auto& k = p.kernels[0];
  CHECK(k.outputs.size() == 2);
  std::string s = k.kernel.str();
  CHECK(s.find("reduce=1") != std::string::npos);
  CHECK(count(s, "= load(") == 1);  // one read of x feeds both reductions
  CHECK(count(s, "reduce_max(") == 1);
  CHECK(count(s, "i64 = reduce_argmax(") == 1);
}

TEST_CASE("min over a negative dim of bool keeps bool values through u8", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {3, 5}, "bool");
  Tuple m = tuple_op(t, ".min", {of(x), integer(-1)}, {{"keepdim", pybool(true)}}, {3, 1}, "bool",
                     "int64");
  t.output({m.first, m.second});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  std::string s = p.kernels[0].kernel.str();
  CHECK(s.find("u8 = reduce_min(") != std::string::npos);
  CHECK(s.find("i64 = reduce_argmin(") != std::string::npos);
}

TEST_CASE("var_mean is one kernel whose mean and variance share their sums", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {6, 7, 5});
  Tuple m = tuple_op(t, "torch.var_mean", {of(x), ints({0, 2})}, {{"correction", integer(0)}}, {7},
                     "float32", "float32");
  t.output({m.first, m.second});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.kernels[0].outputs.size() == 2);
  std::string s = p.kernels[0].kernel.str();
  // sum(x), then sum(x - mean) (the mean's correction) and sum of the scaled squares.
  CHECK(count(s, "reduce_sum(") == 3);
  CHECK(s.find("reduce=2") != std::string::npos);
}

TEST_CASE("aminmax without dim reduces every axis into both results", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {3, 4}, "int64");
  Tuple m = tuple_op(t, "torch.aminmax", {of(x)}, {}, {}, "int64", "int64");
  t.output({m.second, m.first});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  std::string s = p.kernels[0].kernel.str();
  CHECK(count(s, "i64 = reduce_min(") == 1);
  CHECK(count(s, "i64 = reduce_max(") == 1);
}

TEST_CASE("a part read by a pointwise consumer brings its sibling into that kernel", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {8, 16});
  Tuple m = tuple_op(t, ".max", {of(x)}, {{"dim", integer(0)}}, {16}, "float32", "int64");
  Node* r = t.op("operator.mul", {of(m.first), integer(2)}, {16});
  t.output({m.second, r});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.kernels[0].outputs.size() == 2);  // the indices and the product
  CHECK(plan(p) == "k0");
}

TEST_CASE("a part whose value flows back into its sibling's kernel splits kernels, no cycle",
          "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {4, 10});
  Tuple m = tuple_op(t, "torch.max", {of(x), integer(1)}, {}, {4}, "float32", "int64");
  Node* e = t.op("torch.cumsum", {of(m.first), integer(0)}, {4});
  Node* z = t.op("operator.add", {of(m.second), of(e)}, {4});
  t.output({z});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 2);
  CHECK(plan(p) == "k0 cumsum k1");
  CHECK(p.kernels[0].outputs.size() == 2);
}

TEST_CASE("a tuple used whole (not through getitems) stays extern with its parts", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {4, 10});
  Tuple m = tuple_op(t, "torch.max", {of(x), integer(1)}, {}, {4}, "float32", "int64");
  Node* s = t.op("torch.stack", {of(m.m)}, {2, 4});
  t.output({m.first, s});
  auto p = partition_graph(t.g);
  CHECK(p.kernels.empty());
}
