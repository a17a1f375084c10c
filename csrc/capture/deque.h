#pragma once
// collections.deque as a traced container (as Dynamo's DequeVariable): a Deque value holds its
// items and maxlen; one made by traced code is rebuilt after the graph (ir::Residual::Kind::
// Deque), one read from the frame is guarded by type, length, maxlen and items and its
// mutations are replayed in place (ir::SideEffect::Kind::ReplaceDeque).
#include <Python.h>

#include <memory>

#include "capture/lazy_iter.h"
#include "capture/value.h"

namespace tl::capture {

// collections.deque (borrowed, process lifetime).
PyObject* deque_type();

// A Deque value over `items` (maxlen: None or an int >= 0), trimmed from the left to maxlen.
ValuePtr make_deque_value(std::vector<ValuePtr> items, PyRef maxlen);

// A deque's iterator: reads the deque as it is now; a mutation of the deque after the iterator
// was made is a graph break (CPython's iterator raises RuntimeError there).
std::shared_ptr<LazyIter> deque_iter(ValuePtr deque);

}  // namespace tl::capture
