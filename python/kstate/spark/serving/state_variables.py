"""``transform_with_state``'s state variables, read from a replica's stores without PySpark.

Each variable is a store named after it (``kstate.spark.processor.state_variables``): a value
state keyed by the pickled grouping key, list and map states by the grouping key's prefix and an
element's sequence number or a map key. Their kinds and schemas come from the application's
state schema record (``kstate.spark.format.state_schemas``), read in Spark's JSON form, so values
decode as the processor's ``get`` returns them: typed values as tuples of the newest schema's
fields (values of older schemas too), others as their pickles (``bytes``) unless the replica was
told to unpickle them. Values whose TTL ran out by the replica's clock are left out, as a
processor's reads leave them out by its batch's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kstate import _core
from kstate.errors import InvalidArgumentError
from kstate.spark.format.state_values import VariableDecoder, pickled_key

KINDS = ("value", "list", "map")


class StateVariables:
    """The live variables of a schema record (``SchemaLog.recorded``'s variables)."""

    def __init__(self, recorded: Mapping[str, Mapping[str, Any]], unpickle: bool):
        pickles = "objects" if unpickle else "bytes"
        self.recorded = {name: dict(v) for name, v in recorded.items() if v["kind"] in KINDS}
        self._decoders = {
            name: VariableDecoder(name, v["kind"], tuple(v["values"]), v["key"], bool(v.get("ttl")), pickles)
            for name, v in self.recorded.items()
        }

    def decoder(self, name: str) -> VariableDecoder:
        decoder = self._decoders.get(name)
        if decoder is None:
            raise InvalidArgumentError(f"no state variable {name!r}; the application's are {sorted(self._decoders)}")
        return decoder

    def read(self, view: Any, name: str, grouping_key: tuple, now_ms: int) -> Any:
        """Variable ``name`` of ``grouping_key`` in ``view`` (its store's read-committed view):
        a value state's value (``None``: none), a list state's list, a map state's dict; entries
        expired at ``now_ms`` left out."""
        decoder = self.decoder(name)
        value_of = decoder.value_of()
        pickled = pickled_key(grouping_key)
        if decoder.kind == "value":
            stored = view.get(pickled)
            if stored is None:
                return None
            expiry, raw = _core.state_split_stored(stored)
            return value_of(raw, 0) if expiry > now_ms else None
        live = []
        with view.prefix_scan(_core.state_key_prefix(pickled)) as entries:
            for key, stored in entries:
                expiry, raw = _core.state_split_stored(stored)
                if expiry > now_ms:
                    live.append((key, raw))
        if decoder.kind == "list":
            return [value_of(e, 0) for key, raw in live for e in _core.state_list_elements(key, raw)]
        user_key_of = decoder.user_key_decoder()
        return {user_key_of(key, _core.state_split_prefixed(key)[1]): value_of(raw, 0) for key, raw in live}
