#include "frame/dynamic_policy.h"

#include <algorithm>
#include <set>

#include "bytecode/resume.h"
#include "capture/torch_api.h"
#include "core/errors.h"
#include "frame/code_cache.h"

namespace tl::frame {
namespace {

// getattr(obj, name) or null (the AttributeError cleared). Borrows obj.
PyRef attr_or_null(PyObject* obj, const char* name) {
  PyRef v = PyRef::steal(PyObject_GetAttrString(obj, name));
  if (!v) PyErr_Clear();
  return v;
}

// A non-empty set/list/tuple attribute (torch's mark_dynamic stores sets).
bool has_marks(PyObject* t, const char* name) {
  PyRef v = attr_or_null(t, name);
  if (!v || v.get() == Py_None) return false;
  Py_ssize_t n = PyObject_Length(v.get());
  if (n < 0) PyErr_Clear();
  return n > 0;
}

// An int attribute of a _DimRange, or `dflt` when it is None or missing.
long long range_field(PyObject* r, const char* name, long long dflt) {
  PyRef v = attr_or_null(r, name);
  if (!v || !PyLong_Check(v.get())) return dflt;
  long long x = PyLong_AsLongLong(v.get());
  if (x == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return dflt;
  }
  return x;
}

// Raises the user's error when a size is outside a mark_dynamic range.
void check_ranges(PyObject* t, const std::string& where) {
  PyRef ranges = attr_or_null(t, "_dynamo_dynamic_range");
  if (!ranges || ranges.get() == Py_None) return;
  PyRef it = PyRef::steal(PyObject_GetIter(ranges.get()));
  if (!it) {
    PyErr_Clear();
    return;
  }
  PyRef shape = attr_or_null(t, "shape");
  Py_ssize_t rank = shape ? PyObject_Length(shape.get()) : -1;
  if (rank < 0) {
    PyErr_Clear();
    return;
  }
  while (PyRef r = PyRef::steal(PyIter_Next(it.get()))) {
    long long dim = range_field(r.get(), "dim", -1);
    if (dim < 0 || dim >= rank) continue;
    PyRef size = PyRef::steal(PySequence_GetItem(shape.get(), static_cast<Py_ssize_t>(dim)));
    long long n = size ? PyLong_AsLongLong(size.get()) : -1;
    if (n == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      continue;
    }
    long long lo = range_field(r.get(), "min", 0);
    long long hi = range_field(r.get(), "max", -1);
    if (n < lo || (hi >= 0 && n > hi))
      TL_THROW(Value) << "torchlite: " << where << ".size(" << dim << ") is " << n
                      << ", outside the range mark_dynamic gave it (min=" << lo
                      << ", max=" << (hi >= 0 ? std::to_string(hi) : std::string("None"))
                      << "); call mark_dynamic with a range that holds every size you pass";
  }
  if (PyErr_Occurred()) PyErr_Clear();
}

bool has_earlier_entry(PyCodeObject* code, int config_id) {
  ExtraState* st = find_extra(code);
  if (!st) return false;
  return std::any_of(st->entries.begin(), st->entries.end(),
                     [&](const auto& e) { return e && e->config && e->config->id == config_id; });
}

// True unless every tensor input of `res` has sizes some earlier entry of `config_id` recorded
// for the same source, at least one input is shared with an earlier entry, and the miss did not
// fail a size guard (a tensor whose sizes the trace read without making it a graph input). NOTE:
// without a shared input (entries that ran eagerly record none) the miss is taken for a new size,
// as before.
bool at_new_sizes(PyCodeObject* code, int config_id, const capture::CaptureResult& res) {
  ExtraState* st = find_extra(code);
  if (!st || st->miss_on_size) return true;
  bool shared = false;
  for (const auto& [source, sizes] : input_sizes_of(res)) {
    bool seen_source = false, seen_sizes = false;
    for (const auto& e : st->entries) {
      if (!e || !e->config || e->config->id != config_id) continue;
      for (const auto& [s, n] : e->input_sizes) {
        if (s != source) continue;
        seen_source = true;
        seen_sizes = seen_sizes || n == sizes;
      }
    }
    if (seen_source && !seen_sizes) return true;
    shared = shared || seen_source;
  }
  return !shared;
}

}  // namespace

DynamicChoice choose_dynamic(PyCodeObject* code, const CompileConfig& config,
                             const capture::CaptureResult& res) {
  bool marked = false;
  std::vector<ir::Node*> ph = res.graph ? res.graph->placeholders() : std::vector<ir::Node*>{};
  for (size_t i = 0; i < res.example_inputs.size(); ++i) {
    PyObject* t = res.example_inputs[i].get();
    if (!t) continue;
    std::string where = i < ph.size() && ph[i]->source ? ph[i]->source->str() : "an input";
    check_ranges(t, where);
    marked = marked || has_marks(t, "_dynamo_dynamic_indices") ||
             has_marks(t, "_dynamo_weak_dynamic_indices");
  }
  if (config.dynamic == 0) return {false, false, ""};
  if (config.dynamic == 1) return {true, true, "dynamic=True"};
  const bool again = has_earlier_entry(code, config.id);
  // NOTE: a recompile of a user's frame at sizes every earlier entry's inputs had is no reason
  // for runtime sizes (the marks below still are). Resume functions and loop bodies keep the
  // old rule: they are captured again per loop variable or int argument at one size (an entry
  // per iteration), and runtime sizes from the second entry on let those entries serve every
  // later size (tests/python/dynamic/test_resume_sizes.py).
  const bool generated = bytecode::user_code_of(code) != code;
  const bool new_sizes = again && (generated || at_new_sizes(code, config.id, res));
  // NOTE: a resume function (or loop body) takes tensors computed before the break, which carry
  // no marks, beside the marked inputs it was handed (`y = x.view(b, t, -1)`, x marked): once
  // compiled before, every dimension may change there, as automatic dynamic without marks.
  // A user's frame with marks keeps its unmarked dimensions exact.
  if (marked && !(again && generated)) return {true, false, "an input is marked dynamic"};
  if (new_sizes) return {true, true, "automatic: the frame was compiled before (a new size)"};
  return {false, false, ""};
}

std::vector<std::pair<std::string, std::vector<int64_t>>> input_sizes_of(
    const capture::CaptureResult& res) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  std::vector<ir::Node*> ph = res.graph ? res.graph->placeholders() : std::vector<ir::Node*>{};
  for (size_t i = 0; i < res.example_inputs.size() && i < ph.size(); ++i) {
    PyObject* t = res.example_inputs[i].get();
    if (!t || !ph[i]->source) continue;
    PyRef shape = attr_or_null(t, "shape");
    if (!shape || !PyTuple_Check(shape.get())) continue;
    std::vector<int64_t> sizes;
    for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(shape.get()); ++d) {
      long long n = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.get(), d));
      if (n == -1 && PyErr_Occurred()) throw PythonError();
      sizes.push_back(n);
    }
    out.emplace_back(ph[i]->source->str(), std::move(sizes));
  }
  return out;
}

bool evict_for_new_size(ExtraState& st, int config_id, const std::string& reason) {
  if (reason.find("size mismatch") == std::string::npos) return false;
  for (size_t i = st.entries.size(); i-- > 0;) {
    // NOTE: the first entry of a frame has constant sizes (the fastest code for
    // the first size seen); it stays, and the oldest runtime-sizes entry goes.
    if (st.entries[i]->config->id != config_id || !st.entries[i]->runtime_sizes) continue;
    // NOTE: destroyed after the list is consistent again: destroying an entry can run Python.
    std::shared_ptr<CacheEntry> evicted = std::move(st.entries[i]);
    st.entries.erase(st.entries.begin() + static_cast<std::ptrdiff_t>(i));
    st.version++;
    return true;
  }
  return false;
}

namespace {

// Int constants (not bools, not sizes computed from symbols) of an argument, recursively.
void arg_ints(const ir::Arg& a, std::set<int64_t>& out) {
  if (a.kind == ir::Arg::Kind::Node || a.sym || a.sym_slice || a.fsym) return;
  if (a.kind != ir::Arg::Kind::Const) {
    for (const ir::Arg& i : a.items) arg_ints(i, out);
    return;
  }
  PyObject* v = a.value.get();
  if (!v) return;
  if (PyLong_CheckExact(v)) {
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (n == -1 && PyErr_Occurred()) PyErr_Clear();
    if (!overflow && n >= 2) out.insert(n);
  } else if (PyTuple_Check(v)) {  // a torch.Size constant
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); ++i) {
      PyObject* item = PyTuple_GET_ITEM(v, i);
      if (!PyLong_CheckExact(item)) continue;
      int overflow = 0;
      long long n = PyLong_AsLongLongAndOverflow(item, &overflow);
      if (n == -1 && PyErr_Occurred()) PyErr_Clear();
      if (!overflow && n >= 2) out.insert(n);
    }
  }
}

}  // namespace

namespace {
// Whether `t` is an nn.Parameter no dimension of which is marked dynamic.
bool unmarked_parameter(PyObject* t) {
  int is_param = PyObject_IsInstance(t, capture::torch_api().parameter_type.get());
  if (is_param < 0) throw PythonError();
  return is_param && !has_marks(t, "_dynamo_dynamic_indices") &&
         !has_marks(t, "_dynamo_weak_dynamic_indices");
}
}  // namespace

std::vector<int64_t> without_leading_input_sizes(std::vector<int64_t> static_sizes,
                                                 PyObject* const* inputs, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!inputs[i]) continue;
    int tensor = PyObject_IsInstance(inputs[i], capture::torch_api().tensor_type.get());
    if (tensor < 0) throw PythonError();
    if (!tensor || unmarked_parameter(inputs[i])) continue;
    PyRef cuda = PyRef::steal(PyObject_GetAttrString(inputs[i], "is_cuda"));
    if (!cuda) throw PythonError();
    if (cuda.get() == Py_True) continue;
    PyRef shape = PyRef::steal(PyObject_GetAttrString(inputs[i], "shape"));
    if (!shape || !PyTuple_Check(shape.get())) throw PythonError();
    for (Py_ssize_t d = 0; d + 1 < PyTuple_GET_SIZE(shape.get()); ++d) {
      int64_t v = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.get(), d));
      auto it = std::lower_bound(static_sizes.begin(), static_sizes.end(), v);
      if (it != static_sizes.end() && *it == v) static_sizes.erase(it);
    }
    if (PyErr_Occurred()) throw PythonError();
  }
  return static_sizes;
}

std::vector<int64_t> static_sizes_of(const capture::CaptureResult& res, bool generic) {
  std::set<int64_t> fixed, inputs, consts, leading;
  if (!res.graph) return {};
  std::vector<ir::Node*> ph = res.graph->placeholders();
  for (size_t i = 0; i < ph.size() && i < res.example_inputs.size(); ++i) {
    PyObject* t = res.example_inputs[i].get();
    if (!t || !ph[i]->meta) continue;
    const bool param = unmarked_parameter(t);
    for (int64_t n : ph[i]->meta->sizes) (param ? fixed : inputs).insert(n);
    const auto& sizes = ph[i]->meta->sizes;
    if (!param && !sizes.empty()) leading.insert(sizes.begin(), sizes.end() - 1);
  }
  if (generic)
    for (const auto& n : res.graph->nodes()) {
      for (const ir::Arg& a : n->args) arg_ints(a, consts);
      for (const auto& kv : n->kwargs) arg_ints(kv.second, consts);
    }
  for (int64_t n : consts)
    if (!inputs.count(n)) fixed.insert(n);
  for (int64_t n : leading) fixed.erase(n);
  fixed.erase(0);
  fixed.erase(1);
  return {fixed.begin(), fixed.end()};
}

}  // namespace tl::frame
