"""Fixtures of the Spark tests."""

import subprocess
import sys

import pytest


@pytest.fixture
def work(tmp_path):
    """A test's directory, with ``in/`` for the input files."""
    (tmp_path / "in").mkdir()
    return tmp_path


@pytest.fixture
def rescale_cli():
    """Runs ``kstate rescale`` in its own process; returns what it printed."""

    def run(changelog_dir, application_id, partitions, storage_options=None):
        argv = ["rescale", str(changelog_dir), "--application-id", application_id, "--partitions", str(partitions)]
        argv += [f"--storage-option={k}={v}" for k, v in (storage_options or {}).items()]
        done = subprocess.run([sys.executable, "-m", "kstate.cli", *argv], capture_output=True, text=True, check=True)
        return done.stdout

    return run
