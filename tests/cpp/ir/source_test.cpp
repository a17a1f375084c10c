#include "ir/source.h"

#include <catch2/catch.hpp>

using tl::PyRef;
using namespace tl::ir;

TEST_CASE("sources print as guard expressions", "[ir]") {
  CHECK(Source::local(0, "x")->str() == "L['x']");
  CHECK(Source::global("SCALE")->str() == "G['SCALE']");
  CHECK(Source::closure(1, "cell")->str() == "L['cell']");
  CHECK(Source::builtin("len")->str() == "G['__builtins__']['len']");
}

TEST_CASE("attribute and item sources chain onto their base", "[ir]") {
  SourcePtr self = Source::local(0, "self");
  SourcePtr layer = Source::item(Source::attr(self, "layer1"), PyRef::steal(PyLong_FromLong(0)));
  SourcePtr weight = Source::attr(Source::attr(layer, "conv1"), "weight");
  CHECK(weight->str() == "L['self'].layer1[0].conv1.weight");
  CHECK(weight->base->base == layer);

  SourcePtr d = Source::item(Source::local(1, "d"), PyRef::steal(PyUnicode_FromString("k")));
  CHECK(d->str() == "L['d']['k']");
  CHECK(d->kind == SourceKind::Item);
}
