"""``kstate serve``: a replica's reads over HTTP/JSON, for services in any language.

An ASGI application (Starlette, served by uvicorn) over one ``StateReplica`` that follows the
application's changelogs. Every answer is a JSON object with the ``batch_id`` it is at and the
``partitions`` it read with the batch each holds (``Answer``'s fields); ``at_least_batch`` and
``timeout`` (seconds) are query parameters of every read.

    GET  /health                                   serving or not, the batches held
    GET  /stores                                   stores, kinds, per partition the batch served
    GET  /stores/{store}/get?key=K                 a key-value store's value of K
    POST /stores/{store}/get_many                  body: a JSON list of keys; values in their order
    GET  /stores/{store}/range?from=K&to=K&limit=N entries in key order (limit: default 1,000)
    GET  /stores/{store}/all?limit=N               every entry, in key order, up to limit
    GET  /stores/{store}/fetch?key=K&time_from=T[&time_to=T]   a window store's windows of K
    GET  /stores/{store}/fetch_all?time_from=T&time_to=T&limit=N
    GET  /stores/{store}/sessions?key=K&earliest_session_end_time=T&latest_session_start_time=T
    GET  /variables/{name}?key=K                   a transform_with_state variable of grouping key K (JSON)
    GET  /variables                                the state variables and their schemas

Keys in a query string are text for stores of string keys, else JSON (``key=17``,
``key=["a",1]``; bytes keys as base64 text); bodies are JSON. Values come back as JSON: bytes
as base64 text, tuples as lists, windows as ``{"key", "start", "end"}``, entries as
``{"key", "value"}``. A store or variable the application lacks is 404; a bad key or parameter
400; a read that could not reach ``at_least_batch`` within ``timeout`` (or a replica with nothing
to serve yet) 503; each with ``{"error": message}``.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kstate.errors import (
    InvalidArgumentError,
    InvalidStateStoreError,
    KStateError,
    SerializationError,
    StateTypeError,
    StoreClosedError,
)
from kstate.serdes import BytesSerde, DoubleSerde, LongSerde, StringSerde
from kstate.spark.serving.replica import DEFAULT_TIMEOUT, Answer, StateReplica
from kstate.store_reads import KeyValue
from kstate.windowed import Windowed

log = logging.getLogger("kstate.serving")

DEFAULT_LIMIT = 1000
"""Entries a range, all or fetch_all returns when the request names no ``limit``."""
MAX_LIMIT = 100_000
"""The most entries one request may ask for."""


class BadRequest(Exception):
    """A request the replica cannot read (400), or names what the application lacks (404)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def to_json(value: Any) -> Any:
    """``value`` as JSON's types (see the module docstring)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Windowed):
        return {"key": to_json(value.key), "start": value.start, "end": value.end}
    if isinstance(value, KeyValue):
        return {"key": to_json(value.key), "value": to_json(value.value)}
    if isinstance(value, Mapping):
        return [{"key": to_json(k), "value": to_json(v)} for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if hasattr(value, "to_pylist"):  # an Arrow array
        return [to_json(v) for v in value.to_pylist()]
    if hasattr(value, "item"):  # a numpy scalar
        return to_json(value.item())
    return repr(value)


def answered(answer: Answer[Any], **fields: Any) -> dict[str, Any]:
    return {
        **fields,
        "value": to_json(answer.value),
        "batch_id": answer.batch_id,
        "partitions": {str(p): b for p, b in answer.partitions.items()},
    }


class ReplicaApi:
    """The HTTP reads of ``replica`` (see the module docstring)."""

    def __init__(self, replica: StateReplica):
        self.replica = replica

    # -- requests to reads ---------------------------------------------------------------------------

    def _store(self, request: Request, kind: str) -> str:
        store = request.path_params["store"]
        kinds = self.replica.stores
        if store not in kinds:
            raise BadRequest(f"no store named {store!r}; the application has {sorted(kinds)}", 404)
        if kinds[store] != kind:
            raise BadRequest(f"store {store!r} is a {kinds[store]} store: this read is for {kind} stores")
        return store

    def _key_of(self, store: str, text: str) -> Any:
        """A key given as text in a query string, as ``store``'s reads take it."""
        serde = self.replica.key_serde(store)
        if isinstance(serde, StringSerde):
            return text
        if isinstance(serde, BytesSerde):
            try:
                return base64.b64decode(text, validate=True)
            except ValueError:
                raise BadRequest(f"store {store!r} has bytes keys: give key as base64 text, got {text!r}") from None
        key = _json(text, "key")
        if isinstance(serde, LongSerde) and (isinstance(key, bool) or not isinstance(key, int)):
            raise BadRequest(f"store {store!r} has int64 keys, got {text!r}")
        if isinstance(serde, DoubleSerde) and (isinstance(key, bool) or not isinstance(key, (int, float))):
            raise BadRequest(f"store {store!r} has float64 keys, got {text!r}")
        return key

    def _json_key_of(self, store: str, key: Any) -> Any:
        """A key given in a JSON body, as ``store``'s reads take it (bytes: base64 text)."""
        if isinstance(self.replica.key_serde(store), BytesSerde):
            if not isinstance(key, str):
                raise BadRequest(f"store {store!r} has bytes keys: give them as base64 text, got {key!r}")
            try:
                return base64.b64decode(key, validate=True)
            except ValueError:
                raise BadRequest(f"store {store!r}: {key!r} is not base64 text") from None
        return key

    # -- endpoints -----------------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        replica = self.replica
        try:
            batches = replica.batches
            body = {
                "status": "serving",
                "application_id": replica.application_id,
                "generation": replica.generation,
                "num_partitions": replica.num_partitions,
                "batch_id": replica.batch_id,
                "partitions": {str(p): b for p, b in batches.items()},
                "following": replica.following,
            }
        except InvalidStateStoreError as error:
            return JSONResponse({"status": "not serving", "error": str(error)}, 503)
        return JSONResponse(body)

    async def stores(self, request: Request) -> Response:
        replica = self.replica
        batches = {str(p): b for p, b in replica.batches.items()}
        return JSONResponse(
            {
                "batch_id": replica.batch_id,
                "stores": {name: {"kind": kind, "partitions": batches} for name, kind in replica.stores.items()},
            }
        )

    async def variables(self, request: Request) -> Response:
        return JSONResponse({"variables": self.replica.state_variables})

    async def get(self, request: Request) -> Response:
        store = self._store(request, "key_value")
        key = self._key_of(store, _required(request, "key"))
        route_by = _optional_json(request, "route_by")
        answer = await self._call(request, self.replica.get, store, key, point=True, route_by=route_by)
        return JSONResponse(answered(answer, store=store, key=to_json(key)))

    async def get_many(self, request: Request) -> Response:
        store = self._store(request, "key_value")
        body = _json((await request.body()).decode("utf-8", "replace"), "the body")
        keys, route_by = (body.get("keys"), body.get("route_by")) if isinstance(body, dict) else (body, None)
        if not isinstance(keys, list):
            raise BadRequest('the body must be a JSON list of keys (or {"keys": [...], "route_by": [...]})')
        keys = [self._json_key_of(store, k) for k in keys]
        if route_by is not None:
            if not isinstance(route_by, list):
                raise BadRequest("route_by must be a JSON list: per key, its key columns' values")
            route_by = [tuple(r) if isinstance(r, list) else r for r in route_by]
        answer = await self._call(request, self.replica.get_many, store, keys, point=True, route_by=route_by)
        return JSONResponse(answered(answer, store=store))

    async def range(self, request: Request) -> Response:
        store = self._store(request, "key_value")
        params = request.query_params
        low = None if "from" not in params else self._key_of(store, params["from"])
        high = None if "to" not in params else self._key_of(store, params["to"])
        answer = await self._call(request, self.replica.range, store, low, high, limit=_limit(request))
        return JSONResponse(answered(answer, store=store))

    async def all(self, request: Request) -> Response:
        store = self._store(request, "key_value")
        answer = await self._call(request, self.replica.all, store, limit=_limit(request))
        return JSONResponse(answered(answer, store=store))

    async def fetch(self, request: Request) -> Response:
        store = self._store(request, "window")
        key = self._key_of(store, _required(request, "key"))
        time_from = _int(request, "time_from")
        time_to = _int(request, "time_to", None)
        route_by = _optional_json(request, "route_by")
        answer = await self._call(request, self.replica.fetch, store, key, time_from, time_to, route_by=route_by)
        return JSONResponse(answered(answer, store=store, key=to_json(key)))

    async def fetch_all(self, request: Request) -> Response:
        store = self._store(request, "window")
        time_from, time_to = _int(request, "time_from"), _int(request, "time_to")
        answer = await self._call(request, self.replica.fetch_all, store, time_from, time_to, limit=_limit(request))
        return JSONResponse(answered(answer, store=store))

    async def sessions(self, request: Request) -> Response:
        store = self._store(request, "session")
        key = self._key_of(store, _required(request, "key"))
        earliest_end = _int(request, "earliest_session_end_time")
        latest_start = _int(request, "latest_session_start_time")
        route_by = _optional_json(request, "route_by")
        answer = await self._call(
            request, self.replica.find_sessions, store, key, earliest_end, latest_start, route_by=route_by
        )
        return JSONResponse(answered(answer, store=store, key=to_json(key)))

    async def variable(self, request: Request) -> Response:
        name = request.path_params["name"]
        variables = self.replica.state_variables
        if name not in variables:
            raise BadRequest(f"no state variable {name!r}; the application's are {sorted(variables)}", 404)
        key = _json(_required(request, "key"), "key")
        key = tuple(key) if isinstance(key, list) else key
        answer = await self._call(request, self.replica.state_variable, name, key)
        return JSONResponse(answered(answer, variable=name, key=to_json(key)))

    async def _call(
        self, request: Request, read: Callable[..., Answer[Any]], *args: Any, point: bool = False, **kwargs: Any
    ) -> Answer[Any]:
        """``read(*args, **kwargs)`` with the request's ``at_least_batch`` and ``timeout``: a
        ``point`` read that waits for no batch is tried in the event loop (it takes
        microseconds, and waits for nothing: ``timeout=0``), others (and a point read of a
        replica with nothing to serve yet) in a thread, as they may wait or scan."""
        at_least_batch = _int(request, "at_least_batch", None)
        timeout = _float(request, "timeout", DEFAULT_TIMEOUT)
        if point and at_least_batch is None:
            try:
                return read(*args, at_least_batch=None, timeout=0, **kwargs)
            except InvalidStateStoreError:
                pass
        return await run_in_threadpool(read, *args, at_least_batch=at_least_batch, timeout=timeout, **kwargs)

    def routes(self) -> list[Route]:
        return [
            Route("/health", self.health),
            Route("/stores", self.stores),
            Route("/stores/{store}/get", self.get),
            Route("/stores/{store}/get_many", self.get_many, methods=["POST"]),
            Route("/stores/{store}/range", self.range),
            Route("/stores/{store}/all", self.all),
            Route("/stores/{store}/fetch", self.fetch),
            Route("/stores/{store}/fetch_all", self.fetch_all),
            Route("/stores/{store}/sessions", self.sessions),
            Route("/variables", self.variables),
            Route("/variables/{name}", self.variable),
        ]


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise BadRequest(f"{what} is not JSON: {error}") from None


def _required(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if value is None:
        raise BadRequest(f"the query parameter {name!r} is missing")
    return value


def _optional_json(request: Request, name: str) -> Any:
    text = request.query_params.get(name)
    if text is None:
        return None
    value = _json(text, name)
    return tuple(value) if isinstance(value, list) else value


def _int(request: Request, name: str, default: Any = ...) -> Any:
    text = request.query_params.get(name)
    if text is None:
        if default is ...:
            raise BadRequest(f"the query parameter {name!r} is missing")
        return default
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, got {text!r}") from None


def _float(request: Request, name: str, default: float) -> float:
    text = request.query_params.get(name)
    try:
        value = default if text is None else float(text)
    except ValueError:
        raise BadRequest(f"{name} must be a number, got {text!r}") from None
    if not 0 <= value <= 3600:
        raise BadRequest(f"{name} must be between 0 and 3600 seconds, got {text!r}")
    return value


def _limit(request: Request) -> int:
    limit = _int(request, "limit", DEFAULT_LIMIT)
    if not 0 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit must be between 0 and {MAX_LIMIT}, got {limit}")
    return int(limit)


def _error(status: int) -> Callable[[Request, Exception], Any]:
    async def respond(request: Request, error: Exception) -> Response:
        return JSONResponse({"error": str(error)}, status)

    return respond


async def _bad_request(request: Request, error: Exception) -> Response:
    assert isinstance(error, BadRequest)
    return JSONResponse({"error": str(error)}, error.status)


def application(replica: StateReplica, follow_interval: float | None = 1.0) -> Starlette:
    """The ASGI application serving ``replica`` (following every ``follow_interval`` seconds
    while it runs; ``None``: the caller refreshes it); the replica is closed when it stops."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if follow_interval is not None:
            replica.follow(follow_interval)
        try:
            yield
        finally:
            replica.close()

    handlers: dict[Any, Callable[[Request, Exception], Any]] = {
        BadRequest: _bad_request,
        InvalidArgumentError: _error(400),
        StateTypeError: _error(400),
        SerializationError: _error(400),
        InvalidStateStoreError: _error(503),
        StoreClosedError: _error(503),
        KStateError: _error(500),
    }
    return Starlette(routes=ReplicaApi(replica).routes(), exception_handlers=handlers, lifespan=lifespan)


def serve(
    changelog_dir: str,
    application_id: str,
    port: int,
    host: str = "127.0.0.1",
    storage_options: Mapping[str, Any] | None = None,
    local_dir: str | None = None,
    follow_interval: float = 1.0,
) -> None:
    """Builds (or catches up) a replica of ``application_id``'s state and serves it on
    ``host:port`` until interrupted."""
    import uvicorn

    replica = StateReplica(changelog_dir, application_id, storage_options, local_dir)
    log.info("serving %s at batch %s on http://%s:%d", application_id, replica.batch_id, host, port)
    uvicorn.run(application(replica, follow_interval), host=host, port=port, log_level="warning")
