#!/usr/bin/env bash
# The Python 3.13 suite: run before every submission (not part of tests/run_all.sh, which CI
# runs: on 2 cores the torch download, the second build and these suites add about 20 minutes,
# past CI's 30-minute budget; docs/internals/python-versions.md).
#   bash tests/run_py313.sh          # frame, capture, guards, breaks, conformance
#   bash tests/run_py313.sh --all    # also the CPU-compiler suites (passes, models)
# Uses PYTHON313 if set, else python3.13 on PATH, else pyenv's 3.13; skips (exit 0) when none.
# The virtual environment is .venv313/ (torch from PyPI: a CUDA build that runs on the CPU).
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

[[ -x .venv313/bin/python ]] || "$base" -m venv .venv313 || exit 1
py="$(PYTHON="$PWD/.venv313/bin/python" bash .ci/install.sh | tail -n 1)" \
  || { echo "3.13 install/build failed" >&2; exit 1; }

suites=(tests/python/frame tests/python/capture tests/python/guards tests/python/breaks
        tests/python/conformance)
[[ $all == 1 ]] && suites+=(tests/python/passes tests/python/models)
"$py" -m pytest -q -p no:cacheprovider "${suites[@]}"
