"""An HTTP/1.1 reverse proxy that injects faults between an S3 client and a real S3 API server
(moto's server) on loopback: the soak harness and kstate's storage tests put it in front of the
server to see what kstate makes of 500s, 503 SlowDown, slow answers, connections reset mid-request
or mid-response, outages, and a client killed at an exact request. Standard library only: a
thread per client connection (kept alive across requests), a new upstream connection per request,
bodies forwarded byte for byte (by Content-Length or chunked; ``aws-chunked`` content is bytes).

Faults are drawn per request from a seeded ``random.Random``: ``error_share`` of requests get
``500 InternalError``, ``slowdown_share`` ``503 SlowDown`` (both with S3's XML error body),
``delay_share`` wait up to ``max_delay`` seconds and are forwarded, ``reset_share`` are reset
(half before forwarding, after about half of the request body; half after, once the upstream
answered, after the response head and half its body, or half the head when it has none).
``counts`` says how often each happened; ``"forwarded"`` counts requests answered in full by the
upstream (delayed ones too)."""

from __future__ import annotations

import collections
import os
import random
import re
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from typing import NamedTuple
from urllib.parse import parse_qs, urlsplit

_ANSWERS = {  # fault: status line, S3 error code, message
    "error500": ("500 Internal Server Error", "InternalError", "We encountered an internal error. Please try again."),
    "slowdown503": ("503 Slow Down", "SlowDown", "Please reduce your request rate."),
    "outage503": ("503 Slow Down", "SlowDown", "Please reduce your request rate."),
}
_FAULTS = {"error": "error500", "slowdown": "slowdown503", "delay": "delay"}  # share -> fault ("reset" splits)


class _Intercept(NamedTuple):
    predicate: Callable[[str, str], bool]
    action: Callable[[int | None], object]
    after_forward: bool


class FaultProxy:
    """Listens on 127.0.0.1 and forwards to ``upstream`` (``http://host:port``), with faults."""

    def __init__(
        self,
        upstream: str,
        *,
        seed: int = 0,
        error_share: float = 0.0,
        slowdown_share: float = 0.0,
        delay_share: float = 0.0,
        reset_share: float = 0.0,
        max_delay: float = 0.5,
    ):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.max_delay = max_delay
        self.endpoint = ""
        self.counts: collections.Counter[str] = collections.Counter()
        # Requests by method and kind of object (the key with digits and ids masked), faulted or not.
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self._shares = {"error": 0.0, "slowdown": 0.0, "delay": 0.0, "reset": 0.0}
        self.set_shares(
            error_share=error_share, slowdown_share=slowdown_share, delay_share=delay_share, reset_share=reset_share
        )
        self._outage_until = 0.0
        self._intercepts: list[_Intercept] = []
        self._sockets: set[socket.socket] = set()  # the listener and the client connections

    def start(self) -> str:
        """Starts listening on a free port; returns the endpoint clients use."""
        listener = socket.create_server(("127.0.0.1", 0))
        self._sockets.add(listener)
        self.endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
        threading.Thread(target=self._accept, args=(listener,), name="fault-proxy", daemon=True).start()
        return self.endpoint

    def stop(self) -> None:
        """Stops listening and closes every client connection."""
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            _close(sock)

    def set_shares(self, *, error_share=None, slowdown_share=None, delay_share=None, reset_share=None) -> None:
        """Changes the shares of requests each fault hits (``None``: unchanged)."""
        given = {"error": error_share, "slowdown": slowdown_share, "delay": delay_share, "reset": reset_share}
        with self._lock:
            self._shares.update({kind: float(share) for kind, share in given.items() if share is not None})
            assert sum(self._shares.values()) <= 1.0, f"shares add up to more than 1: {self._shares}"

    def outage(self, seconds: float) -> None:
        """For ``seconds`` from now every request is answered ``503 SlowDown`` (``"outage503"``);
        ``outage(0)`` ends one."""
        with self._lock:
            self._outage_until = time.monotonic() + seconds

    def intercept(self, predicate, action, *, after_forward: bool = False) -> None:
        """Once: the next request for which ``predicate(method, path)`` holds calls
        ``action(pid of the client process or None)`` in the proxy's thread, before the request
        is forwarded (it never is) or, ``after_forward``, once the upstream answered (the answer is
        never sent); the client's connection is then reset. Counted ``"intercept"`` /
        ``"intercept_after_forward"``."""
        with self._lock:
            self._intercepts.append(_Intercept(predicate, action, after_forward))

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            with self._lock:
                self._sockets.add(client)
            threading.Thread(target=self._serve, args=(client,), name="fault-proxy-client", daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        reader = client.makefile("rb")
        try:
            while self._serve_one(client, reader):
                pass
        except (OSError, ValueError):
            pass  # the client went away, or a stop closed its connection
        finally:
            reader.close()
            with self._lock:
                self._sockets.discard(client)
            _close(client)

    def _serve_one(self, client: socket.socket, reader) -> bool:
        """Answers one request; whether the connection stays open for the next."""
        head, request_line, headers = _read_head(reader)
        if not head:
            return False
        method, path = request_line.decode().split(" ")[:2]
        with self._lock:
            self.requests[method, _kind_of(path)] += 1
        if headers.get("expect", "").lower() == "100-continue":  # answered here, not upstream
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            head = b"".join(line for line in head.splitlines(True) if not line.lower().startswith(b"expect:"))
        fault, intercept = self._choose(method, path)
        if fault == "reset_request":
            _read_body(reader, headers, half=True)
            return self._reset(client, reader, fault)
        body = _read_body(reader, headers)
        if intercept is not None and not intercept.after_forward:
            return self._intercepted(client, reader, intercept, "intercept")
        if fault in _ANSWERS:
            status, code, message = _ANSWERS[fault]
            xml = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
                f"<RequestId>{uuid.uuid4().hex[:16].upper()}</RequestId></Error>"
            ).encode()
            answer = f"HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {len(xml)}\r\n\r\n"
            client.sendall(answer.encode() + (b"" if method == "HEAD" else xml))
            self._count(fault)
            return True
        if fault == "delay":
            with self._lock:
                pause = self._random.uniform(0.0, self.max_delay)
            time.sleep(pause)
            self._count(fault)
        response_head, response_body, keep_open = self._forward(method, head + body)
        if intercept is not None:
            return self._intercepted(client, reader, intercept, "intercept_after_forward")
        if fault == "reset_response":
            cut = response_head + response_body[: len(response_body) // 2]
            client.sendall(cut if response_body else response_head[: len(response_head) // 2])
            return self._reset(client, reader, fault)
        client.sendall(response_head + response_body)
        self._count("forwarded")
        return keep_open and headers.get("connection", "").lower() != "close"

    def _choose(self, method: str, path: str) -> tuple[str | None, _Intercept | None]:
        """The fault for this request (or None) and the intercept it meets (or None)."""
        with self._lock:
            for i, pending in enumerate(self._intercepts):
                if pending.predicate(method, path):
                    return None, self._intercepts.pop(i)
            if time.monotonic() < self._outage_until:
                return "outage503", None
            draw, edge = self._random.random(), 0.0
            for kind, share in self._shares.items():
                edge += share
                if draw < edge and kind == "reset":
                    return ("reset_request" if self._random.random() < 0.5 else "reset_response"), None
                if draw < edge:
                    return _FAULTS[kind], None
            return None, None

    def _forward(self, method: str, request: bytes) -> tuple[bytes, bytes, bool]:
        """Sends ``request`` upstream on a new connection; its answer's head, body and whether
        the client connection may stay open (not if the body ran until the upstream closed)."""
        with socket.create_connection(self.upstream, timeout=120) as upstream, upstream.makefile("rb") as reader:
            upstream.sendall(request)
            status = 100
            while 100 <= status < 200:  # skip interim answers
                head, status_line, headers = _read_head(reader)
                if not head:
                    raise ConnectionError("the upstream closed without answering")
                status = int(status_line.split(b" ")[1])
            if method == "HEAD" or status in (204, 304):
                return head, b"", True
            if "chunked" in headers.get("transfer-encoding", "").lower() or "content-length" in headers:
                return head, _read_body(reader, headers), True
            return head, reader.read(), False

    def _intercepted(self, client: socket.socket, reader, intercept: _Intercept, kind: str) -> bool:
        intercept.action(pid_of_peer(client.getpeername()[1]))
        return self._reset(client, reader, kind)

    def _reset(self, client: socket.socket, reader, kind: str) -> bool:
        self._count(kind)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST
        reader.close()
        client.close()
        return False

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1


def pid_of_peer(port: int) -> int | None:
    """The pid of the local process owning the TCP socket whose local port is ``port`` (a
    client's end of a loopback connection), from /proc; ``None`` if none is found."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as file:
                rows = [row.split() for row in file.read().splitlines()[1:]]
        except OSError:
            continue
        inodes.update(f"socket:[{r[9]}]" for r in rows if int(r[1].rsplit(":", 1)[1], 16) == port and r[9] != "0")
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{pid}/fd")):
                return int(pid)
        except OSError:
            continue  # gone, or not ours to read
    return None


def _read_head(reader) -> tuple[bytes, bytes, dict[str, str]]:
    """A message's head through the blank line, its first line and its headers (names in
    lower case); an empty head at a clean end."""
    lines: list[bytes] = []
    while not lines or lines[-1] not in (b"\r\n", b"\n"):
        line = reader.readline(65536)
        if not line and lines:
            raise ConnectionError("connection closed inside a message head")
        if not line:
            return b"", b"", {}
        lines.append(line)
    fields = (line.decode("latin-1").partition(":") for line in lines[1:-1])
    return b"".join(lines), lines[0].rstrip(), {name.strip().lower(): value.strip() for name, _, value in fields}


def _read_body(reader, headers: dict[str, str], half: bool = False) -> bytes:
    """A message's body as it was framed (chunks with their sizes); with ``half`` only about
    half of it (of the first chunk when chunked)."""
    if "chunked" not in headers.get("transfer-encoding", "").lower():
        length = int(headers.get("content-length", "0"))
        return _read_exactly(reader, length // 2 if half else length)
    framed = bytearray()
    while True:
        line = reader.readline(65536)
        framed += line
        size = int(line.split(b";")[0].strip() or b"0", 16)
        if half:
            return bytes(framed + _read_exactly(reader, size // 2))
        if size == 0:
            while line not in (b"\r\n", b"\n", b""):  # trailers up to the blank line
                line = reader.readline(65536)
                framed += line
            return bytes(framed)
        framed += _read_exactly(reader, size + 2)


def _read_exactly(reader, size: int) -> bytes:
    data = reader.read(size)
    if len(data) < size:
        raise ConnectionError(f"connection closed {size - len(data)} bytes short of a body")
    return data


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in accept or recv on it
    except OSError:
        pass
    sock.close()


def _kind_of(path: str) -> str:
    """What a request is about, without which one: ``/bucket/app-count-changelog-1/0042.log`` ->
    ``/bucket/app-count-changelog-#/#.log``; a listing is its prefix, so masked, with ``?list``."""
    key, _, query = path.partition("?")
    prefix = parse_qs(query).get("prefix")
    if prefix:
        key = f"{key}/{prefix[0]}?list"
    return re.sub(r"[0-9a-f]{12,}|\d+", "#", key)
