"""Fixtures of the Spark tests."""

import pytest


@pytest.fixture
def work(tmp_path):
    """A test's directory, with ``in/`` for the input files."""
    (tmp_path / "in").mkdir()
    return tmp_path
