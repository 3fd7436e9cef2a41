"""The style the project keeps, checked by the suite so CI fails on a change that skips it: ruff's
lint and format over the Python (``[tool.ruff]`` in pyproject.toml; ruff pinned in the test
extra, so a newer ruff's rules arrive by a change of the pin) and ``cargo fmt`` over the Rust.
Clippy stays a hand check: run from here it would build the workspace a second time."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON_SOURCES = ["python", "tests", "benches"]

# Tests copied beside an installed wheel (scripts/check-debian11.sh) have no source tree to check.
pytestmark = pytest.mark.skipif(
    not (ROOT / "python" / "kstate").is_dir(), reason="no source tree here (tests beside an installed wheel)"
)


def run(command: list[str]) -> None:
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout}{result.stderr}"


def test_python_passes_ruff_lint_and_format() -> None:
    run([sys.executable, "-m", "ruff", "check", *PYTHON_SOURCES])
    run([sys.executable, "-m", "ruff", "format", "--check", *PYTHON_SOURCES])


def test_rust_passes_cargo_fmt() -> None:
    cargo = shutil.which("cargo")
    assert cargo is not None, "cargo is not on PATH (scripts/setup.sh builds the wheel with it)"
    run([cargo, "fmt", "--all", "--", "--check"])
