#pragma once
// Iterators of the capture interpreter are materialised when made (GET_ITER, iter, zip,
// enumerate, reversed, map), but CPython's iterators over a list or dict read it as they go:
// a loop that mutates the list it walks sees the change, a dict that changes size raises. The
// tracer records which containers an iterator reads and stops (a graph break, run eagerly)
// where one of them changed while the iterator was live, instead of walking a stale copy.
#include <vector>

#include "capture/value.h"

namespace tl::capture {

// Records the lists and dicts among `sources` that iterator `it` was made from, as they are now.
void watch_sources(Value& it, const std::vector<ValuePtr>& sources);
// watch_sources for GET_ITER / iter() of `v`: the plain iterator of a list or dict is marked
// (it.flag), so a graph break can hand CPython the container itself instead of a copy.
void watch_iteration_of(Value& it, const ValuePtr& v);
// True when a list `it` reads has other items now, or a dict another size.
bool sources_changed(const Value& it);
// Throws GraphBreak ("unsupported_value") when sources_changed(it).
void check_sources_unchanged(const Value& it);

}  // namespace tl::capture
