#!/usr/bin/env bash
# Installs, builds, checks formatting (clang-format, ruff), runs the C++ tests (ctest) and then
# pytest; pytest's summary is the last line. Exits non-zero when any of them fails.
set -uo pipefail
cd "$(dirname "$0")/.."
py="$(bash .ci/install.sh --tests | tail -n 1)" || { echo "install/build failed" >&2; exit 1; }
export PATH="$(dirname "$py"):$PATH"  # cmake, ctest and ninja from pip when in a venv

echo "lines of code per folder:"
for d in csrc/* torchlite tests/cpp tests/python bench examples; do
  n=$(find "$d" -type f \( -name '*.py' -o -name '*.cpp' -o -name '*.h' -o -name '*.c' \) -print0 \
      | xargs -0 -r cat | wc -l)
  printf "%7d  %s\n" "$n" "$d"
done

# Formatting and lint (.clang-format, [tool.ruff] in pyproject.toml): a diff fails the run, as a test does.
fmt_rc=0
find csrc tests/cpp -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.c' \) -print0 \
  | xargs -0 clang-format --dry-run --Werror || { echo "clang-format: run clang-format -i on the files above" >&2; fmt_rc=1; }
"$py" -m ruff check torchlite tests bench examples || fmt_rc=1
"$py" -m ruff format --check torchlite tests bench examples || { echo "ruff: run ruff format" >&2; fmt_rc=1; }

# NOTE: the C++ tests reuse the folder the extension was built in (build/<SOABI>), so the
# core library compiles once; a fresh folder is configured only when that one is missing.
soabi="$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("SOABI"))')"
dir="build/$soabi"
[[ -f "$dir/CMakeCache.txt" ]] || dir="build/ctest"
gen=(); [[ -f "$dir/CMakeCache.txt" ]] || gen=(-G Ninja)
cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$py" \
  -Dpybind11_DIR="$("$py" -m pybind11 --cmakedir)" -DTORCHLITE_BUILD_TESTS=ON >/dev/null
cmake --build "$dir" --target torchlite_tests -j "$(nproc)" && ctest --test-dir "$dir" --output-on-failure
cpp_rc=$?
[[ $cpp_rc -eq 0 ]] || echo "C++ tests failed (exit $cpp_rc); running pytest anyway" >&2

"$py" -m pytest tests/python -q
py_rc=$?
exit $(( cpp_rc != 0 || py_rc != 0 || fmt_rc != 0 ))
