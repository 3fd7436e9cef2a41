#!/usr/bin/env bash
# Runs the main job from a fresh machine: set-up, then the demos (the store, then kstate in Spark).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
"$PY" examples/crash_recovery.py "$@"
"$PY" examples/spark_pipeline.py
