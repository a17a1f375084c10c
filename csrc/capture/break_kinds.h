#pragma once
// The graph-break kinds: every kind a break may name, each with the hint that says what the
// user can change when the breaking site gives none. docs/graph_breaks.md's table lists the
// same kinds and hints (tests/python/breaks/test_break_kind_table.py keeps them equal).
#include <string>
#include <vector>

namespace tl::capture {

struct BreakKind {
  const char* name;  // stable snake_case
  const char* hint;
};

// Every kind, in the order of the docs' table.
const std::vector<BreakKind>& break_kinds();

// The hint of `kind`; empty for a name that is not a kind.
std::string kind_hint(const std::string& kind);

}  // namespace tl::capture
