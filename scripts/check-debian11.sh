#!/usr/bin/env bash
# Installs the portable wheel on Debian 11 (bullseye: glibc 2.31, Python 3.9, no libstdc++ newer
# than GLIBCXX_3.4.28) as a user would, and runs the smoke test and the store and log tests there.
#
#   scripts/build-wheel.sh && scripts/check-debian11.sh [wheel] [-- pytest args]
#   KSTATE_DEBIAN_ARCH=arm64 scripts/check-debian11.sh     # the aarch64 wheel on an arm64 root
#
# The Debian root is made once with debootstrap from this machine's Debian mirror (about 2 minutes,
# ~400 MB under KSTATE_BULLSEYE_ROOT, default /var/tmp/kstate-bullseye[-arm64]) and reused; its venv
# is made anew on every run, so each run installs the wheel from scratch with pip (dependencies
# from PyPI). An arm64 root runs its programs through qemu-user-static (binfmt_misc, mounted and
# enabled here when it is not): everything is emulated, ~10x slower, so it says nothing of speed
# on ARM. Needs root (debootstrap, chroot, mounting /proc). Not run by CI (a few minutes, ~20 on
# arm64; run it for each release).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ARCH="${KSTATE_DEBIAN_ARCH:-amd64}"
case "$ARCH" in
    amd64) MACHINE=x86_64; CHROOT="${KSTATE_BULLSEYE_ROOT:-/var/tmp/kstate-bullseye}" ;;
    arm64) MACHINE=aarch64; CHROOT="${KSTATE_BULLSEYE_ROOT:-/var/tmp/kstate-bullseye-arm64}" ;;
    *) echo "KSTATE_DEBIAN_ARCH must be amd64 or arm64, got $ARCH" >&2; exit 1 ;;
esac
WHEEL=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then WHEEL="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
WHEEL="${WHEEL:-$(ls "$ROOT"/wheelhouse/kstate-*_"$MACHINE".whl 2>/dev/null | head -1)}"
[ -f "$WHEEL" ] || { echo "no wheel: run scripts/build-wheel.sh first, or pass one" >&2; exit 1; }
# The store, transaction, log, CLI and release tests: they need pyarrow, rocksdict and the Kafka
# codec oracles, which all install on Python 3.9; Spark and fuzzing are left out (mypy too: the
# release tests' type checks skip).
TESTS=(tests/stores tests/txn tests/log tests/cli tests/release)
TEST_DEPS=(pytest hypothesis pyarrow rocksdict kafka-python aiokafka python-snappy lz4 xxhash cramjam)

say() { printf '[debian11 %s] %s\n' "$ARCH" "$*"; }

# The machine's Debian mirror (deb822 or one-line sources), for debootstrap.
mirror() {
    local uri
    uri="$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -E '/debian/?$' | head -1 || true)"
    if [ -z "$uri" ]; then
        uri="$(grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
            | awk '{print $2}' | grep -E '/debian/?$' | head -1 || true)"
    fi
    echo "${uri:-http://deb.debian.org/debian}"
}

if ! command -v debootstrap >/dev/null 2>&1; then
    say "installing debootstrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
if [ "$ARCH" != amd64 ]; then
    if ! dpkg -s qemu-user-static binfmt-support >/dev/null 2>&1; then
        say "installing qemu-user-static and binfmt-support (to run $ARCH programs)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static binfmt-support >/dev/null
    fi
    if ! mountpoint -q /proc/sys/fs/binfmt_misc; then
        say "mounting binfmt_misc at /proc/sys/fs/binfmt_misc"
        mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    fi
    [ -e "/proc/sys/fs/binfmt_misc/qemu-$MACHINE" ] || update-binfmts --enable "qemu-$MACHINE"
fi
if [ ! -x "$CHROOT/usr/bin/python3" ]; then
    say "debootstrap --arch=$ARCH bullseye into $CHROOT from $(mirror)"
    rm -rf "$CHROOT"
    debootstrap --arch="$ARCH" --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
        bullseye "$CHROOT" "$(mirror)" > "/var/tmp/kstate-debootstrap-$ARCH.log" 2>&1 \
        || { tail -20 "/var/tmp/kstate-debootstrap-$ARCH.log"; exit 1; }
fi

cleanup() { umount "$CHROOT/proc" 2>/dev/null || true; umount "$CHROOT/dev" 2>/dev/null || true; }
trap cleanup EXIT
mountpoint -q "$CHROOT/proc" || mount -t proc proc "$CHROOT/proc"
mountpoint -q "$CHROOT/dev" || mount --bind /dev "$CHROOT/dev"
cp /etc/resolv.conf "$CHROOT/etc/resolv.conf"
# pip in the root trusts what this machine's pip trusts (a proxy's CA, if there is one).
CERT="${PIP_CERT:-}"
if [ -n "$CERT" ] && [ -f "$CERT" ]; then cp "$CERT" "$CHROOT/etc/ssl/certs/host-ca.crt"; CERT=/etc/ssl/certs/host-ca.crt; fi

WORK="$CHROOT/opt/kstate-check"
rm -rf "$WORK"
mkdir -p "$WORK"
cp "$WHEEL" "$WORK/"
cp -r "$ROOT/tests" "$ROOT/scripts" "$WORK/"
cp "$ROOT/pyproject.toml" "$ROOT/Cargo.toml" "$ROOT/CHANGELOG.md" "$WORK/"
cp -r "$ROOT/examples" "$WORK/"
W="/opt/kstate-check/$(basename "$WHEEL")"

in_root() {
    chroot "$CHROOT" /usr/bin/env -i PATH=/opt/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        ${CERT:+PIP_CERT=$CERT} PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 "$@"
}

say "system: $(in_root sh -c '. /etc/os-release; echo "$PRETTY_NAME"'), $(in_root uname -m), $(in_root ldd --version | sed -n 1p), $(in_root python3 --version)"
say "newest libstdc++ symbol version there: $(in_root sh -c "grep -aoE 'GLIBCXX_[0-9]+\.[0-9.]+[0-9]' /usr/lib/$MACHINE-linux-gnu/libstdc++.so.6 | sort -uV | tail -1")"
rm -rf "$CHROOT/opt/venv"
in_root python3 -m venv /opt/venv
in_root python -m pip install -q --upgrade pip
say "pip install $(basename "$WHEEL")"
in_root python -m pip install "$W" 2>&1 | tail -2
in_root python -m pip show kstate | sed -n 1,2p
say "smoke test"
in_root sh -c "cd /tmp && python /opt/kstate-check/scripts/smoke_test.py"
say "pip install the wheel's arrow extra and the tests' dependencies: ${TEST_DEPS[*]}"
in_root python -m pip install -q "${W}[arrow]" "${TEST_DEPS[@]}"
say "pytest ${TESTS[*]} $*"
# The tests run from a copy (no python/ beside them), so they import the installed wheel.
in_root sh -c "cd /opt/kstate-check && python -m pytest -q -p no:cacheprovider ${TESTS[*]} $*"
