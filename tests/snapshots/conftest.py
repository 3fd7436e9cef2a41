"""Where a test's changelog, and so its snapshots, live: a local directory (``changelog.dir`` a
path: hard links and copies, no fsspec) or a bucket of the session's S3 API server (moto,
``tests/conftest.py``, through s3fs)."""

from __future__ import annotations

import pytest

from remote.locations import Remote, s3_remote


@pytest.fixture(params=["dir", "s3"])
def location(request, tmp_path) -> Remote:
    """A fresh changelog location: a directory, or a bucket on moto's S3."""
    if request.param == "dir":
        return Remote("dir", str(tmp_path / "changelog"))
    return s3_remote(request.getfixturevalue("s3_endpoint"))
