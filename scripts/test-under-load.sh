#!/usr/bin/env bash
# The whole test suite (scripts/test.sh) on a busy machine: one busy process pinned to each core
# beside it, so that every test gets a fraction of the CPU it gets on an idle machine. A test that
# passes only when the machine is fast fails here. Run it before a release (README, "Releasing").
#   scripts/test-under-load.sh [pytest args]     KSTATE_LOAD_PROCESSES=N: N busy processes (default: one a core)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Set-up first, on the idle machine: a cold wheel build is not what this run is about.
source "$ROOT/scripts/setup.sh"

cores=$(nproc)
busy=()
stop_load() { [ ${#busy[@]} -eq 0 ] || kill "${busy[@]}" 2>/dev/null || true; }
trap stop_load EXIT
for ((i = 0; i < ${KSTATE_LOAD_PROCESSES:-$cores}; i++)); do
    taskset -c $((i % cores)) python3 -c 'while True: pass' &
    busy+=($!)
done
say "under load: ${#busy[@]} busy processes pinned beside the suite on $cores cores"
started=$(date +%s)
status=0
bash "$ROOT/scripts/test.sh" "$@" || status=$?
say "under load: exit $status after $(($(date +%s) - started)) s"
exit $status
