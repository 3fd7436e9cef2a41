"""Store configuration: the Kafka Streams config names kstate honours, with kstate's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kstate.errors import InvalidArgumentError

ENABLE_TRANSACTIONAL_STATESTORES = "enable.transactional.statestores"
STATESTORE_UNCOMMITTED_MAX_BYTES = "statestore.uncommitted.max.bytes"
APPLICATION_ID = "application.id"

DEFAULT_UNCOMMITTED_MAX_BYTES = 64 * 1024 * 1024
"""The KIP-892 proposal's default: 64 MiB of staged writes per store before they spill to disk."""

_KNOWN = {ENABLE_TRANSACTIONAL_STATESTORES, STATESTORE_UNCOMMITTED_MAX_BYTES, APPLICATION_ID}


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise InvalidArgumentError(f"{name} must be true or false, got {value!r}")


@dataclass(frozen=True)
class StoreConfig:
    """Parsed store configuration. Unknown keys are rejected so a typo does not pass silently."""

    transactional: bool = True
    uncommitted_max_bytes: int = DEFAULT_UNCOMMITTED_MAX_BYTES
    application_id: str | None = None

    @classmethod
    def parse(cls, config: Mapping[str, Any] | None) -> StoreConfig:
        config = dict(config or {})
        unknown = set(config) - _KNOWN
        if unknown:
            raise InvalidArgumentError(f"unknown store config {sorted(unknown)}; known: {sorted(_KNOWN)}")
        max_bytes = config.get(STATESTORE_UNCOMMITTED_MAX_BYTES, DEFAULT_UNCOMMITTED_MAX_BYTES)
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise InvalidArgumentError(f"{STATESTORE_UNCOMMITTED_MAX_BYTES} must be an int >= 0, got {max_bytes!r}")
        app = config.get(APPLICATION_ID)
        if app is not None and (not isinstance(app, str) or not app):
            raise InvalidArgumentError(f"{APPLICATION_ID} must be a non-empty string, got {app!r}")
        return cls(
            transactional=_as_bool(
                ENABLE_TRANSACTIONAL_STATESTORES, config.get(ENABLE_TRANSACTIONAL_STATESTORES, True)
            ),
            uncommitted_max_bytes=max_bytes,
            application_id=app,
        )
