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

    def run(changelog_dir, application_id, partitions):
        argv = ["rescale", str(changelog_dir), "--application-id", application_id, "--partitions", str(partitions)]
        done = subprocess.run([sys.executable, "-m", "kstate.cli", *argv], capture_output=True, text=True, check=True)
        return done.stdout

    return run
