"""Remote changelog locations: a real S3 API server (the session's moto server, see
``tests/conftest.py``, reached through s3fs) and a local ``file://`` directory. Every test gets
a fresh bucket or directory."""

from __future__ import annotations

import pytest

from .locations import Remote, s3_remote


@pytest.fixture(params=["file", "s3"])
def remote(request, tmp_path) -> Remote:
    """A fresh remote changelog location: a ``file://`` directory, or a bucket on moto's S3."""
    if request.param == "file":
        return Remote("file", (tmp_path / "remote").as_uri())
    return s3_remote(request.getfixturevalue("s3_endpoint"))


@pytest.fixture
def s3(s3_endpoint) -> Remote:
    return s3_remote(s3_endpoint)
