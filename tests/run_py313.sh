#!/usr/bin/env bash
# The Python 3.13 suite, run before every submission. It is not part of tests/run_all.sh (what
# CI runs): on 2 cores the torch download (about 4.5 minutes), a second cold build and these
# suites do not fit next to the 3.11 run in CI's 30-minute budget
# (docs/internals/python-versions.md has the measured times).
#   bash tests/run_py313.sh          # C++ bytecode tests, then frame, capture, guards, breaks,
#                                    # conformance, passes (the CPU compiler), api, pipeline
#   bash tests/run_py313.sh --all    # C++ tests, then the whole of tests/python
# Uses PYTHON313 if set, else python3.13 on PATH, else pyenv's 3.13; skips (exit 0) when none.
# The virtual environment is .venv313/ (torch from PyPI: a CUDA build that runs on the CPU);
# TORCHLITE_SKIP_INSTALL=1 (with PYTHON313 naming a ready environment's Python) only builds.
# Exits non-zero when the build, the C++ tests or pytest fail.
set -uo pipefail
cd "$(dirname "$0")/.."
all=0; [[ "${1:-}" == "--all" ]] && all=1

base="${PYTHON313:-$(command -v python3.13 || true)}"
if [[ -z "$base" ]]; then
  for p in "$HOME"/.pyenv/versions/3.13*/bin/python; do
    [[ -x "$p" ]] && { base="$p"; break; }
  done
fi
if [[ -z "$base" || ! -x "$base" ]]; then
  echo "Python 3.13 not found: the 3.13 suite is skipped" >&2
  exit 0
fi
if "$base" -c 'import sysconfig, sys; sys.exit(not sysconfig.get_config_var("Py_GIL_DISABLED"))'; then
  echo "$base is a free-threaded build, which torchlite refuses: the 3.13 suite is skipped" >&2
  exit 0
fi

if [[ "${TORCHLITE_SKIP_INSTALL:-0}" == 1 ]]; then
  py="$base"
  "$py" -m pip install -q --disable-pip-version-check --no-build-isolation -e . >&2 \
    || { echo "3.13 build failed" >&2; exit 1; }
else
  [[ -x .venv313/bin/python ]] || "$base" -m venv .venv313 || exit 1
  py="$(PYTHON="$PWD/.venv313/bin/python" bash .ci/install.sh --tests | tail -n 1)" \
    || { echo "3.13 install/build failed" >&2; exit 1; }
fi
export PATH="$(dirname "$py"):$PATH"  # cmake, ctest and ninja from pip

# NOTE: the C++ tests hold the hand-written 3.13 bytecode (tests/cpp/bytecode/*py313*), which
# only a 3.13 build compiles; they reuse the extension's build folder (the core library is
# built once). The embedded interpreter finds torch through the environment's site-packages.
soabi="$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("SOABI"))')"
site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
dir="build/$soabi"
cmake -S . -B "$dir" -DPython_EXECUTABLE="$py" -Dpybind11_DIR="$("$py" -m pybind11 --cmakedir)" \
  -DTORCHLITE_BUILD_TESTS=ON >/dev/null \
  && cmake --build "$dir" --target torchlite_tests -j "$(nproc)" \
  && PYTHONPATH="$PWD:$site" "$dir/torchlite_tests"
cpp_rc=$?
[[ $cpp_rc -eq 0 ]] || echo "3.13 C++ tests failed (exit $cpp_rc); running pytest anyway" >&2

suites=(tests/python/frame tests/python/capture tests/python/guards tests/python/breaks
        tests/python/conformance tests/python/passes tests/python/api tests/python/pipeline)
[[ $all == 1 ]] && suites=(tests/python)
"$py" -m pytest -q -p no:cacheprovider "${suites[@]}"
py_rc=$?
exit $(( cpp_rc != 0 || py_rc != 0 ))
