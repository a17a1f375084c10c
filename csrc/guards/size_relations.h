#pragma once
// SIZE_RELATION guards (docs/internals/dynamic-shapes.md): the relations a trace relied on
// between its inputs' sizes (`s0 > 16`, `s1 == 64`, `s0 % 8 == 0`), where symbol k is one
// dimension of one input tensor. Checked in C++ with the other guards, one evaluation per
// call: a size-generic entry serves only the sizes where every relation comes out as it did
// at trace time; a failing one names itself for the recompiles log.
//
// NOTE: the symbols' values are read by the guard tree (guard_set.cpp) from the tensors it
// fetches anyway for their TENSOR_MATCH, one shape read per tensor: no source is fetched again.
#include <string>
#include <vector>

#include "ir/source.h"
#include "ir/sym_expr.h"

namespace tl::guards {

class SizeRelations {
 public:
  struct Symbol {
    ir::SourcePtr source;  // the input tensor
    int dim = 0;
  };
  SizeRelations(std::vector<Symbol> symbols, std::vector<ir::SymRelation> relations);
  const std::vector<Symbol>& symbols() const { return symbols_; }
  // Every relation holds at these symbol values (one per symbol, in order).
  bool holds(const std::vector<int64_t>& values) const;
  // After holds() failed: "SIZE_RELATION: the trace relied on s0 > 8 (file.py:12), false at
  // these sizes: s0 = L['x'].size(1) = 5".
  std::string failure() const { return failure_; }
  std::string str() const;  // one "SIZE_RELATION ..." line per relation

 private:
  std::vector<Symbol> symbols_;
  std::vector<ir::SymRelation> relations_;
  // NOTE: written by the const holds(): the GIL serialises every call on a GuardSet.
  mutable std::string failure_;
  std::string names() const;  // "s0 = L['x'].size(1), ..."
};

}  // namespace tl::guards
