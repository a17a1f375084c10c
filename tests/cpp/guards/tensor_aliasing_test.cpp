// TENSOR_ALIASING: the identity pattern among a frame's tensor inputs.
#include <string>

#include "guards/guard_set.h"
#include "test_frame.h"

using tl::guards::GuardSet;
using tl::ir::Source;
using tl::testing::TestFrame;

namespace {
const char* kSetup = R"(
import torch
a = torch.zeros(3)
b = a
c = torch.zeros(3)
)";

bool check(const GuardSet& g, const TestFrame& f) {
  bool ok = g.check(f.view());
  REQUIRE(!PyErr_Occurred());
  return ok;
}

// L['a'] and L['b'] one tensor, L['c'] another, as capture records them.
GuardSet traced(const TestFrame& f) {
  GuardSet g;
  g.add_tensor_match(Source::local(0, "a"), f.get("a"));
  g.add_tensor_alias(Source::local(1, "b"), f.get("b"));
  g.add_tensor_match(Source::local(2, "c"), f.get("c"));
  return g;
}
}  // namespace

TEST_CASE("TENSOR_ALIASING passes on the traced pattern and prints it", "[guards]") {
  TestFrame f(kSetup, {"a", "b", "c"});
  GuardSet g = traced(f);
  REQUIRE(g.size() == 3);  // two TENSOR_MATCH and one TENSOR_ALIASING
  std::string s = g.str();
  REQUIRE(s.find("TENSOR_ALIASING L['a'] is L['b']\n") != std::string::npos);
  REQUIRE(s.find("TENSOR_ALIASING distinct: L['a'], L['c']\n") != std::string::npos);
  REQUIRE(check(g, f));
  // Other objects in the same pattern pass too.
  f.run("a2 = torch.ones(3)\nc2 = torch.ones(3)\n");
  f.set_slot(0, f.get("a2"));
  f.set_slot(1, f.get("a2"));
  f.set_slot(2, f.get("c2"));
  REQUIRE(check(g, f));
}

TEST_CASE("TENSOR_ALIASING fails when one tensor becomes two, naming both", "[guards]") {
  TestFrame f(kSetup, {"a", "b", "c"});
  GuardSet g = traced(f);
  f.set_slot(1, f.get("c"));
  REQUIRE(!check(g, f));
  REQUIRE(g.failure_reason() ==
          "L['a'] is L['b'] failed: they were one tensor at trace time, now distinct tensors");
}

TEST_CASE("TENSOR_ALIASING fails when two tensors become one, naming both", "[guards]") {
  TestFrame f(kSetup, {"a", "b", "c"});
  GuardSet g = traced(f);
  f.set_slot(2, f.get("a"));
  REQUIRE(!check(g, f));
  REQUIRE(g.failure_reason() ==
          "L['a'] and L['c'] were distinct tensors at trace time, now the same tensor");
}

TEST_CASE("TENSOR_ALIASING over many inputs finds a repeated one", "[guards]") {
  std::string code = "import torch\n";
  std::vector<std::string> names;
  for (int i = 0; i < 20; ++i) {
    names.push_back("t" + std::to_string(i));
    code += names.back() + " = torch.zeros(2)\n";
  }
  TestFrame f(code, names);
  GuardSet g;
  for (int i = 0; i < 20; ++i)
    g.add_tensor_match(Source::local(i, names[i]), f.get(names[i].c_str()));
  REQUIRE(check(g, f));
  f.set_slot(17, f.get("t3"));
  REQUIRE(!check(g, f));
  REQUIRE(g.failure_reason() ==
          "L['t3'] and L['t17'] were distinct tensors at trace time, now the same tensor");
}

TEST_CASE("one tensor input adds no TENSOR_ALIASING", "[guards]") {
  TestFrame f(kSetup, {"a"});
  GuardSet g;
  g.add_tensor_match(Source::local(0, "a"), f.get("a"));
  REQUIRE(g.size() == 1);
  REQUIRE(g.str().find("TENSOR_ALIASING") == std::string::npos);
}
