#!/usr/bin/env bash
# Runs the whole test suite from a fresh machine: set-up, the Rust core's tests, the Python tests.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
# --workspace, not -p kstate-core: selecting the binding crate too gives host crates (syn) the
# features maturin builds with, so this reuses the wheel's RocksDB build instead of making another.
say "cargo test (Rust core, no Python)"
cargo test --release --quiet --workspace
say "pytest (against the installed wheel)"
"$PY" -m pytest tests -q -p no:cacheprovider "$@"
