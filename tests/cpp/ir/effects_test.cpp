#include "ir/effects.h"

#include <catch2/catch.hpp>

using tl::PyRef;
using namespace tl::ir;

namespace {

PyRef eval(const char* expr) {
  PyRef ns = PyRef::steal(PyDict_New());
  PyDict_SetItemString(ns.get(), "__builtins__", PyEval_GetBuiltins());
  PyRef r = PyRef::steal(PyRun_String(expr, Py_eval_input, ns.get(), ns.get()));
  if (!r) PyErr_Print();
  REQUIRE(r);
  return r;
}

Arg flag(bool v) { return Arg::constant(PyRef::borrow(v ? Py_True : Py_False)); }

}  // namespace

TEST_CASE("a trailing underscore is in place except on Python's operator functions", "[ir]") {
  CHECK(in_place_name("torch.relu_"));
  CHECK(in_place_name("add_"));
  CHECK(in_place_name("torch.Tensor.copy_"));
  CHECK_FALSE(in_place_name("operator.and_"));
  CHECK_FALSE(in_place_name("_operator.or_"));
  CHECK_FALSE(in_place_name("__and__"));
  CHECK_FALSE(in_place_name("torch.add"));
}

TEST_CASE("a mask's & and spelled-out defaults are not visible effects", "[ir]") {
  Graph g;
  Node* x = g.add_placeholder("x", Source::local(0, "x"));
  Node* band = g.add_call_function(eval("__import__('operator').and_"),
                                   {Arg::of_node(x), Arg::of_node(x)}, {});
  Node* iand = g.add_call_function(eval("__import__('operator').iand"),
                                   {Arg::of_node(x), Arg::of_node(x)}, {});
  CHECK_FALSE(visible_effect(*band));
  CHECK(visible_effect(*iand));

  Node* relu_off = g.add_call_method("relu", {Arg::of_node(x)}, {{"inplace", flag(false)}});
  Node* relu_on = g.add_call_method("relu", {Arg::of_node(x)}, {{"inplace", flag(true)}});
  Node* relu_traced = g.add_call_method("relu", {Arg::of_node(x)}, {{"inplace", Arg::of_node(x)}});
  CHECK_FALSE(visible_effect(*relu_off));
  CHECK(visible_effect(*relu_on));
  CHECK(visible_effect(*relu_traced));  // not a constant: assume it writes

  Node* out_none =
      g.add_call_method("add", {Arg::of_node(x)}, {{"out", Arg::constant(PyRef::borrow(Py_None))}});
  Node* out_given = g.add_call_method("add", {Arg::of_node(x)}, {{"out", Arg::of_node(x)}});
  CHECK_FALSE(visible_effect(*out_none));
  CHECK(visible_effect(*out_given));
}

TEST_CASE("dropout is a random draw unless training is the constant False", "[ir]") {
  Graph g;
  Node* x = g.add_placeholder("x", Source::local(0, "x"));
  Arg p = Arg::constant(PyRef::steal(PyFloat_FromDouble(0.1)));
  Node* eval_pos = g.add_call_method("dropout", {Arg::of_node(x), p, flag(false)}, {});
  Node* eval_kw = g.add_call_method("dropout", {Arg::of_node(x), p}, {{"training", flag(false)}});
  Node* torch_eval = g.add_call_method("dropout", {Arg::of_node(x), p}, {{"train", flag(false)}});
  Node* train = g.add_call_method("dropout", {Arg::of_node(x), p, flag(true)}, {});
  Node* default_train = g.add_call_method("dropout", {Arg::of_node(x), p}, {});
  Node* alpha_eval = g.add_call_method("alpha_dropout", {Arg::of_node(x), p, flag(false)}, {});
  CHECK(is_eval_dropout(*eval_pos));
  CHECK_FALSE(visible_effect(*eval_pos));
  CHECK_FALSE(visible_effect(*eval_kw));
  CHECK_FALSE(visible_effect(*torch_eval));
  CHECK_FALSE(visible_effect(*alpha_eval));
  CHECK(visible_effect(*train));
  CHECK(visible_effect(*default_train));
}

TEST_CASE("writing a tensor the graph made is invisible; writing an input or a draw is not",
          "[ir]") {
  Graph g;
  Node* x = g.add_placeholder("x", Source::local(0, "x"));
  PyRef op_mod = eval("__import__('operator')");
  auto op = [&](const char* name) {
    return PyRef::steal(PyObject_GetAttrString(op_mod.get(), name));
  };
  Arg zero = Arg::constant(PyRef::steal(PyLong_FromLong(0)));
  // buckets = 0; buckets += x; buckets += x  (T5's relative position buckets)
  Node* from_number = g.add_call_function(op("iadd"), {zero, Arg::of_node(x)}, {});
  Node* onto_fresh =
      g.add_call_function(op("iadd"), {Arg::of_node(from_number), Arg::of_node(x)}, {});
  CHECK_FALSE(visible_effect(*from_number));
  CHECK_FALSE(visible_effect(*onto_fresh));

  Node* product = g.add_call_function(op("mul"), {Arg::of_node(x), Arg::of_node(x)}, {});
  Node* view = g.add_call_method("view", {Arg::of_node(product), zero}, {});
  Node* add_on_view_of_fresh = g.add_call_method("add_", {Arg::of_node(view), zero}, {});
  Node* setitem_fresh =
      g.add_call_function(op("setitem"), {Arg::of_node(product), zero, Arg::of_node(x)}, {});
  CHECK_FALSE(visible_effect(*add_on_view_of_fresh));
  CHECK_FALSE(visible_effect(*setitem_fresh));

  Node* input_view = g.add_call_method("view", {Arg::of_node(x), zero}, {});
  Node* add_on_input = g.add_call_method("add_", {Arg::of_node(x), zero}, {});
  Node* add_on_input_view = g.add_call_method("add_", {Arg::of_node(input_view), zero}, {});
  Node* setitem_input =
      g.add_call_function(op("setitem"), {Arg::of_node(input_view), zero, Arg::of_node(x)}, {});
  Node* iadd_input = g.add_call_function(op("iadd"), {Arg::of_node(x), Arg::of_node(x)}, {});
  CHECK(visible_effect(*add_on_input));
  CHECK(visible_effect(*add_on_input_view));
  CHECK(visible_effect(*setitem_input));
  CHECK(visible_effect(*iadd_input));

  // a random draw into a fresh tensor still advances the generator
  Node* draw = g.add_call_method("normal_", {Arg::of_node(product)}, {});
  CHECK(visible_effect(*draw));
}

TEST_CASE("draws into new tensors and grad-mode switches are undoable; writes and seeds last",
          "[ir]") {
  Graph g;
  Node* x = g.add_placeholder("x", Source::local(0, "x"));
  Arg p = Arg::constant(PyRef::steal(PyFloat_FromDouble(0.1)));
  Node* train = g.add_call_method("dropout", {Arg::of_node(x), p, flag(true)}, {});
  Node* rand = g.add_call_method("rand_like", {Arg::of_node(x)}, {});
  Node* grad_off = g.add_call_method("_set_grad_enabled", {flag(false)}, {});
  CHECK(undoable_effect(*train));
  CHECK(undoable_effect(*rand));
  CHECK(undoable_effect(*grad_off));
  CHECK_FALSE(lasting_effect(*train));
  CHECK_FALSE(lasting_effect(*grad_off));

  // NOTE: the input is written (its draws would stay after a rerun), or the state is reset.
  Node* inplace_input =
      g.add_call_method("dropout", {Arg::of_node(x), p, flag(true), flag(true)}, {});
  Node* normal_input = g.add_call_method("normal_", {Arg::of_node(x)}, {});
  Node* seed =
      g.add_call_method("manual_seed", {Arg::constant(PyRef::steal(PyLong_FromLong(1)))}, {});
  Node* add_input = g.add_call_method("add_", {Arg::of_node(x), Arg::of_node(x)}, {});
  Node* drawn_out = g.add_call_method("rand", {}, {{"out", Arg::of_node(x)}});
  for (Node* n : {inplace_input, normal_input, seed, add_input, drawn_out}) {
    CHECK(visible_effect(*n));
    CHECK(lasting_effect(*n));
  }
  Node* eval_dropout = g.add_call_method("dropout", {Arg::of_node(x), p, flag(false)}, {});
  CHECK_FALSE(undoable_effect(*eval_dropout));
  CHECK_FALSE(lasting_effect(*eval_dropout));
}
