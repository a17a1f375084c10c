// Catch2 runner that starts an embedded interpreter first: most of torchlite's
// C++ works on CPython objects (pybind11's tests/test_with_catch/catch.cpp
// does the same).
#define CATCH_CONFIG_RUNNER
#include <Python.h>

#include <catch2/catch.hpp>

int main(int argc, char* argv[]) {
  Py_Initialize();
  int result = Catch::Session().run(argc, argv);
  // NOTE: no Py_Finalize: torch (if a test imported it) does not shut down cleanly.
  return result;
}
