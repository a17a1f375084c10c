#!/usr/bin/env bash
# Installs what torchlite needs on a fresh Debian 12 machine with Python 3.11, 3.12 or 3.13, then
# builds and installs torchlite in editable mode. Prints the Python to use on its last line.
#   bash .ci/install.sh           # for the demo: torch, pytest
#   bash .ci/install.sh --tests   # also Catch2, clang-format, ruff and the model-test packages
# TORCHLITE_SKIP_INSTALL=1 skips everything but the build (for a machine already set up).
set -euo pipefail
cd "$(dirname "$0")/.."
tests=0; [[ "${1:-}" == "--tests" ]] && tests=1
log() { echo "[install] $*" >&2; }

sudo_cmd=""; [[ "$(id -u)" -ne 0 ]] && sudo_cmd="sudo"
apt_missing=()
command -v ninja >/dev/null || apt_missing+=(ninja-build)
command -v g++ >/dev/null || apt_missing+=(g++)
[[ $tests == 1 && ! -f /usr/include/catch2/catch.hpp ]] && apt_missing+=(catch2)
# tests/run_all.sh checks the C++ formatting (.clang-format) before building.
[[ $tests == 1 ]] && ! command -v clang-format >/dev/null && apt_missing+=(clang-format)
# LLVM 19 builds the CPU compiler (csrc/codegen/cpu); without it torchlite still works op by op.
[[ -d /usr/lib/llvm-19/lib/cmake/llvm ]] || apt_missing+=(llvm-19-dev)

py="${PYTHON:-$(command -v python3 || command -v python)}"
# NOTE: Debian's own Python refuses pip installs (PEP 668): use a virtual environment there.
if "$py" -c 'import sys, sysconfig, os; sys.exit(not (sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))))'; then
  "$py" -c 'import venv, ensurepip' 2>/dev/null || apt_missing+=(python3-venv)
  use_venv=1
else
  use_venv=0
fi
"$py" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || apt_missing+=(python3-dev)

if [[ "${TORCHLITE_SKIP_INSTALL:-0}" != 1 && ${#apt_missing[@]} -gt 0 ]]; then
  log "apt-get install ${apt_missing[*]}"
  $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq "${apt_missing[@]}" >&2
fi
if [[ $use_venv == 1 ]]; then
  [[ -x .venv/bin/python ]] || "$py" -m venv .venv >&2
  py="$PWD/.venv/bin/python"
fi

if [[ "${TORCHLITE_SKIP_INSTALL:-0}" != 1 ]]; then
  pip=("$py" -m pip install -q --disable-pip-version-check)
  log "pip install build tools, torch, pytest"
  "${pip[@]}" setuptools wheel "pybind11>=2.11" "cmake>=3.24" ninja >&2
  # NOTE: torch 2.13.0 is the tested release; where it has no wheel for this Python (or a
  # local cap excludes it), the newest 2.x this index offers for it (2.14.1 on 3.13 here).
  "${pip[@]}" torch==2.13.0 pytest >&2 || {
    log "no torch 2.13.0 for $("$py" -c 'import sys; print(sys.version.split()[0])'): newest torch 2.x"
    "${pip[@]}" "torch>=2.13,<3" pytest >&2
  }
  torch_pin="torch==$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')"
  if [[ $tests == 1 ]]; then
    log "pip install ruff timm transformers"
    "${pip[@]}" ruff >&2
    # NOTE: torch pinned again: else timm's newest torchvision upgrades it (to a CUDA build
    # with triton, whose bundled LLVM crashes the C++ test binary that links LLVM 19).
    "${pip[@]}" timm transformers "$torch_pin" >&2
    # NVRTC compiles the CUDA kernels to PTX in CI (no GPU needed); optional: a failed install only skips those tests.
    "${pip[@]}" nvidia-cuda-nvrtc >&2 || log "nvidia-cuda-nvrtc not installed: CUDA code generation tests will skip"
    # NOTE: PyPI's torchvision is a CUDA build; next to the CPU-only torch its C ops do not
    # load. tests/python/conftest.py lets timm import anyway (see _work_around_mismatched_torchvision).
  fi
fi

log "building torchlite (pip install --no-build-isolation -e .)"
"$py" -m pip install -q --disable-pip-version-check --no-build-isolation -e . >&2
echo "$py"
