#pragma once
// Small helpers shared by the files that give Python semantics to symbolic
// values (operators.cpp, attributes.cpp, calls.cpp, inline_call.cpp,
// methods.cpp, builtins.cpp).
#include <string>
#include <unordered_set>
#include <vector>

#include "capture/tracer.h"

namespace tl::capture::detail {

std::string utf8(PyObject* s);
std::string attr_str(PyObject* o, const char* name);
std::string callable_desc(PyObject* fn);
std::string error_text();
PyObject* C(bool b);  // borrowed Py_True / Py_False
ValuePtr const_bool(bool b);
ValuePtr none();
ValuePtr const_int(long long i);
// Runs a pure Python callable on constants at trace time.
ValuePtr call_pure(CaptureContext& ctx, PyObject* fn, const std::vector<ValuePtr>& args,
                   const KwArgs& kwargs);
bool all_const(const std::vector<ValuePtr>& args, const KwArgs& kwargs);
bool is_type(PyObject* o, const PyRef& t);
const std::unordered_set<std::string>& pure_builtins();
const std::unordered_set<std::string>& forbidden_builtins();
const std::unordered_set<std::string>& torch_side_effect_fns();
bool is_side_effecting_torch_fn(PyObject* fn);
bool is_module_type(PyObject* t);
bool as_items(const ValuePtr& v, std::vector<ValuePtr>& out);
PyRef const_tuple(const ValuePtr& v);
Py_ssize_t normalize_index(PyObject* idx, size_t size);
int dict_find(const ValuePtr& d, PyObject* key);
bool is_partial_type(PyObject* t);
bool is_plain_user_class(PyObject* f);
PyObject* operator_fn(const char* name);

}  // namespace tl::capture::detail
