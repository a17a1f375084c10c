// Catch2 runner that starts an embedded interpreter first: most of torchlite's
// C++ works on CPython objects (pybind11's tests/test_with_catch/catch.cpp
// does the same).
#define CATCH_CONFIG_RUNNER
#include <Python.h>

#include <catch2/catch.hpp>

int main(int argc, char* argv[]) {
  Py_Initialize();
  // NOTE: this executable links LLVM into its global symbol namespace; triton's extension
  // bundles another LLVM whose static constructors then bind to ours and crash at load (torch's
  // CUDA wheels import triton from some Python paths the passes reach). Python itself loads
  // _C with local symbols, so only this runner needs triton kept out ("import triton" raises
  // ImportError, which torch treats as "no triton").
  PyRun_SimpleString("import sys; sys.modules.setdefault('triton', None)");
  int result = Catch::Session().run(argc, argv);
  // NOTE: no Py_Finalize: torch (if a test imported it) does not shut down cleanly.
  return result;
}
