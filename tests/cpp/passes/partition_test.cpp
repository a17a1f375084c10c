#include "passes/partition.h"

#include <catch2/catch.hpp>

#include "passes/graph_info.h"
#include "test_graphs.h"

using namespace tl::ir;
using namespace tl::testing;
using tl::passes::partition_graph;

TEST_CASE("a six-op pointwise chain becomes one kernel", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {8, 16});
  Node* y = t.input("y", {16});
  Node* a = t.op("torch.sin", {of(x)}, {8, 16});
  Node* b = t.op("operator.add", {of(a), of(y)}, {8, 16});
  Node* c = t.op(".relu", {of(b)}, {8, 16});
  Node* d = t.op("operator.mul", {of(c), integer(2)}, {8, 16});
  Node* e = t.op("torch.sub", {of(d), num(1.5)}, {8, 16}, "float32", {{"alpha", integer(2)}});
  Node* f =
      t.op("torch.nn.functional.gelu", {of(e)}, {8, 16}, "float32", {{"approximate", str("tanh")}});
  t.output({f});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  CHECK(plan(p) == "k0");
  CHECK(p.kernels[0].members.size() == 6);
  CHECK(p.kernels[0].inputs == std::vector<const Node*>{x, y});
  CHECK(p.kernels[0].kernel.str() ==
        "kernel k0_gelu[8,16] reduce=0:\n"
        "  in0 : f32 strides=[16,1]\n"
        "  in1 : f32 strides=[0,1]\n"
        "  %0 : f32 = load(in0)\n"
        "  %1 : f32 = sin(%0)\n"
        "  %2 : f32 = load(in1)\n"
        "  %3 : f32 = add(%1, %2)\n"
        "  %4 : f32 = relu(%3)\n"
        "  %5 : f32 = constant(2)\n"
        "  %6 : f32 = mul(%4, %5)\n"
        "  %7 : f32 = constant(1.5)\n"
        "  %8 : f32 = mul(%7, %5)\n"
        "  %9 : f32 = sub(%6, %8)\n"
        "  %10 : f32 = constant(0.5)\n"
        "  %11 : f32 = mul(%9, %10)\n"
        "  %12 : f32 = mul(%9, %9)\n"
        "  %13 : f32 = mul(%12, %9)\n"
        "  %14 : f32 = constant(0.044715)\n"
        "  %15 : f32 = mul(%13, %14)\n"
        "  %16 : f32 = add(%9, %15)\n"
        "  %17 : f32 = constant(0.7978845608028654)\n"
        "  %18 : f32 = mul(%17, %16)\n"
        "  %19 : f32 = tanh(%18)\n"
        "  %20 : f32 = constant(1)\n"
        "  %21 : f32 = add(%20, %19)\n"
        "  %22 : f32 = mul(%11, %21)\n"
        "  out0 : f32 strides=[16,1] = %22\n");
}

TEST_CASE("broadcast operands load with zero strides on broadcast axes", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {4, 1, 5});
  Node* y = t.input("y", {3, 1});
  Node* xt = t.input("xt", {3, 5}, "float32", {1, 3});  // a transposed input
  Node* a = t.op("operator.add", {of(x), of(y)}, {4, 3, 5});
  Node* b = t.op("operator.mul", {of(a), of(xt)}, {4, 3, 5});
  t.output({b});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  const Kernel& k = p.kernels[0].kernel;
  CHECK(k.shape == std::vector<int64_t>{4, 3, 5});
  REQUIRE(k.inputs.size() == 3);
  CHECK(k.inputs[0].strides == std::vector<int64_t>{5, 0, 1});
  CHECK(k.inputs[1].strides == std::vector<int64_t>{0, 1, 0});
  CHECK(k.inputs[2].strides == std::vector<int64_t>{0, 1, 3});
  CHECK(k.outputs[0].view.strides == std::vector<int64_t>{15, 5, 1});
}

TEST_CASE("softmax is one kernel with two chained reductions", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {8, 32});
  Node* s = t.op("torch.softmax", {of(x), integer(-1)}, {8, 32});
  t.output({s});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.kernels[0].kernel.str() ==
        "kernel k0_softmax[8,32] reduce=1:\n"
        "  in0 : f32 strides=[32,1]\n"
        "  %0 : f32 = load(in0)\n"
        "  %1 : f32 = reduce_max(%0)\n"
        "  %2 : f32 = sub(%0, %1)\n"
        "  %3 : f32 = exp(%2)\n"
        "  %4 : f32 = reduce_sum(%3)\n"
        "  %5 : f32 = div(%3, %4)\n"
        "  out0 : f32 strides=[32,1] = %5\n");
}

TEST_CASE("softmax over a middle dim makes it the trailing kernel axis", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {2, 8, 4});
  Node* s =
      t.op("torch.nn.functional.softmax", {of(x)}, {2, 8, 4}, "float32", {{"dim", integer(1)}});
  t.output({s});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  const Kernel& k = p.kernels[0].kernel;
  CHECK(k.shape == std::vector<int64_t>{2, 4, 8});
  CHECK(k.inputs[0].strides == std::vector<int64_t>{32, 1, 4});
  CHECK(k.outputs[0].view.strides == std::vector<int64_t>{32, 1, 4});
}

TEST_CASE("a hand-written softmax fuses into one kernel", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {8, 32});
  Node* m = t.op(".amax", {of(x), integer(-1)}, {8, 1}, "float32", {{"keepdim", pybool(true)}});
  Node* d = t.op("operator.sub", {of(x), of(m)}, {8, 32});
  Node* e = t.op("torch.exp", {of(d)}, {8, 32});
  Node* s = t.op(".sum", {of(e), integer(-1)}, {8, 1}, "float32", {{"keepdim", pybool(true)}});
  Node* r = t.op("operator.truediv", {of(e), of(s)}, {8, 32});
  t.output({r});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.kernels[0].members.size() == 5);
  CHECK(p.kernels[0].kernel.reduction_axes == 1);
}

TEST_CASE("layer_norm with weight and bias is one kernel", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {4, 6, 16});
  Node* w = t.input("w", {16});
  Node* b = t.input("b", {16});
  Node* ln = t.op("torch.nn.functional.layer_norm", {of(x), ints({16}), of(w), of(b)}, {4, 6, 16});
  t.output({ln});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  const Kernel& k = p.kernels[0].kernel;
  CHECK(k.shape == std::vector<int64_t>{4, 6, 16});
  CHECK(k.reduction_axes == 1);
  CHECK(k.inputs[1].strides == std::vector<int64_t>{0, 0, 1});
}

TEST_CASE("a pointwise epilogue after sum fuses into the reduction kernel", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {8, 16});
  Node* s = t.op(".sum", {of(x), integer(-1)}, {8});
  Node* m = t.op("operator.mul", {of(s), integer(2)}, {8});
  Node* a = t.op("torch.sigmoid", {of(m)}, {8});
  t.output({a});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.kernels[0].kernel.str() ==
        "kernel k0_sigmoid[8,16] reduce=1:\n"
        "  in0 : f32 strides=[16,1]\n"
        "  %0 : f32 = load(in0)\n"
        "  %1 : f32 = reduce_sum(%0)\n"
        "  %2 : f32 = constant(2)\n"
        "  %3 : f32 = mul(%1, %2)\n"
        "  %4 : f32 = sigmoid(%3)\n"
        "  out0 : f32 strides=[1,0] = %4\n");
}

TEST_CASE("an extern matmul in the middle splits the pointwise groups", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {8, 16});
  Node* w = t.input("w", {16, 4});
  Node* a = t.op("torch.sin", {of(x)}, {8, 16});
  Node* b = t.op("operator.mul", {of(a), integer(3)}, {8, 16});
  Node* mm = t.op("operator.matmul", {of(b), of(w)}, {8, 4});
  Node* c = t.op("torch.relu", {of(mm)}, {8, 4});
  t.output({c});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 2);
  CHECK(plan(p) == "k0 matmul k1");
  CHECK(p.kernels[1].inputs[0] == mm);
}

TEST_CASE("in-place ops are externs that no fusion crosses", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {8});
  Node* a = t.op("operator.mul", {of(x), integer(2)}, {8});
  Node* inplace = t.op(".add_", {of(x), integer(1)}, {8});
  Node* b = t.op("operator.mul", {of(x), integer(3)}, {8});
  Node* c = t.op("operator.add", {of(a), of(b)}, {8});
  t.output({c, inplace});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 2);
  CHECK(plan(p) == "k0 add_ k1");
}

TEST_CASE("a value used inside and outside the group becomes a second output", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {8});
  Node* a = t.op("torch.sin", {of(x)}, {8});
  Node* b = t.op("operator.add", {of(a), integer(1)}, {8});
  Node* c = t.op("operator.mul", {of(a), integer(2)}, {8});
  t.output({b, c, a});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.kernels[0].outputs == std::vector<const Node*>{a, b, c});
  CHECK(p.kernels[0].kernel.exprs.size() == 6);  // sin computed once
}

TEST_CASE("views fold into load strides and are never stored", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {4, 6});
  Node* xt = t.op(".t", {of(x)}, {6, 4}, "float32", {}, {1, 6});
  Node* u = t.op(".unsqueeze", {of(xt), integer(0)}, {1, 6, 4}, "float32", {}, {24, 1, 6});
  Node* a = t.op("operator.mul", {of(u), integer(2)}, {1, 6, 4});
  Node* v = t.op(".view", {of(x), integer(24)}, {24});
  t.output({a, v});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.kernels[0].kernel.inputs[0].strides == std::vector<int64_t>{1, 6});
  CHECK(p.kernels[0].members.size() == 3);
  CHECK(plan(p) == "k0 view");  // returned views stay torch views
}

TEST_CASE("ops without a rule and zero-size tensors are extern", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {8});
  Node* c = t.op("torch.cumsum", {of(x), integer(0)}, {8});
  Node* z = t.input("z", {0, 3});
  Node* e = t.op("torch.exp", {of(z)}, {0, 3});
  Node* n = t.input("n", {8}, "int64");
  t.op("operator.floordiv", {of(n), of(n)}, {8}, "int64");  // integer divisor may be 0
  t.output({c, e});
  auto p = partition_graph(t.g);
  CHECK(p.kernels.empty());
  CHECK(plan(p) == "cumsum exp floordiv");
}

TEST_CASE("max with dim lowers when only its values are used", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {8, 16});
  Node* m = t.op(".max", {of(x)}, {}, "float32", {{"dim", integer(1)}}, {}, true);
  Node* v = t.op("operator.getitem", {of(m), integer(0)}, {8});
  Node* r = t.op("operator.add", {of(v), integer(1)}, {8});
  t.output({r});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.kernels[0].members.size() == 3);
  CHECK(plan(p) == "k0");
}

TEST_CASE("inference batch_norm reads its statistics along the channel axis", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {2, 3, 4, 5});
  std::vector<Arg> args = {of(x)};
  for (const char* name : {"mean", "var", "w", "b"}) args.push_back(of(t.input(name, {3})));
  args.push_back(pybool(false));
  args.push_back(num(0.1));
  args.push_back(num(1e-5));
  Node* bn = t.op("torch.nn.functional.batch_norm", std::move(args), {2, 3, 4, 5});
  Node* r = t.op("torch.relu", {of(bn)}, {2, 3, 4, 5});
  t.output({r});
  auto p = partition_graph(t.g);
  REQUIRE(p.kernels.size() == 1);
  const Kernel& k = p.kernels[0].kernel;
  REQUIRE(k.inputs.size() == 5);
  CHECK(k.inputs[1].strides == std::vector<int64_t>{0, 1, 0, 0});
}

TEST_CASE("training-mode batch_norm is an extern barrier", "[passes]") {
  TestGraph t;
  Node* x = t.input("x", {2, 3});
  Node* m = t.input("m", {3});
  Node* v = t.input("v", {3});
  Node* bn = t.op("torch.nn.functional.batch_norm", {of(x), of(m), of(v)}, {2, 3}, "float32",
                  {{"training", pybool(true)}});
  t.output({bn});
  auto p = partition_graph(t.g);
  CHECK(p.kernels.empty());
  CHECK(tl::passes::is_barrier(*bn));
}

TEST_CASE("values off the kernels' device stay extern and the rest still fuses", "[passes]") {
  // NOTE: timm's edgenext builds a CPU mask in a CUDA graph; before, the
  // second device sent the whole graph op by op (zero kernels).
  TestGraph t;
  Node* x = t.input("x", {8, 16});
  Node* a = t.op("torch.sin", {of(x)}, {8, 16});
  Node* off = t.op("torch.cos", {of(a)}, {8, 16});   // "on the CPU"
  Node* reader = t.op(".relu", {of(off)}, {8, 16});  // reads it: extern too
  Node* d = t.op("operator.mul", {of(reader), integer(2)}, {8, 16});
  Node* e = t.op("torch.exp", {of(d)}, {8, 16});
  t.output({e});
  const TensorMeta* off_meta = &*off->meta;
  auto p = partition_graph(t.g, false, [&](const TensorMeta& m) { return &m != off_meta; });
  REQUIRE(p.kernels.size() == 2);
  CHECK(plan(p) == "k0 " + off->name + " " + reader->name + " k1");
  CHECK(p.kernels[0].members == std::vector<const Node*>{a});
  CHECK(p.kernels[1].members == std::vector<const Node*>{d, e});
  // Without a device filter the five ops are one kernel.
  CHECK(partition_graph(t.g).kernels.size() == 1);
}
