"""Fixtures of the replica's tests: an application writing without Spark, and a bucket on the
session's S3 API server (moto, ``tests/conftest.py``)."""

import pytest

from remote.locations import s3_remote

from .application import Application


@pytest.fixture
def app(tmp_path):
    """An application with its changelogs in a directory, three partitions."""
    return Application(tmp_path / "state", tmp_path / "changelog")


@pytest.fixture
def s3(s3_endpoint):
    """A fresh bucket on moto's S3 server."""
    return s3_remote(s3_endpoint)
