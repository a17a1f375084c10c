#!/usr/bin/env bash
# Installs torchlite's dependencies, builds it, and runs examples/demo.py.
set -euo pipefail
cd "$(dirname "$0")/.."
py="$(bash .ci/install.sh | tail -n 1)"
exec "$py" examples/demo.py
