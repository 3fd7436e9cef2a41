#!/usr/bin/env bash
# Runs the whole test suite from a fresh machine: set-up, the Rust core's tests, the Python tests.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
say "cargo test (Rust core, no Python)"
cargo test --release --quiet -p kstate-core
say "pytest (against the installed wheel)"
"$PY" -m pytest tests -q -p no:cacheprovider "$@"
