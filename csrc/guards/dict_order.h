#pragma once
// The iteration order of a dict or dict subclass, read without running Python code.
//
// NOTE: a dict iterates in storage order (PyDict_Next); an OrderedDict iterates in its own
// linked order, which differs from storage order only after move_to_end. A subclass of either
// that keeps the base's iteration (transformers' ModelOutput is an OrderedDict subclass) is
// read in that order; one that overrides __iter__/keys/items/values is not read here at all.
#include <Python.h>

#include <vector>

#include "core/py_ref.h"

namespace tl::guards {

// `type` is an OrderedDict subclass whose iteration and views are OrderedDict's own (C code).
bool iterates_like_ordered_dict(PyTypeObject* type);

// The keys of `dict` (a dict or dict subclass, borrowed) in its iteration order: OrderedDict's
// linked order for an OrderedDict, storage order otherwise. Throws PythonError.
std::vector<PyRef> dict_keys_in_order(PyObject* dict);

// A dict view (keys/values/items of a dict or OrderedDict): its dict (borrowed), else null.
PyObject* dict_view_mapping(PyObject* view);

}  // namespace tl::guards
