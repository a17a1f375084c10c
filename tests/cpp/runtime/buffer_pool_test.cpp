// The CPU buffer pool: extents of strided layouts, tensors torch accepts, and
// blocks coming back for reuse only after their tensor is gone.
#include "runtime/buffer_pool.h"

#include <catch2/catch.hpp>
#include <thread>

#include "core/errors.h"

using tl::PyRef;
using tl::ir::ScalarType;
using tl::runtime::pool_stats;
using tl::runtime::pooled_empty_strided;
using tl::runtime::strided_extent_bytes;

namespace {
// `expr` evaluated with `t` bound; a new reference.
PyRef eval_with(PyObject* t, const char* expr) {
  PyRef ns = PyRef::steal(PyDict_New());
  PyDict_SetItemString(ns.get(), "__builtins__", PyEval_GetBuiltins());
  PyDict_SetItemString(ns.get(), "t", t);
  PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
  REQUIRE(torch);
  PyDict_SetItemString(ns.get(), "torch", torch.get());
  PyRef r = PyRef::steal(PyRun_String(expr, Py_eval_input, ns.get(), ns.get()));
  if (!r) PyErr_Print();
  REQUIRE(r);
  return r;
}

std::string str(const PyRef& v) {
  PyRef s = PyRef::steal(PyObject_Str(v.get()));
  REQUIRE(s);
  return PyUnicode_AsUTF8(s.get());
}
}  // namespace

TEST_CASE("strided extents count the last element's end", "[runtime][pool]") {
  CHECK(strided_extent_bytes({4, 8}, {8, 1}, ScalarType::F32) == 128);
  CHECK(strided_extent_bytes({4, 8}, {1, 4}, ScalarType::F32) == 128);  // transposed
  CHECK(strided_extent_bytes({4, 8}, {0, 1}, ScalarType::F64) == 64);   // broadcast rows
  CHECK(strided_extent_bytes({2, 3, 5}, {30, 10, 2}, ScalarType::BF16) == 2 * 59);
  CHECK(strided_extent_bytes({4, 0}, {1, 1}, ScalarType::F32) == 0);
  CHECK(strided_extent_bytes({}, {}, ScalarType::I64) == 8);
}

TEST_CASE("pooled tensors have the asked layout and their blocks come back", "[runtime][pool]") {
  const std::vector<int64_t> sizes{2048, 1024}, strides{1, 2048};  // a transposed layout
  PyRef a = pooled_empty_strided(sizes, strides, ScalarType::F32);
  REQUIRE(a);
  CHECK(str(eval_with(a.get(), "(tuple(t.shape), t.stride(), t.dtype, t.device.type)")) ==
        "((2048, 1024), (1, 2048), torch.float32, 'cpu')");
  // Writable over its whole extent, and it reads back what was written.
  CHECK(eval_with(a.get(), "t.fill_(3).sum().item() == 3 * 2048 * 1024").get() == Py_True);
  PyRef ptr = eval_with(a.get(), "t.data_ptr()");

  PyRef b = pooled_empty_strided(sizes, strides, ScalarType::F32);  // `a` alive: another block
  REQUIRE(b);
  CHECK(PyObject_RichCompareBool(ptr.get(), eval_with(b.get(), "t.data_ptr()").get(), Py_NE) == 1);

  int64_t reused = pool_stats().reused;
  a = PyRef();  // the tensor's deleter gives the block back
  PyRef c = pooled_empty_strided(sizes, strides, ScalarType::F32);
  REQUIRE(c);
  CHECK(pool_stats().reused == reused + 1);
  CHECK(PyObject_RichCompareBool(ptr.get(), eval_with(c.get(), "t.data_ptr()").get(), Py_EQ) == 1);
}

TEST_CASE("every dtype goes through DLPack", "[runtime][pool]") {
  const std::pair<ScalarType, const char*> types[] = {
      {ScalarType::F32, "torch.float32"}, {ScalarType::F64, "torch.float64"},
      {ScalarType::F16, "torch.float16"}, {ScalarType::BF16, "torch.bfloat16"},
      {ScalarType::I8, "torch.int8"},     {ScalarType::I16, "torch.int16"},
      {ScalarType::I32, "torch.int32"},   {ScalarType::I64, "torch.int64"},
      {ScalarType::U8, "torch.uint8"},    {ScalarType::Bool, "torch.bool"}};
  for (auto [type, name] : types) {
    PyRef t = pooled_empty_strided({4096, 4096}, {4096, 1}, type);
    REQUIRE(t);
    CHECK(str(eval_with(t.get(), "t.dtype")) == name);
  }
}
