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
// iterators.cpp: dict views (VKind::DictView over a Dict value).
ValuePtr dict_view(const ValuePtr& dict, const std::string& what);
PyObject* dict_view_type(const ValuePtr& view);  // borrowed: dict_keys / dict_values / ...
std::vector<ValuePtr> dict_view_items(const ValuePtr& view);
// operators.cpp: len() from what a Python __len__ returned, with CPython's checks.
Py_ssize_t checked_len(const ValuePtr& r);
// Runs a pure Python callable on constants at trace time.
ValuePtr call_pure(CaptureContext& ctx, PyObject* fn, const std::vector<ValuePtr>& args,
                   const KwArgs& kwargs);
bool all_const(const std::vector<ValuePtr>& args, const KwArgs& kwargs);
bool is_type(PyObject* o, const PyRef& t);
const std::unordered_set<std::string>& pure_builtins();
const std::unordered_set<std::string>& forbidden_builtins();
const std::unordered_set<std::string>& torch_side_effect_fns();
bool is_side_effecting_torch_fn(PyObject* fn);
// Whether running Python code on `o` at trace time leaves nothing behind that a later call
// would miss: tensors (meta), immutable constants, types, modules, builtins, torch functions
// whose closures hold only such values, torch's C objects. A user function, a bound method
// of a Python object, a mutable object is not (calling or changing it is an effect).
bool inert_at_trace_time(PyObject* o);
bool inert_closure(PyObject* func);   // every cell of a Python function's closure
bool inert_value(const ValuePtr& v);  // a constant that is, or a tuple/list of such values
bool is_module_type(PyObject* t);
bool as_items(const ValuePtr& v, std::vector<ValuePtr>& out);
PyRef const_tuple(const ValuePtr& v);
// A dict or set key: `k` itself, or a plain tuple of constants built by traced code (`(i, j)`)
// as one constant (its sizes specialised: the key is hashed). Else `k` unchanged.
ValuePtr key_value(CaptureContext& ctx, const ValuePtr& k);
// A tuple, list or torch.Size of Python values (sizes specialised) as the constant it prints
// as (str(), repr(), f-strings); `v` itself otherwise. NOTE: a namedtuple's constant copy would
// print as a plain tuple: it stays `v`.
ValuePtr printable_value(CaptureContext& ctx, const ValuePtr& v);
// An enum class (its metaclass is EnumMeta): its members are fixed when it is made, and
// `Cls(value)` looks one up without running user code.
bool is_enum_class(PyObject* o);
// `idx` (borrowed) as an index into `size` items; out of range raises IndexError(`message`),
// CPython's text for the operation ("list index out of range", "pop index out of range", ...).
Py_ssize_t normalize_index(PyObject* idx, size_t size,
                           const char* message = "sequence index out of range");
int dict_find(const ValuePtr& d, PyObject* key);
void dict_set(const ValuePtr& d, PyObject* key, const ValuePtr& v);  // borrows key
bool is_partial_type(PyObject* t);
bool is_plain_user_class(PyObject* f);
PyObject* operator_fn(const char* name);
// objects.cpp: the transformers ModelOutput base of cls when its construction can be
// modelled natively, else null (borrowed).
PyObject* model_output_base(PyObject* cls);
// library_calls.cpp: a functools.lru_cache / functools.cache wrapper (borrowed).
bool is_lru_cache_wrapper(PyObject* fn);
// autograd_function.cpp: torch.autograd.Function.apply's function (borrowed).
bool is_autograd_function_apply(PyObject* fn);
// The torch.autograd.Function subclass (borrowed) when `fn` is `Cls.apply` and
// torch defines apply in C (torch 2.14), else null.
PyObject* autograd_function_of_c_apply(PyObject* fn);
// A fresh `set` value of constants (tensors and other traced values are refused).
ValuePtr make_set(const std::vector<ValuePtr>& items);
void set_add(const ValuePtr& set, const ValuePtr& item);
// The key of `item` in a set value: a constant, or an existing module/object by identity.
PyRef set_key(const ValuePtr& item);
// IMPORT_NAME of a module that is already loaded (an import statement inside a function):
// the module, with a held source so attribute reads are guarded. Anything that would run
// import machinery (a module not loaded yet) is a graph break. `globals` is borrowed.
ValuePtr import_loaded(const std::string& name, const ValuePtr& fromlist, const ValuePtr& level,
                       PyObject* globals, CaptureContext& ctx);

}  // namespace tl::capture::detail
