"""Remote changelog locations for the tests and a store builder using them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from kstate import Stores


@dataclass(frozen=True)
class Remote:
    """Where a test's changelog lives: ``changelog.dir`` and ``changelog.storage.options``."""

    kind: str
    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def logging_config(self, **topic_config: Any) -> dict[str, Any]:
        config: dict[str, Any] = {"changelog.dir": self.url, **topic_config}
        if self.storage_options:
            config["changelog.storage.options"] = self.storage_options
        return config


def s3_remote(endpoint: str) -> Remote:
    """A fresh bucket on the S3 server at ``endpoint``."""
    import s3fs

    options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
    bucket = f"kstate-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(**options).mkdir(bucket)
    return Remote("s3", f"s3://{bucket}/changelogs", options)


def builder(remote: Remote, kind: str = "persistent", **topic_config: Any):
    """A builder of the timestamped string -> int64 store ``counts`` logged to ``remote``."""
    supplier = {
        "persistent": Stores.persistent_timestamped_key_value_store,
        "memory": Stores.in_memory_timestamped_key_value_store,
    }[kind]("counts")
    return Stores.timestamped_key_value_store_builder(supplier, "string", "int64").with_logging_enabled(
        remote.logging_config(**topic_config)
    )
