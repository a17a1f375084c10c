#include "pipeline/matmul_epilogues.h"

#include <sstream>
#include <unordered_set>

#include "core/counters.h"
#include "core/dump_dir.h"
#include "core/errors.h"
#include "core/python_helpers.h"
#include "ir/dtype.h"
#include "passes/matmul_epilogue.h"
#include "runtime/cuda_autotune.h"

namespace tl::pipeline {
namespace {

PyRef check(PyObject* r) {
  if (!r) throw PythonError();
  return PyRef::steal(r);
}

PyRef int_list(const std::vector<int64_t>& v) {
  PyRef l = check(PyList_New(static_cast<Py_ssize_t>(v.size())));
  for (size_t i = 0; i < v.size(); ++i)
    PyList_SET_ITEM(l.get(), static_cast<Py_ssize_t>(i),
                    check(PyLong_FromLongLong(v[i])).release());
  return l;
}

std::string ints_text(const std::vector<int64_t>& v) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  s << "]";
  return s.str();
}

// What the trials of `s` need (torchlite/_epilogue_trials.py): the operands' sizes and
// strides, dtype, device, the activation and whether its kernel goes away, whether the product
// is a graph output (a training forward's saved pre-activation).
PyRef site_dict(const passes::EpilogueSite& s) {
  const ir::TensorMeta& x = *s.input->meta;
  const ir::TensorMeta& w = *s.weight->meta;
  return check(Py_BuildValue(
      "{s:O,s:(OO),s:(OO),s:O,s:O,s:s,s:O,s:O,s:L,s:L,s:L}", "linear",
      s.linear ? Py_True : Py_False, "input", int_list(x.sizes).get(), int_list(x.strides).get(),
      "weight", int_list(w.sizes).get(), int_list(w.strides).get(), "dtype", x.dtype.get(),
      "device", x.device.get(), "activation",
      !s.activation ? ""
      : s.gelu      ? "gelu"
                    : "relu",
      "activation_alone", s.activation_alone ? Py_True : Py_False, "product_out",
      s.product_out ? Py_True : Py_False, "m", static_cast<long long>(s.m), "k",
      static_cast<long long>(s.k), "n", static_cast<long long>(s.n)));
}

// The disk-cache key of a site's choice (with the labels and the GPU, runtime/cuda_autotune.h).
std::string site_key(const passes::EpilogueSite& s) {
  const ir::TensorMeta& x = *s.input->meta;
  const ir::TensorMeta& w = *s.weight->meta;
  auto t = ir::scalar_type_of(x.dtype.get());
  std::ostringstream k;
  k << "matmul epilogue\n"
    << (s.linear ? "linear" : "addmm") << " " << (t ? ir::scalar_type_name(*t) : "?") << " x"
    << ints_text(x.sizes) << ints_text(x.strides) << " w" << ints_text(w.sizes)
    << ints_text(w.strides) << " act "
    << (!s.activation ? "none"
        : s.gelu      ? "gelu"
                      : "relu")
    << (s.activation_alone ? " alone" : "") << (s.product_out ? " out" : "");
  return k.str();
}

// Times the forms of `s` (or reads the choice) and applies the one chosen; true when the graph
// changed. `line`: the trace's line for it.
bool try_site(ir::Graph& g, const passes::EpilogueSite& s, const std::string& gpu,
              const PyRef& fake, const PyRef& make_calls, std::string& line) {
  const bool faked = fake.get() != Py_None;
  std::vector<std::string> labels;
  for (passes::EpilogueForm f : s.forms) labels.push_back(passes::form_label(s, f));
  line = "matmul %" + s.product->name + " " + std::to_string(s.m) + "x" + std::to_string(s.k) +
         "x" + std::to_string(s.n) + ": ";
  try {
    PyRef desc = site_dict(s);
    PyRef calls;  // label -> a callable queueing that form's torch ops; built on first use
    auto time_us = [&](size_t v) -> double {
      PyRef label = check(PyUnicode_FromString(labels[v].c_str()));
      if (faked) {
        PyRef us =
            check(PyObject_CallFunctionObjArgs(fake.get(), desc.get(), label.get(), nullptr));
        double d = PyFloat_AsDouble(us.get());
        if (PyErr_Occurred()) throw PythonError();
        return d;
      }
      if (!calls) calls = check(PyObject_CallOneArg(make_calls.get(), desc.get()));
      PyObject* fn = PyDict_GetItemWithError(calls.get(), label.get());  // borrowed
      if (!fn) {
        if (!PyErr_Occurred()) TL_THROW(Internal) << "no trial call for " << labels[v];
        throw PythonError();
      }
      PyRef f = PyRef::borrow(fn);
      return runtime::call_timer([f] { check(PyObject_CallNoArgs(f.get())); })();
    };
    runtime::VariantChoice c = runtime::choose_variant(site_key(s), gpu, labels, time_us);
    line += c.report;
    if (c.variant == 0) return false;
    if (passes::apply_matmul_epilogue(g, s, s.forms[c.variant])) return true;
    line += " (not applied: the new layouts differ; kept addmm)";
  } catch (const PythonError&) {
    if (fatal_python_error_pending()) throw;
    PyErr_Clear();
    line += "not tuned (a trial failed)";
  } catch (const Error& e) {
    line += std::string("not tuned: ") + e.what();
  }
  return false;
}

}  // namespace

int choose_matmul_epilogues(ir::Graph& g, PassState& st) {
  if (st.ctx.runtime_sizes) return 0;
  PyRef fake = check(PyObject_CallNoArgs(python_helper("epilogue_trials.fake_timer").get()));
  const bool faked = fake.get() != Py_None;
  if (!st.device.cuda && !faked) return 0;
  // NOTE: a rewrite erases nodes another site may name (the activation that is the next
  // product's input): after one, the sites are found again; each product is tried once.
  std::unordered_set<std::string> tried;
  std::string gpu;
  PyRef make_calls;
  std::string report;
  int changed = 0;
  for (bool again = true; again;) {
    again = false;
    for (const passes::EpilogueSite& s : passes::find_matmul_epilogues(g)) {
      if (!tried.insert(s.product->name).second) continue;
      if (gpu.empty()) {
        gpu = faked ? "test timer" : runtime::gpu_identity(st.device.index);
        make_calls = python_helper("epilogue_trials.calls");
      }
      std::string line;
      again = try_site(g, s, gpu, fake, make_calls, line);
      report += line + "\n";
      if (again) {
        ++changed;
        break;
      }
    }
  }
  counters().matmul_epilogues_changed += changed;
  if (!st.ctx.trace_dir.empty()) write_dump(st.ctx.trace_dir + "autotune_epilogues.txt", report);
  return changed;
}

}  // namespace tl::pipeline
