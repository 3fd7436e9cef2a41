#!/usr/bin/env bash
# Runs the main job from a fresh machine: set-up, then the demo.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
"$PY" examples/crash_recovery.py "$@"
