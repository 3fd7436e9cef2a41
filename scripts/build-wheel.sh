#!/usr/bin/env bash
# The release artifacts: portable abi3 wheels for x86-64 and aarch64 (manylinux_2_28: RHEL/Rocky 8+,
# Debian 11+, Ubuntu 20.04+, Amazon Linux 2023; aarch64 for AWS Graviton, Ampere, Dataproc on Arm)
# and an sdist, in wheelhouse/, then `auditwheel show` of each wheel.
#
# The local wheel of scripts/setup.sh links the build machine's glibc and libstdc++ (GLIBCXX_3.4.30
# on Debian 12). These are compiled by zig (PyPI's `ziglang`, driven by maturin's --zig): C and
# C++ (RocksDB) against glibc 2.28's symbols, with zig's libc++ linked statically, so a wheel
# needs nothing newer than glibc 2.28 and no libstdc++ at all.
#
# aarch64 is cross-compiled. rustup cannot download a target's standard library here, so the
# aarch64 wheel is built by Debian's own Rust (rustc-web/cargo-web from bookworm-security, in
# /usr/bin) with its aarch64 standard library (the multiarch libstd-rust-web-dev:arm64, the
# same version as the compiler, as it must be) and the arm64 libc headers for bindgen
# (libc6-dev:arm64). rustup's toolchain in ~/.cargo/bin is left alone.
#
# Each target has its own target dir and they share one tool venv: the zig-compiled RocksDB must not
# replace the one in scripts/setup.sh's target dir (another ~20 minutes there). First run: ~20-25
# minutes per target on 2 cores (aarch64 a little longer).
#   scripts/build-wheel.sh                 # both wheels + the sdist
#   scripts/build-wheel.sh aarch64         # one target: x86_64 or aarch64 (and the sdist)
#   KSTATE_WHEEL_POLICY=manylinux_2_28 scripts/build-wheel.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export RUSTFLAGS=""
CACHE="$HOME/.cache/kstate"
TOOLS="${KSTATE_BUILD_VENV:-$CACHE/venv-build}"
POLICY="${KSTATE_WHEEL_POLICY:-manylinux_2_28}"
OUT="$ROOT/wheelhouse"
ARCHS=("$@")
[ ${#ARCHS[@]} -gt 0 ] || ARCHS=(x86_64 aarch64)
# Versions the release build was checked with (a newer zig may change its C++ flags or libc++;
# Debian's Rust for aarch64 is whatever bookworm-security ships: 1.96 when this was written).
MATURIN_REQ="maturin>=1.7,<2"
ZIG_REQ="ziglang==0.15.2"
AUDITWHEEL_REQ="auditwheel>=6.1"

say() { printf '[build-wheel] %s\n' "$*"; }

apt_install() {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! dpkg -s libclang-dev >/dev/null 2>&1; then
    say "installing libclang-dev (bindgen needs it for the rocksdb crate)"
    apt_install libclang-dev
fi
if [ ! -x "$TOOLS/bin/python" ]; then
    say "creating the build-tools virtualenv $TOOLS"
    python3 -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install -q --upgrade pip
fi
"$TOOLS/bin/python" -m pip install -q "$MATURIN_REQ" "$ZIG_REQ" "$AUDITWHEEL_REQ"
export PATH="$TOOLS/bin:$PATH"

# Debian's Rust with the aarch64 standard library of the same version, and a bin dir that puts
# its cargo and rustc (not rustup's) first for the aarch64 build only.
debian_rust_for_aarch64() {
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        say "adding the arm64 architecture to dpkg (multiarch: aarch64 libraries beside amd64 ones)"
        dpkg --add-architecture arm64
    fi
    if ! dpkg -s rustc-web cargo-web libstd-rust-web-dev:arm64 libc6-dev:arm64 >/dev/null 2>&1; then
        say "installing Debian's Rust and its aarch64 standard library (rustc-web, cargo-web, libstd-rust-web-dev:arm64, libc6-dev:arm64)"
        apt_install rustc-web cargo-web libstd-rust-web-dev:arm64 libc6-dev:arm64
    fi
    local host_std target_std
    host_std="$(dpkg-query -W -f '${Version}' libstd-rust-web-dev:amd64)"
    target_std="$(dpkg-query -W -f '${Version}' libstd-rust-web-dev:arm64)"
    [ "$host_std" = "$target_std" ] || {
        say "Debian's Rust ($host_std) and its aarch64 standard library ($target_std) differ"
        exit 1
    }
    DEBIAN_RUST_BIN="$CACHE/debian-rust-bin"
    mkdir -p "$DEBIAN_RUST_BIN"
    ln -sf /usr/bin/cargo "$DEBIAN_RUST_BIN/cargo"
    ln -sf /usr/bin/rustc "$DEBIAN_RUST_BIN/rustc"
}

# zig passes every CPU feature of its baseline target explicitly, "-evex512" among them, which
# breaks C that enables AVX-512 per function (libdeflate's adler32/crc32 kernels): allow 512-bit
# vectors where a function's target attribute asks for AVX-512 (no effect on baseline code).
export CFLAGS_x86_64_unknown_linux_gnu="${CFLAGS_x86_64_unknown_linux_gnu:-} -mevex512"

build_wheel() {
    local arch="$1" target="$1-unknown-linux-gnu" path="$PATH"
    case "$arch" in
        x86_64) export CARGO_TARGET_DIR="${KSTATE_PORTABLE_TARGET_DIR:-$CACHE/target-portable}" ;;
        aarch64)
            debian_rust_for_aarch64
            export CARGO_TARGET_DIR="${KSTATE_PORTABLE_AARCH64_TARGET_DIR:-$CACHE/target-portable-aarch64}"
            path="$DEBIAN_RUST_BIN:$PATH"
            ;;
        *) say "unknown architecture $arch (x86_64 or aarch64)"; exit 1 ;;
    esac
    say "building the ${POLICY}_$arch wheel with zig $(python -m ziglang version) and $(PATH="$path" rustc --version) (first build compiles RocksDB)"
    # --target: build scripts and proc macros stay on the host compiler, only the module is zig's.
    (cd "$ROOT" && PATH="$path" maturin build --release --zig --target "$target" \
        --compatibility "$POLICY" --auditwheel check -o "$OUT")
    local wheel
    wheel="$(ls "$OUT"/kstate-*"_$arch.whl")"
    say "auditwheel show $(basename "$wheel")"
    auditwheel show "$wheel" | tee "$OUT/auditwheel-show-$arch.txt"
    grep -q "\"${POLICY}_$arch\"" "$OUT/auditwheel-show-$arch.txt" || { say "the wheel is not ${POLICY}_$arch"; exit 1; }
}

rm -rf "$OUT"
mkdir -p "$OUT"
for arch in "${ARCHS[@]}"; do build_wheel "$arch"; done
say "building the sdist"
(cd "$ROOT" && maturin sdist -o "$OUT")
ls -l "$OUT"
