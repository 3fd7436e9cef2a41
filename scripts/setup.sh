#!/usr/bin/env bash
# Everything a fresh machine needs, idempotent and cheap when already done: Debian packages,
# a virtualenv, and the kstate wheel built from this checkout and installed into it.
# Sourced by scripts/test.sh and scripts/demo.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# One target dir outside the clone and one set of flags for every build (tests, wheel, benches):
# RocksDB's C++ build is then done once per machine, not once per command or per clone.
export CARGO_TARGET_DIR="${KSTATE_CARGO_TARGET_DIR:-$HOME/.cache/kstate/target}"
export RUSTFLAGS=""
VENV="${KSTATE_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"

say() { printf '[setup] %s\n' "$*"; }

if ! dpkg -s libclang-dev >/dev/null 2>&1; then
    say "installing libclang-dev (bindgen needs it for the rocksdb crate)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-dev >/dev/null
fi

if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
    say "installing a Java runtime (Spark runs on Java 17)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

if [ ! -x "$PY" ]; then
    say "creating virtualenv $VENV"
    python3 -m venv "$VENV"
    "$PY" -m pip install -q --upgrade pip
fi
"$PY" -m pip install -q "maturin>=1.7,<2"

say "building the kstate wheel (first build compiles RocksDB: ~10-20 minutes on 2 cores)"
rm -rf "$ROOT/dist"
(cd "$ROOT" && "$VENV/bin/maturin" build --release --quiet -o "$ROOT/dist")
WHEEL="$(ls "$ROOT"/dist/kstate-*.whl)"
"$PY" -m pip install -q --force-reinstall --no-deps "$WHEEL"
# The extras accept every supported PySpark (>=4.0); tests and benches run on the newest release
# unless KSTATE_PYSPARK names another, e.g. the oldest supported one, in a venv of its own:
#   scripts/test-pyspark.sh 4.0.5      (KSTATE_PYSPARK=4.0.5 with KSTATE_VENV=<its own venv>)
PYSPARK="${KSTATE_PYSPARK:-4.3.*}"
"$PY" -m pip install -q "${WHEEL}[test,bench]" "pyspark==$PYSPARK"
say "installed $(basename "$WHEEL") into $VENV (pyspark $("$PY" -c 'import pyspark; print(pyspark.__version__)'))"
