"""The exceptions kstate raises. Every failure of a kstate call is a ``KStateError``.

The classes (with their docstrings and bases) are created by the native module
(``rust/python/src/errors.rs``), so Rust raises them without importing Python; this module is
their public path. ``import kstate.errors`` stays light: the native module loads when a class is
first looked up.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from kstate._core import BatchConflictError as BatchConflictError
    from kstate._core import ChangelogTruncatedError as ChangelogTruncatedError
    from kstate._core import CommitConflictError as CommitConflictError
    from kstate._core import CorruptedDataError as CorruptedDataError
    from kstate._core import DeletedStateVariableError as DeletedStateVariableError
    from kstate._core import InvalidArgumentError as InvalidArgumentError
    from kstate._core import InvalidStateStoreError as InvalidStateStoreError
    from kstate._core import InvalidTimestampError as InvalidTimestampError
    from kstate._core import JavaNotFoundError as JavaNotFoundError
    from kstate._core import KStateError as KStateError
    from kstate._core import MisroutedRowsError as MisroutedRowsError
    from kstate._core import PartitioningChangedError as PartitioningChangedError
    from kstate._core import PartitioningError as PartitioningError
    from kstate._core import ProcessorStateError as ProcessorStateError
    from kstate._core import RemoteStorageError as RemoteStorageError
    from kstate._core import SerializationError as SerializationError
    from kstate._core import SparkConnectUnsupportedError as SparkConnectUnsupportedError
    from kstate._core import StateLockTimeoutError as StateLockTimeoutError
    from kstate._core import StateSchemaError as StateSchemaError
    from kstate._core import StateTypeError as StateTypeError
    from kstate._core import StoreBehindChangelogError as StoreBehindChangelogError
    from kstate._core import StoreClosedError as StoreClosedError
    from kstate._core import StoreCorruptedError as StoreCorruptedError
    from kstate._core import TaskAssignmentError as TaskAssignmentError


def __getattr__(name: str) -> type[Exception]:
    if name not in __all__:
        raise AttributeError(f"module 'kstate.errors' has no attribute {name!r}")
    __import__("kstate._core")  # importlib.import_module without importing importlib
    for exported in __all__:  # every later lookup is a plain module attribute
        globals()[exported] = getattr(sys.modules["kstate._core"], exported)
    return globals()[name]  # type: ignore[no-any-return]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "KStateError",
    "InvalidStateStoreError",
    "StoreClosedError",
    "StoreBehindChangelogError",
    "ChangelogTruncatedError",
    "StateLockTimeoutError",
    "BatchConflictError",
    "ProcessorStateError",
    "StoreCorruptedError",
    "RemoteStorageError",
    "CommitConflictError",
    "CorruptedDataError",
    "TaskAssignmentError",
    "InvalidArgumentError",
    "StateTypeError",
    "InvalidTimestampError",
    "SerializationError",
    "PartitioningError",
    "MisroutedRowsError",
    "PartitioningChangedError",
    "SparkConnectUnsupportedError",
    "JavaNotFoundError",
    "StateSchemaError",
    "DeletedStateVariableError",
]
