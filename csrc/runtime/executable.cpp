#include "runtime/executable.h"

#include "core/errors.h"

namespace tl::runtime {

std::unique_ptr<Executable> Executable::kernels(std::unique_ptr<CompiledGraph> compiled) {
  TL_CHECK(compiled) << "an executable of kernels without kernels";
  std::unique_ptr<Executable> ex(new Executable(Kind::Kernels));
  ex->compiled_ = std::move(compiled);
  return ex;
}

std::unique_ptr<Executable> Executable::op_by_op(std::shared_ptr<const ir::Graph> graph,
                                                 const ir::Schedule& schedule) {
  std::unique_ptr<Executable> ex(new Executable(Kind::OpByOp));
  ex->runner_ = std::make_unique<GraphRunner>(std::move(graph), schedule);
  return ex;
}

std::unique_ptr<Executable> Executable::callable(PyRef fn) {
  TL_CHECK(fn) << "an executable callable without a callable";
  std::unique_ptr<Executable> ex(new Executable(Kind::Callable));
  ex->fn_ = std::move(fn);
  return ex;
}

std::vector<PyRef> Executable::run(PyObject* const* inputs, size_t n_inputs) {
  if (compiled_) return compiled_->run(inputs, n_inputs);
  if (runner_) return runner_->run(inputs, n_inputs);
  PyRef args = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(n_inputs)));
  if (!args) throw PythonError();
  for (size_t i = 0; i < n_inputs; ++i)
    PyTuple_SET_ITEM(args.get(), i, PyRef::borrow(inputs[i]).release());
  PyRef res = PyRef::steal(PyObject_Call(fn_.get(), args.get(), nullptr));
  if (!res) throw PythonError();
  PyRef seq = PyRef::steal(PySequence_Fast(res.get(), "backend must return a tuple or list"));
  if (!seq) throw PythonError();
  std::vector<PyRef> outputs;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq.get()); ++i)
    outputs.push_back(PyRef::borrow(PySequence_Fast_GET_ITEM(seq.get(), i)));
  return outputs;
}

std::vector<PyRef> Executable::run_owned(std::vector<PyRef> inputs) {
  if (compiled_) return compiled_->run_owned(std::move(inputs));
  if (runner_) return runner_->run_owned(std::move(inputs));
  std::vector<PyObject*> in = borrowed(inputs);
  return run(in.data(), in.size());
}

const ir::Node* Executable::failed_node() const {
  if (compiled_) return compiled_->failed_node();
  return runner_ ? runner_->failed_node() : nullptr;
}

bool Executable::failed_before_effects() const {
  if (compiled_) return compiled_->failed_before_effects();
  return runner_ && runner_->failed_before_effects();
}

bool Executable::failed_before_lasting_effects() const {
  if (compiled_) return compiled_->failed_before_lasting_effects();
  if (runner_) return runner_->failed_before_lasting_effects();
  // NOTE: called with the run's error fetched (captured_frame.cpp): attribute reads may fail.
  static const char* kMark = "failed_in_compiled_forward";
  if (!fn_ || !PyObject_HasAttrString(fn_.get(), kMark)) return false;
  PyRef mark = PyRef::steal(PyObject_GetAttrString(fn_.get(), kMark));
  if (!mark || PyObject_SetAttrString(fn_.get(), kMark, Py_False) < 0) {
    PyErr_Clear();
    return false;
  }
  return mark.get() == Py_True;
}

PyRef outputs_as_tuple(std::vector<PyRef> outputs) {
  PyRef tuple = PyRef::steal(PyTuple_New(static_cast<Py_ssize_t>(outputs.size())));
  if (!tuple) throw PythonError();
  for (size_t i = 0; i < outputs.size(); ++i)
    PyTuple_SET_ITEM(tuple.get(), i, outputs[i].release());
  return tuple;
}

}  // namespace tl::runtime
