"""``LazyLogger``: a module's logger that imports ``logging`` when it is first used, not when the
module is imported.

``logging`` (with ``threading``, ``traceback``, ``string``, ``weakref``) costs more than a store
needs to open, put, commit and close, and a store that has nothing to report never logs. The
modules on that first use name their logger ``log = LazyLogger("kstate.store")``; its first
``log.info(...)`` (or any other attribute) imports ``logging`` and hands out the attribute of
``logging.getLogger(name)``, the logger itself, so handlers, levels, ``caplog`` and the caller's
file and line in each record are what they would be with ``logging.getLogger`` at import.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    import logging
    from typing import Any


class LazyLogger:
    """Stands for ``logging.getLogger(name)`` until its first use, then forwards to it."""

    _logger: logging.Logger | None = None

    def __init__(self, name: str):
        self.name = name

    def logger(self) -> logging.Logger:
        """The ``logging`` logger itself (``logging`` imported now if it was not)."""
        if self._logger is None:
            import logging

            self._logger = logging.getLogger(self.name)
        return self._logger

    def __getattr__(self, attribute: str) -> Any:
        # Only names the instance lacks come here: info, warning, isEnabledFor, handlers, ...
        # The bound method is the logger's own, so the call's frame is the caller's.
        return getattr(self.logger(), attribute)

    def __repr__(self) -> str:
        return f"<LazyLogger {self.name}>"
