"""The state variables of a ``StatefulProcessor`` on kstate stores, with Spark's method and
argument names (``pyspark.sql.streaming.stateful_processor``, 4.1+).

Each state variable is a kstate store named after it; every entry's key starts with the grouping
key (pickled), every value with its expiry (8 bytes, big-endian; ``NO_EXPIRY`` without a TTL).
The bytes are defined once, in ``rust/core/src/spark/state_layout.rs`` (``kstate._core.state_*``):

- value state: ``<grouping key>`` -> ``<expiry><value>``;
- list state: one entry per call that wrote it, in sequence order: ``<u32 length><grouping
  key><u64 sequence>`` -> ``<expiry><element>`` for an ``appendValue``, the same key and a
  ``1`` byte -> ``<expiry>`` and each element length-prefixed (a run) for a ``put`` or an
  ``appendList``; an append is one put (the next sequence is found once per key and task, by
  one reverse seek), a ``put`` one put and the deletes of the list's other entries;
- map state: ``<u32 length><grouping key><map key>`` -> ``<expiry><value>``.

Values and map keys are pickled (protocol 4). A pickle runs code when it is read: keep changelogs
where only this application writes. With a schema (Spark's ``schema``, ``userKeySchema``,
``valueSchema``) values and map keys are normalized as Spark stores them (a ``Row`` or a tuple
becomes a tuple, numpy scalars Python numbers), so ``get`` returns tuples as Spark does and
``Row(a=1)`` and ``(1,)`` are the same map key.

TTL (``ttlDurationMs``) is in processing time, as Spark's: each write stamps its value (list: the
elements it wrote; map: its entry) with the batch's processing time + TTL; reads hide values whose expiry
is at or before the batch's processing time, and after each batch a task deletes them from the
store, found through a TTL index (store ``tws.ttl``: ``<expiry><u8 length><name><u32 length>
<grouping key>``, empty values), as Spark's secondary TTL index does; one index entry stands for
all of a key's entries of a variable written in a batch (the sweep reads the key's entries).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from kstate import _core
from kstate.errors import DeletedStateVariableError, InvalidArgumentError, StateTypeError
from kstate.spark.format.row_codec import compile_schema, nested_rows, plain
from kstate.spark.protocol.exactly_once import TaskStores
from kstate.store_lifecycle import native_store, now_ms

TTL_INDEX = "tws.ttl"
TIMERS_BY_TIME = "tws.timers-by-time"
TIMERS_BY_KEY = "tws.timers-by-key"


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"a state variable needs a name (stateName), got {name!r}")
    if name.startswith("tws."):
        raise InvalidArgumentError(f"state variable names starting with 'tws.' are kstate's own, got {name!r}")
    return name


def _check_ttl(ttl: Any) -> int | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
        raise InvalidArgumentError(f"ttlDurationMs must be an int > 0 (ms) or None, got {ttl!r}")
    return ttl


@dataclass(frozen=True)
class TypedSchemas:
    """How a typed variable's values are read and written: every schema its stored values were
    written with (``kstate.spark.format.state_schemas``), the one it writes with now, a map's key schema."""

    versions: tuple[Any, ...]
    current: Any
    key: Any = None


class TypedCodec:
    """Values of a ``StructType``: one byte naming the writer schema's index, then the row in
    ``kstate.spark.format.row_codec``'s encoding (``versioned=False``: the row alone, for map keys).
    Checked on write with the rules of Spark's type verifier; read back as tuples, any older
    schema's values as the current schema. ``native`` does the work (``_core.StateCodec``)."""

    def __init__(self, variable: str, schema: Any, versions: tuple[Any, ...] = (), versioned: bool = True):
        self._arguments = (variable, schema, versions, versioned)
        self.fields = len(schema.fields)
        self.rows = nested_rows(schema)
        """Gives a decoded value's nested structs as ``Row``s, as Spark's state does (``None``:
        the schema has none)."""
        current = compile_schema(schema, variable)
        if versioned:
            readers = [compile_schema(v).reader(current) for v in versions]
            self.native = _core.StateCodec.typed(current, versions.index(schema), readers)
        else:
            self.native = _core.StateCodec.typed(current, None, [])
        self.encode = self.native.encode
        self.decode = self.native.decode

    def __reduce__(self) -> tuple:
        # A processor is pickled to the executors with the variables its init declared.
        return TypedCodec, self._arguments


class PickleCodec:
    """Values as pickles; with a schema, normalized first as Spark stores them (``plain``)."""

    rows = None

    def __init__(self, schema: Any):
        self.schema = schema
        self.native = _core.StateCodec.pickled(pickle.dumps, pickle.loads, None if schema is None else plain)

    def __reduce__(self) -> tuple:
        return PickleCodec, (self.schema,)


@dataclass(frozen=True)
class Declared:
    """What ``init`` declared of one state variable."""

    kind: str
    """``value``, ``list``, ``map``, or ``deleted`` (named only by ``deleteIfExists``)."""
    ttl_ms: int | None = None
    schema: Any = None
    """The value schema as given (``StructType``, DDL string or ``None``)."""
    key_schema: Any = None


def _require_value(value: Any, name: str) -> None:
    if value is None:
        raise InvalidArgumentError(f"state variable {name!r}: a state value cannot be None (use clear())")


class _Variable:
    """What every state variable shares. Each state call is one native call on the store
    (``_native``) through the variable's codec (``_core.StateCodec``)."""

    def __init__(self, handle: StatefulProcessorHandle, name: str, codec: Any, ttl_ms: int | None):
        self._handle = handle
        self._name = name
        self._ttl_ms = ttl_ms
        self._store: Any = None if handle._stores is None else handle._stores[name]
        self._native: Any = None if self._store is None else native_store(self._store)
        self._value_codec = codec
        self._codec = codec.native
        self._rows = codec.rows

    def __getstate__(self) -> dict[str, Any]:
        # A processor is pickled to the executors with the variables its init declared (on the
        # driver, without stores): the native codecs are rebuilt from their Python owners.
        state = dict(self.__dict__)
        for derived in ("_codec", "_rows", "_keys", "_key_rows", "_calls", *NATIVE_CALLS):
            state.pop(derived, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._codec = self._value_codec.native
        self._rows = self._value_codec.rows
        if "_key_codec" in state:
            self._keys = self._key_codec.native
            self._key_rows = self._key_codec.rows

    def _ttl_index(self) -> Any:
        """The variable's TTL for its native calls (``_core.TtlIndex``: they stamp each write
        with the batch's processing time + the TTL and record it in the TTL index), or ``None``."""
        if self._ttl_ms is None:
            return None
        return _core.TtlIndex(native_store(self._handle._ttl_store), self._name, self._ttl_ms)


class _PrefixedVariable(_Variable):
    """List and map state: every entry's key starts with the grouping key's prefix. The batch's
    keys' entries are read ahead in one native call (``StatefulProcessorHandle.read_ahead_values``)
    into ``_ahead``, which every call reads first and keeps in step with what it stages."""

    def __init__(self, handle: StatefulProcessorHandle, name: str, codec: Any, ttl_ms: int | None):
        super().__init__(handle, name, codec, ttl_ms)
        # On the driver (no stores) there is nothing to read ahead.
        self._ahead: Any = None if self._store is None else handle._prefixed_read_ahead(name)

    def exists(self) -> bool:
        """Whether the current key has a live entry."""
        return self._codec.any_live(self._native, self._handle._current_prefix, self._handle.now_ms, self._ahead)

    def clear(self) -> None:
        self._codec.delete_all(self._native, self._handle._current_prefix, self._ahead)


class ValueState(_Variable):
    """One value per grouping key (Spark's ``ValueState``). The batch's keys' stored values are
    read ahead into ``_ahead_values`` (``StatefulProcessorHandle.read_ahead_values``; a key's
    write drops its entry); ``get`` and ``update`` are native methods bound to the variable
    (``_core.ValueCalls``: no Python frame per call; ``get`` stays Python's where values hold
    nested structs, made ``Row``s here)."""

    _calls: Any = None
    """``_core.ValueCalls`` (none on the driver, which has no stores)."""

    def __init__(self, handle: StatefulProcessorHandle, name: str, codec: Any, ttl_ms: int | None):
        super().__init__(handle, name, codec, ttl_ms)
        self._ahead_values = handle._values_read_ahead(name)
        if self._store is not None:
            self._calls = _core.ValueCalls(
                self._native,
                self._codec,
                self._ahead_values,
                handle._cursor,
                partial(_require_value, name=name),
                self._ttl_index(),
            )
            if self._rows is None:
                self.get = self._calls.get  # type: ignore[method-assign]
            self.update = self._calls.update  # type: ignore[method-assign]

    def exists(self) -> bool:
        stored = self._ahead_values.get(self._handle._current_key, _NOT_READ)
        if stored is not _NOT_READ:
            return stored is not None and _core.state_expiry_of(stored) > self._handle.now_ms
        return self._codec.exists(self._native, self._handle._current_key, self._handle.now_ms)

    def get(self) -> Any:
        """The value, or ``None`` if there is none (or it expired)."""
        handle = self._handle
        stored = self._ahead_values.get(handle._current_key, _NOT_READ)
        if stored is not _NOT_READ:
            value = self._codec.decode_live(stored, handle.now_ms)
        else:
            value = self._codec.get(self._native, handle._current_key, handle.now_ms)
        return value if value is None or self._rows is None else self._rows(value)

    def update(self, newValue: Any) -> None:  # noqa: N803
        self._calls.update(newValue)

    def clear(self) -> None:
        self._ahead_values.pop(self._handle._current_key, None)
        self._store.delete(self._handle._current_key)


_NOT_READ = object()


def _same(value: Any) -> Any:
    return value


class ListState(_PrefixedVariable):
    """A list per grouping key (Spark's ``ListState``): its store entries in sequence order, one
    per call that wrote it (``put`` and ``appendList`` one entry of all their elements,
    ``appendValue`` one of its element), so an append costs one put whatever the list's length
    and a list kept by ``put`` one put a call. Appends and puts go through ``_core.ListCalls``,
    which knows the sequence the key's next entry takes; ``appendValue``,
    ``appendList``, ``put`` and ``get`` (where elements hold no nested structs, made ``Row``s
    here) are its native methods, bound to the variable (no Python frame per call)."""

    _calls: Any = None
    """``_core.ListCalls`` (none on the driver, which has no stores)."""

    def __init__(self, handle: StatefulProcessorHandle, name: str, codec: Any, ttl_ms: int | None):
        super().__init__(handle, name, codec, ttl_ms)
        if self._store is not None:
            self._calls = _core.ListCalls(
                self._native,
                self._codec,
                self._ahead,
                handle._cursor,
                partial(_require_value, name=name),
                partial(_checked_list, name),
                self._ttl_index(),
            )
            self.appendValue = self._calls.appendValue  # type: ignore[method-assign]
            self.appendList = self._calls.appendList  # type: ignore[method-assign]
            self.put = self._calls.put  # type: ignore[method-assign]
            if self._rows is None:
                self.get = self._calls.get  # type: ignore[method-assign]

    def get(self) -> Iterator[Any]:
        handle = self._handle
        values = self._codec.list_live(self._native, handle._current_prefix, handle.now_ms, self._ahead)
        return iter(values if self._rows is None else map(self._rows, values))

    def put(self, newState: Sequence[Any]) -> None:  # noqa: N803
        """Replaces the list with ``newState`` (non-empty, as Spark requires): one entry, not
        written when it holds ``newState`` already."""
        self._calls.put(newState)

    def appendValue(self, newState: Any) -> None:  # noqa: N802, N803
        self._calls.appendValue(newState)

    def appendList(self, newState: Sequence[Any]) -> None:  # noqa: N802, N803
        self._calls.appendList(newState)

    def clear(self) -> None:
        self._calls.clear()


def _checked_list(name: str, values: Any) -> list[Any]:
    """``values`` of list state ``name`` as a list, checked as Spark checks them."""
    if values is None or isinstance(values, (str, bytes)):
        raise InvalidArgumentError(f"list state {name!r}: expected a list of values, got {values!r}")
    values = list(values)
    if not values:
        raise InvalidArgumentError(f"list state {name!r}: the list must not be empty (use clear())")
    for value in values:
        if value is None:
            _require_value(value, name)
    return values


class MapState(_PrefixedVariable):
    """A map per grouping key (Spark's ``MapState``): one store entry per map key, found by a
    prefix scan of the grouping key; a TTL applies per entry."""

    def __init__(self, handle: StatefulProcessorHandle, name: str, key_codec: Any, codec: Any, ttl_ms: int | None):
        super().__init__(handle, name, codec, ttl_ms)
        self._key_codec = key_codec
        self._keys = key_codec.native
        self._key_rows = key_codec.rows
        self._bare_keys = getattr(key_codec, "fields", 0) == 1
        if self._store is not None:
            self._bind_native_calls()

    _calls: Any = None
    """``_core.MapCalls`` (none on the driver, which has no stores)."""

    def _bind_native_calls(self) -> None:
        """Shadows ``containsKey``, ``getValue``, ``updateValue`` and the walks (``iterator``,
        ``keys``, ``values``) with native methods bound to this variable's store, codecs and
        read-ahead and the handle's cursor (``_core.MapCalls``): a processor's per-row call is
        then one native call, its checks made there (the keys it does not take as they are go
        through ``_spark_map_key``). A read stays Python's where what it returns holds nested
        structs (made ``Row``s here)."""
        calls = self._calls = _core.MapCalls(
            self._native,
            self._codec,
            self._keys,
            self._ahead,
            self._handle._cursor,
            self._bare_keys,
            partial(_spark_map_key, self._name, self._bare_keys),
            partial(_require_value, name=self._name),
            self._ttl_index(),
        )
        self.containsKey = calls.containsKey  # type: ignore[method-assign]
        if self._rows is None:
            self.getValue = calls.getValue  # type: ignore[method-assign]
            self.values = calls.values  # type: ignore[method-assign]
        if self._key_rows is None:
            self.keys = calls.keys  # type: ignore[method-assign]
            if self._rows is None:
                self.iterator = calls.iterator  # type: ignore[method-assign]
        self.updateValue = calls.updateValue  # type: ignore[method-assign]

    def _spark_key(self, key: Any) -> Any:
        return _spark_map_key(self._name, self._bare_keys, key)

    def getValue(self, key: Any) -> Any:  # noqa: N802
        # The checks inline (this is a processor's most frequent call): ``_require_value``,
        # ``_spark_key`` only where it can change the key.
        if key is None:
            _require_value(key, self._name)
        if self._bare_keys and isinstance(key, str):
            key = self._spark_key(key)
        handle = self._handle
        value = self._codec.map_get(self._native, handle._current_prefix, self._keys, key, handle.now_ms, self._ahead)
        return value if value is None or self._rows is None else self._rows(value)

    def containsKey(self, key: Any) -> bool:  # noqa: N802
        # The checks inline, as in ``getValue`` (a processor may call both for every row).
        if key is None:
            _require_value(key, self._name)
        if self._bare_keys and isinstance(key, str):
            key = self._spark_key(key)
        handle = self._handle
        prefix = handle._current_prefix
        return self._codec.map_contains(self._native, prefix, self._keys, key, handle.now_ms, self._ahead)

    def updateValue(self, key: Any, value: Any) -> None:  # noqa: N802
        self._calls.updateValue(key, value)

    def iterator(self) -> Iterator[tuple[Any, Any]]:
        handle = self._handle
        entries = self._codec.scan_live(self._native, handle._current_prefix, handle.now_ms, self._keys, self._ahead)
        if self._rows is None and self._key_rows is None:
            return iter(entries)
        keys, values = self._key_rows or _same, self._rows or _same
        return ((keys(k), values(v)) for k, v in entries)

    def keys(self) -> Iterator[Any]:
        handle = self._handle
        keys = self._codec.scan_live(
            self._native, handle._current_prefix, handle.now_ms, self._keys, self._ahead, False
        )  # the keys alone: no value decoded
        return iter(keys if self._key_rows is None else map(self._key_rows, keys))

    def values(self) -> Iterator[Any]:
        handle = self._handle
        values = self._codec.scan_live(self._native, handle._current_prefix, handle.now_ms, None, self._ahead)
        return iter(values if self._rows is None else map(self._rows, values))

    def removeKey(self, key: Any) -> None:  # noqa: N802
        if key is None:
            _require_value(key, self._name)
        if self._bare_keys and isinstance(key, str):
            key = self._spark_key(key)
        self._codec.map_remove(self._native, self._handle._current_prefix, self._keys, key, self._ahead)


def _spark_map_key(name: str, bare_keys: bool, key: Any) -> Any:
    """``key`` as Spark's serializer takes it (``None`` refused): with a one-field key schema
    (``bare_keys``) a bare string of one character is that field (Spark iterates what it is
    given: a longer string would be cut to its first character, so kstate refuses it)."""
    if key is None:
        _require_value(key, name)
    if bare_keys and isinstance(key, str):
        if len(key) != 1:
            raise StateTypeError(
                f"map state {name!r}: a map key of a one-field key schema is a tuple, e.g. ({key!r},); "
                f"Spark would store the bare string {key!r} as its first character only"
            )
        return (key,)
    return key


NATIVE_CALLS = (
    *("containsKey", "getValue", "updateValue", "iterator", "keys", "values"),
    *("appendValue", "appendList", "put", "get", "update"),
)
"""The methods a variable may shadow with native bound calls (``MapState._bind_native_calls``,
``ListState``'s ``appendValue``, ``appendList``, ``put`` and ``get``, ``ValueState``'s ``get`` and
``update``)."""

_SPARK_ERRORS = {
    ("value", "exists"): "Error checking value state exists",
    ("value", "get"): "Error getting value state",
    ("value", "update"): "Error updating value state",
    ("value", "clear"): "Error clearing value state",
    ("list", "exists"): "Error checking value state exists",
    ("list", "put"): "Error updating value state",
    ("list", "appendValue"): "Error updating value state",
    ("list", "appendList"): "Error updating value state",
    ("list", "clear"): "Error clearing value state",
    ("map", "exists"): "Error checking map state exists",
    ("map", "getValue"): "Error getting value",
    ("map", "containsKey"): "Error checking if map state contains key",
    ("map", "updateValue"): "Error updating map state value",
    ("map", "removeKey"): "Error removing key from map state",
    ("map", "clear"): "Error clearing map state",
}
"""The messages Spark's state clients raise when the state server fails a call (processors match them)."""
_ERROR_CLASS: list[type] = []


def deleted_variable_error(kind: str, name: str, method: str) -> DeletedStateVariableError:
    """The error of a call on a deleted variable: Spark's message, and a ``PySparkRuntimeError``
    too where PySpark is installed."""
    if not _ERROR_CLASS:
        try:
            from pyspark.errors import PySparkRuntimeError
        except ImportError:
            _ERROR_CLASS.append(DeletedStateVariableError)
        else:
            _ERROR_CLASS.append(type("DeletedStateVariableError", (DeletedStateVariableError, PySparkRuntimeError), {}))
    prefix = _SPARK_ERRORS.get((kind, method), f"Error calling {method} on {kind} state")
    return _ERROR_CLASS[0](f"{prefix}: state variable {name!r} was deleted by deleteIfExists")


class _DeletedVariable(_Variable):
    """What a variable becomes once ``handle.deleteIfExists`` deleted it: every call raises, as
    in Spark, whose state server has dropped the variable."""

    _kind = "value"

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)

        def deleted(*_: Any, **__: Any) -> Any:
            raise deleted_variable_error(self._kind, self._name, method)

        return deleted


def _delete(variable: _Variable) -> None:
    kind = "list" if isinstance(variable, ListState) else "map" if isinstance(variable, MapState) else "value"
    for name in NATIVE_CALLS:
        variable.__dict__.pop(name, None)  # else they would answer past ``__getattr__``
    variable.__class__ = _DeletedVariable
    variable._kind = kind


class StatefulProcessorHandle:
    """What ``init`` gets (Spark's ``StatefulProcessorHandle``): declares state variables
    (``getValueState``, ``getListState``, ``getMapState``), drops old ones
    (``deleteIfExists``) and manages the current key's timers."""

    def __init__(
        self,
        stores: TaskStores | None,
        time_mode: str = "None",
        now: int | None = None,
        schemas: dict[str, TypedSchemas] | None = None,
    ):
        self._stores = stores
        self._schemas = schemas or {}
        self._time_mode = time_mode
        self.now_ms = now_ms() if now is None else now
        """The batch's processing time: TTL expiries and processing-time timers count from it
        (``set_processing_time`` moves it)."""
        self._cursor = _core.StateCursor(self.now_ms)
        """The current key's prefix and the processing time, as the variables' native calls read them."""
        self._timers_ahead: Any = None
        """The timers by key of the batch's keys, read ahead (``_core.StateReadAhead``)."""
        self.declared: dict[str, Declared] = {}
        self._ttl_store: Any = None
        self._values_ahead: dict[str, dict[bytes, bytes | None]] = {}
        """Per value-state variable, its stored values read ahead for the batch's keys (one dict
        per name, kept: the variables' native calls hold it)."""
        self._prefixed_ahead: dict[str, Any] = {}
        """Per list and map variable, its ``_core.StateReadAhead`` (one per name, whatever number of
        variable objects ``init`` got for it)."""
        self._current_key = b""
        self._current_prefix = self._cursor.set(b"")
        self._variables: dict[str, _Variable] = {}
        """The variables ``init`` got, by name (``deleteIfExists`` turns one into a deleted one)."""

    # -- what kstate's processor loop and TwsTester drive (not Spark's handle API) ---------------

    def set_processing_time(self, ms: int) -> None:
        """Makes ``ms`` the processing time the variables' calls see (``TwsTester`` moves it)."""
        self.now_ms = self._cursor.now_ms = ms

    def __getstate__(self) -> dict[str, Any]:
        # Pickled with the processor's variables (on the driver, without stores).
        state = dict(self.__dict__)
        state["_cursor"] = state["_cursor"].now_ms
        state["_timers_ahead"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cursor = _core.StateCursor(state["_cursor"])
        self._cursor.set(self._current_key)

    def set_current_key(self, pickled_key: bytes) -> None:
        """Makes ``pickled_key`` the grouping key the variables and timers act on."""
        self._current_key = pickled_key
        self._current_prefix = self._cursor.set(pickled_key)

    def read_ahead_values(self, pickled_keys: list[bytes]) -> None:
        """Reads every value-state variable's values of ``pickled_keys`` with one ``get_many``
        each, for ``get`` / ``exists`` to take instead of one store read per call (a key's
        update or clear drops its read-ahead value), and every list and map variable's entries
        of those keys with one native scan each (kept in step with the batch's writes). An empty
        list drops them all."""
        for values in self._values_ahead.values():
            values.clear()
        if self._stores is None:
            return
        for name, ahead in self._prefixed_ahead.items():
            if name in self._variables:
                ahead.read(native_store(self._stores[name]), pickled_keys)
        if self._time_mode != "None" and TIMERS_BY_KEY in self._stores:
            if self._timers_ahead is None:
                self._timers_ahead = _core.StateReadAhead()  # the commit reads its undo from the store
            self._timers_ahead.read(native_store(self._stores[TIMERS_BY_KEY]), pickled_keys)
        if not pickled_keys:
            return
        for name, values in self._values_ahead.items():
            if name in self._variables:
                values.update(zip(pickled_keys, self._stores[name].get_many(pickled_keys)))

    def _values_read_ahead(self, name: str) -> dict[bytes, bytes | None]:
        """The values of value variable ``name`` read ahead (empty until a batch reads them)."""
        return self._values_ahead.setdefault(name, {})

    def _prefixed_read_ahead(self, name: str) -> Any:
        """The read-ahead of list or map variable ``name``."""
        ahead = self._prefixed_ahead.get(name)
        if ahead is None:
            # A task's commit takes, for its undo, the committed values the read-ahead keeps
            # of the keys the batch writes (``TwsTester``'s stores commit no batches).
            committing = isinstance(self._stores, TaskStores)
            ahead = self._prefixed_ahead[name] = _core.StateReadAhead(keep_committed=committing)
            if committing:
                self._stores.undo_sources[name] = ahead
        return ahead

    def _declare(self, name: Any, kind: str, ttl: Any, schema: Any, key_schema: Any = None) -> tuple[str, int | None]:
        name = _check_name(name)
        ttl_ms = _check_ttl(ttl)
        known = self.declared.get(name)
        if known is not None and known.kind not in (kind, "deleted"):
            raise InvalidArgumentError(f"state variable {name!r} is declared twice, as {known.kind} and {kind}")
        self.declared[name] = Declared(kind, ttl_ms, schema, key_schema)
        if ttl_ms is not None:
            _core.state_ttl_name(name)  # refuses a name the TTL index cannot hold, here on the driver
            if self._stores is not None:
                self._ttl_store = self._stores[TTL_INDEX]
        return name, ttl_ms

    def value_codec(self, name: str, schema: Any) -> Any:
        """The codec of variable ``name``'s values: typed when the query's schemas name it."""
        typed = self._schemas.get(name)
        if typed is not None:
            return TypedCodec(name, typed.current, typed.versions)
        return PickleCodec(schema)

    def key_codec(self, name: str, schema: Any) -> Any:
        """The codec of map variable ``name``'s user keys: typed when the query's schemas name it."""
        typed = self._schemas.get(name)
        if typed is not None and typed.key is not None:
            return TypedCodec(name, typed.key, versioned=False)
        return PickleCodec(schema)

    def getValueState(self, stateName: str, schema: Any = None, ttlDurationMs: int | None = None) -> ValueState:  # noqa: N802, N803
        """A value per grouping key. ``schema`` (a ``StructType`` or DDL string): values are stored
        typed (``kstate.spark.format.row_codec``), checked on write, read back as tuples;
        ``ttlDurationMs``: each update lives that long in processing time."""
        name, ttl_ms = self._declare(stateName, "value", ttlDurationMs, schema)
        return self._register(ValueState(self, name, self.value_codec(name, schema), ttl_ms))

    def getListState(self, stateName: str, schema: Any = None, ttlDurationMs: int | None = None) -> ListState:  # noqa: N802, N803
        """A list per grouping key; a TTL applies to each element from when it was written."""
        name, ttl_ms = self._declare(stateName, "list", ttlDurationMs, schema)
        return self._register(ListState(self, name, self.value_codec(name, schema), ttl_ms))

    def getMapState(  # noqa: N802
        self,
        stateName: str,  # noqa: N803
        userKeySchema: Any = None,  # noqa: N803
        valueSchema: Any = None,  # noqa: N803
        ttlDurationMs: int | None = None,  # noqa: N803
    ) -> MapState:
        """A map per grouping key; a TTL applies to each entry from its last update."""
        name, ttl_ms = self._declare(stateName, "map", ttlDurationMs, valueSchema, userKeySchema)
        codecs = self.key_codec(name, userKeySchema), self.value_codec(name, valueSchema)
        return self._register(MapState(self, name, *codecs, ttl_ms))

    def _register(self, variable: Any) -> Any:
        self._variables[variable._name] = variable
        return variable

    def deleteIfExists(self, stateName: str) -> None:  # noqa: N802, N803
        """Deletes every key's value of state variable ``stateName`` in this partition (a variable
        a previous version of the processor used), as Spark does."""
        name = _check_name(stateName)
        if name not in self.declared:
            self.declared[name] = Declared("deleted")
        if name in self._variables:
            _delete(self._variables.pop(name))
        self._values_ahead.get(name, {}).clear()
        if self._stores is None or name not in self._stores:
            return  # declared nowhere: nothing was ever stored under it
        store = self._stores[name]
        with store.all() as entries:
            keys = [k for k, _ in entries]
        if keys:
            store.put_all(keys, [None] * len(keys))

    # -- timers ----------------------------------------------------------------------------------

    def _timer_stores(self) -> tuple[Any, Any]:
        if self._time_mode == "None":
            raise InvalidArgumentError('timers need time_mode "ProcessingTime" or "EventTime"')
        if self._stores is None:
            raise InvalidArgumentError("timers are registered while processing a key, not in init")
        return self._stores[TIMERS_BY_TIME], self._stores[TIMERS_BY_KEY]

    def registerTimer(self, expiryTimestampMs: int) -> None:  # noqa: N802, N803
        """Fire ``handleExpiredTimer`` for the current key once ``expiryTimestampMs`` has passed."""
        by_time, by_key = self._timer_stores()
        time_key, key_key = _core.state_timer_keys(int(expiryTimestampMs), self._current_key, self._current_prefix)
        by_time.put(time_key, b"")
        self._put_timer_by_key(by_key, key_key, b"")

    def deleteTimer(self, expiryTimestampMs: int) -> None:  # noqa: N802, N803
        by_time, by_key = self._timer_stores()
        time_key, key_key = _core.state_timer_keys(int(expiryTimestampMs), self._current_key, self._current_prefix)
        by_time.delete(time_key)
        self._put_timer_by_key(by_key, key_key, None)

    def _put_timer_by_key(self, by_key: Any, key: bytes, value: bytes | None) -> None:
        """Stages a by-key timer write, keeping the timers read ahead in step."""
        if self._timers_ahead is None:
            by_key.put(key, value)
        else:
            self._timers_ahead.stage(native_store(by_key), self._current_prefix, key, value)

    def listTimers(self) -> Iterator[int]:  # noqa: N802
        """The current key's timers, earliest first."""
        _, by_key = self._timer_stores()
        prefix = self._current_prefix
        if self._timers_ahead is not None:
            held = self._timers_ahead.timer_expiries(prefix)
            if held is not None:
                return iter(held)
        with by_key.prefix_scan(prefix) as entries:
            expiries = [_core.state_split_timer_by_key(k)[1] for k, _ in entries]
        return iter(expiries)

    def has_timer(self, expiry_ms: int) -> bool:
        """Whether the current key still has the timer at ``expiry_ms``."""
        by_time, _ = self._timer_stores()
        time_key, _ = _core.state_timer_keys(expiry_ms, self._current_key, self._current_prefix)
        return by_time.get(time_key) is not None

    def next_timer(self) -> int | None:
        """The earliest timer of any key (``None``: none)."""
        by_time, _ = self._timer_stores()
        with by_time.all() as entries:
            first = next(entries, None)
        return None if first is None else _core.state_time_of(first[0])

    def due_timers(self, until_ms: int) -> list[tuple[int, bytes]]:
        """``(expiry, pickled key)`` of every timer due at ``until_ms``, earliest first."""
        by_time, _ = self._timer_stores()
        # Keys sort by expiry: those below <until + 1> are due.
        with by_time.range(None, _core.state_ordered_time(until_ms + 1)) as entries:
            return [_core.state_split_timer_by_time(k) for k, _ in entries]

    # -- TTL -------------------------------------------------------------------------------------

    def remove_expired(self) -> int:
        """Deletes every entry whose TTL ran out by this batch's processing time (entries written
        again since keep their newer expiry); returns how many. One native call
        (``_core.sweep_expired_state``) over the TTL index's due entries."""
        index = self._ttl_store
        if index is None:
            return 0
        variables = [
            (name, declared.kind == "value", native_store(self._stores[name]))
            for name, declared in self.declared.items()
            if declared.kind != "deleted"
        ]
        return _core.sweep_expired_state(native_store(index), variables, self.now_ms)
