#!/usr/bin/env bash
# The Spark tests (tests/spark) on a given PySpark release, in a virtualenv of its own so the main
# .venv keeps the newest one. The oldest supported release:
#   scripts/test-pyspark.sh 4.0.5 [pytest args]
# (KSTATE_VENV overrides the venv, default /var/tmp/kstate-venv-pyspark-<version>.)
set -euo pipefail
export KSTATE_PYSPARK="${1:?usage: scripts/test-pyspark.sh <pyspark version> [pytest args]}"
shift
export KSTATE_VENV="${KSTATE_VENV:-/var/tmp/kstate-venv-pyspark-$KSTATE_PYSPARK}"
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
say "pytest tests/spark on pyspark $("$PY" -c 'import pyspark; print(pyspark.__version__)')"
"$PY" -m pytest tests/spark -q -p no:cacheprovider "$@"
