"""Arrow int64 / float64 arrays to and from stored 8-byte big-endian values (Kafka's
``LongSerializer`` / ``DoubleSerializer`` bytes), with numpy and no Python object per value: the
vectorized ``get_many`` / ``put_all`` paths of stores with ``int64`` or ``float64`` value serdes."""

from __future__ import annotations

from kstate.errors import InvalidArgumentError, SerializationError
from kstate.serdes import DoubleSerde, LongSerde

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers know the name)
if TYPE_CHECKING:
    from typing import Any

_STORED = {LongSerde: ">i8", DoubleSerde: ">f8"}


def stored_dtype(value_serde: Any) -> str | None:
    """The numpy dtype (a string) of the stored bytes of ``value_serde``'s values, or ``None``."""
    return _STORED.get(type(value_serde))


def from_packed(packed: tuple[bytes, bytes, bytes, int], count: int, large: bool, stored: str) -> Any:
    """The Arrow array of the values in a packed binary result (``(validity, offsets, data,
    null_count)``; nulls stay null)."""
    import numpy as np
    import pyarrow as pa

    dtype = np.dtype(stored)
    validity, offsets, data, null_count = packed
    lengths = np.diff(np.frombuffer(offsets, dtype=np.int64 if large else np.int32))
    if null_count:
        present = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")[:count].astype(bool)
    else:
        present = np.ones(count, dtype=bool)
    if np.any(lengths[present] != dtype.itemsize):
        raise SerializationError(f"a stored value is not {dtype.itemsize} bytes long (values of another serde?)")
    native = dtype.newbyteorder("=")
    numbers = np.frombuffer(data, dtype=dtype).astype(native)
    if not null_count:
        return pa.array(numbers)
    out = np.zeros(count, dtype=native)
    out[present] = numbers
    return pa.array(out, mask=~present)


def to_column(values: Any, stored: str) -> tuple:
    """An int/float Arrow array as the packed binary column of its stored bytes (nulls stay null:
    ``put_all`` deletes them)."""
    import numpy as np
    import pyarrow as pa

    dtype = np.dtype(stored)
    target = pa.int64() if dtype.kind == "i" else pa.float64()
    try:
        values = values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise InvalidArgumentError(f"values must be {target} for this store's serde: {error}") from None
    count = len(values)
    stored = values.fill_null(0).to_numpy(zero_copy_only=False).astype(dtype)
    offsets = (np.arange(count + 1, dtype=np.int32) * dtype.itemsize).tobytes()
    validity = None
    if values.null_count:
        present = ~values.is_null().to_numpy(zero_copy_only=False)
        validity = np.packbits(present, bitorder="little").tobytes()
    return offsets, stored.tobytes(), validity, 0, False


def is_number_type(arrow_type: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type)
