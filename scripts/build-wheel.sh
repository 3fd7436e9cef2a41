#!/usr/bin/env bash
# The release artifacts: a portable abi3 wheel (manylinux_2_28: RHEL/Rocky 8+, Debian 11+,
# Ubuntu 20.04+, Amazon Linux 2023) and an sdist, in wheelhouse/, then `auditwheel show` of the wheel.
#
# The local wheel of scripts/setup.sh links the build machine's glibc and libstdc++ (GLIBCXX_3.4.30
# on Debian 12). This one is compiled by zig (PyPI's `ziglang`, driven by maturin's --zig): C and
# C++ (RocksDB) against glibc 2.28's symbols, with zig's libc++ linked statically, so the wheel
# needs nothing newer than glibc 2.28 and no libstdc++ at all.
#
# Its own target dir and tool venv: the zig-compiled RocksDB must not replace the one in
# scripts/setup.sh's target dir (another ~20 minutes there). First run: ~20-25 minutes on 2 cores.
#   scripts/build-wheel.sh                 # wheelhouse/kstate-<v>-cp39-abi3-manylinux_2_28_x86_64.whl + .tar.gz
#   KSTATE_WHEEL_POLICY=manylinux_2_28 scripts/build-wheel.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${KSTATE_PORTABLE_TARGET_DIR:-$HOME/.cache/kstate/target-portable}"
export RUSTFLAGS=""
TOOLS="${KSTATE_BUILD_VENV:-$HOME/.cache/kstate/venv-build}"
POLICY="${KSTATE_WHEEL_POLICY:-manylinux_2_28}"
OUT="$ROOT/wheelhouse"
# Versions the release build was checked with (a newer zig may change its C++ flags or libc++).
MATURIN_REQ="maturin>=1.7,<2"
ZIG_REQ="ziglang==0.15.2"
AUDITWHEEL_REQ="auditwheel>=6.1"

say() { printf '[build-wheel] %s\n' "$*"; }

if ! dpkg -s libclang-dev >/dev/null 2>&1; then
    say "installing libclang-dev (bindgen needs it for the rocksdb crate)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-dev >/dev/null
fi
if [ ! -x "$TOOLS/bin/python" ]; then
    say "creating the build-tools virtualenv $TOOLS"
    python3 -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install -q --upgrade pip
fi
"$TOOLS/bin/python" -m pip install -q "$MATURIN_REQ" "$ZIG_REQ" "$AUDITWHEEL_REQ"
export PATH="$TOOLS/bin:$PATH"

# zig passes every CPU feature of its baseline target explicitly, "-evex512" among them, which
# breaks C that enables AVX-512 per function (libdeflate's adler32/crc32 kernels): allow 512-bit
# vectors where a function's target attribute asks for AVX-512 (no effect on baseline code).
export CFLAGS_x86_64_unknown_linux_gnu="${CFLAGS_x86_64_unknown_linux_gnu:-} -mevex512"

rm -rf "$OUT"
mkdir -p "$OUT"
say "building the $POLICY wheel with zig $("$TOOLS/bin/python" -m ziglang version) (first build compiles RocksDB)"
# --target: build scripts and proc macros stay on the host compiler, only the module is zig's.
(cd "$ROOT" && maturin build --release --zig --target x86_64-unknown-linux-gnu \
    --compatibility "$POLICY" --auditwheel check -o "$OUT")
say "building the sdist"
(cd "$ROOT" && maturin sdist -o "$OUT")
WHEEL="$(ls "$OUT"/kstate-*.whl)"
say "auditwheel show $(basename "$WHEEL")"
auditwheel show "$WHEEL" | tee "$OUT/auditwheel-show.txt"
grep -q "\"$POLICY" "$OUT/auditwheel-show.txt" || { say "the wheel is not $POLICY"; exit 1; }
ls -l "$OUT"
