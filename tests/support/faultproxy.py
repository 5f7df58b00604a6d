"""Small fault proxies for tests, in front of one upstream service (always on 127.0.0.1).

:class:`FaultProxy` forwards TCP bytes between clients and the service, and injects the faults a
network or a dying service causes:

- ``cut_after_bytes``: once a connection has carried more than this many bytes from the
  service to the client, it is closed and the proxy goes ``dead`` (every later connection is
  closed at once): the service dies mid-stream, e.g. the hub in the middle of a read.
- ``drop_response_after(marker)``: the first request whose bytes contain ``marker`` reaches
  the service, but its response is swallowed and the connection closed: a write that
  succeeded and whose answer was lost.
- ``die_at(marker)``: the service dies when a request containing ``marker`` arrives (that
  request never reaches it): e.g. the store killed at the checkpoint.
- ``dead``: set it to refuse service from now on (connections are accepted, then closed).
- ``sent``: every byte the clients sent, one ``bytearray`` per connection in the order they
  were accepted (what a client says on the wire, for tests that compare two clients).

:class:`HttpFaultProxy` forwards HTTP/1.1 requests (Azurite behind it) and answers some of them
itself the way a busy storage account does:

- ``throttle``: the fraction of requests answered ``429``/``503`` (``statuses``) with a
  ``Retry-After`` of ``retry_after`` seconds (``None``: no header), never forwarded;
- ``throttle_next(n, status, retry_after, header)``: exactly the next ``n`` requests, for tests
  that count (``header`` ``x-ms-retry-after-ms`` gives the wait in milliseconds);
- ``fail_after_forwarding(n, status)``: the next ``n`` requests reach the service, which applies
  them, but the client hears ``status`` (a 500 ``OperationTimedOut``: it may have succeeded);
- ``latency``: seconds added before every answer.

``log`` lists every request it saw (arrival time, method, path, status it answered or ``None``
when forwarded). Both run on daemon threads; use them as context managers (always stopped).
"""

from __future__ import annotations

import contextlib
import http.client
import random
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

__all__ = ["FaultProxy", "HttpFaultProxy", "ProxiedRequest"]


class _Proxy:
    """What both proxies share: used as a context manager, always stopped."""

    def stop(self) -> None:
        raise NotImplementedError

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class FaultProxy(_Proxy):
    """Forward 127.0.0.1:<port> to ``upstream`` (host, port) with injectable faults."""

    def __init__(self, upstream: tuple[str, int], *, cut_after_bytes: int | None = None) -> None:
        self.upstream = upstream
        self.cut_after_bytes = cut_after_bytes
        self.dead = False
        self.cuts = 0
        self.dropped: list[bytes] = []
        self._drop_marker: bytes | None = None
        self._die_marker: bytes | None = None
        self.died: list[bytes] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self.sent: list[bytearray] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="faultproxy", daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def drop_response_after(self, marker: bytes) -> None:
        """Swallow the response to the next request containing ``marker`` (then close)."""
        with self._lock:
            self._drop_marker = marker

    def die_at(self, marker: bytes) -> None:
        """Go ``dead`` when the next request containing ``marker`` arrives (not forwarded)."""
        with self._lock:
            self._die_marker = marker

    def stop(self) -> None:
        """Close the listener and every connection."""
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.dead:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            state = {"down": 0, "drop": False, "sent": bytearray()}
            with self._lock:
                self._sockets += [client, server]
                self.sent.append(state["sent"])
            threading.Thread(
                target=self._pump, args=(client, server, state, True), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(server, client, state, False), daemon=True
            ).start()

    def _pump(self, src: socket.socket, dst: socket.socket, state: dict, up: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data or self.dead:
                    break
                if up:
                    with self._lock:
                        if self._die_marker is not None and self._die_marker in data:
                            self.died.append(self._die_marker)
                            self._die_marker = None
                            self.dead = True
                            break
                        if self._drop_marker is not None and self._drop_marker in data:
                            self.dropped.append(self._drop_marker)
                            self._drop_marker = None
                            state["drop"] = True
                        state["sent"] += data
                    dst.sendall(data)
                    continue
                if state["drop"]:
                    break  # the request was served; its response is lost
                state["down"] += len(data)
                if self.cut_after_bytes is not None and state["down"] > self.cut_after_bytes:
                    self.cuts += 1
                    self.dead = True
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()


@dataclass(frozen=True)
class ProxiedRequest:
    """One request the HTTP proxy saw: when (``time.monotonic()``), what, and its own answer."""

    at: float
    method: str
    path: str
    #: The status the proxy answered itself (a throttle, or an error after forwarding), None
    #: when the service's own answer was passed on.
    status: int | None


_ERROR_CODES = {429: "TooManyRequests", 503: "ServerBusy", 500: "OperationTimedOut"}


class HttpFaultProxy(_Proxy):
    """Forward HTTP/1.1 on 127.0.0.1:<port> to ``upstream`` (host, port); throttle some of it."""

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        throttle: float = 0.0,
        statuses: tuple[int, ...] = (429, 503),
        retry_after: float | None = 1,
        latency: float = 0.0,
        seed: int | None = None,
    ) -> None:
        self.upstream = upstream
        self.throttle = throttle
        self.statuses = statuses
        self.retry_after = retry_after
        self.latency = latency
        self.log: list[ProxiedRequest] = []
        self._forced: list[tuple[int, float | None, str]] = []
        self._after: list[int] = []
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        proxy = self

        class Handler(_ForwardingHandler):
            owner = proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )

    def __enter__(self) -> HttpFaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listener."""
        self._server.shutdown()
        self._server.server_close()

    def throttle_next(
        self,
        n: int = 1,
        status: int = 429,
        retry_after: float | None = 1,
        header: str = "Retry-After",
    ) -> None:
        """Answer the next ``n`` requests with ``status`` (and a wait of ``retry_after`` s in
        ``header``) instead of forwarding them."""
        with self._lock:
            self._forced.extend([(status, retry_after, header)] * n)

    def fail_after_forwarding(self, n: int = 1, status: int = 500) -> None:
        """Forward the next ``n`` requests (the service applies them) but answer ``status``."""
        with self._lock:
            self._after.extend([status] * n)

    @property
    def throttled(self) -> int:
        """How many requests the proxy answered with an error of its own."""
        return sum(1 for r in self.log if r.status is not None)

    def _decide(self, method: str, path: str) -> tuple[tuple[int, float | None, str] | None, int]:
        """(the throttle to answer instead, or None; the status to answer after forwarding, or 0)"""
        with self._lock:
            after = 0
            if self._forced:
                fault: tuple[int, float | None, str] | None = self._forced.pop(0)
            elif self.throttle and self._random.random() < self.throttle:
                fault = (self._random.choice(self.statuses), self.retry_after, "Retry-After")
            else:
                fault = None
                after = self._after.pop(0) if self._after else 0
            status = fault[0] if fault is not None else (after or None)
            self.log.append(ProxiedRequest(time.monotonic(), method, path, status))
            return fault, after


class _ForwardingHandler(BaseHTTPRequestHandler):
    owner: HttpFaultProxy
    protocol_version = "HTTP/1.1"
    _conn: http.client.HTTPConnection | None = None

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: the log list says what happened

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        proxy = self.owner
        fault, after = proxy._decide(self.command, self.path)
        if proxy.latency:
            time.sleep(proxy.latency)
        if fault is not None:
            self._error(*fault)
            return
        if self._conn is None:
            self._conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
        headers = {k: v for k, v in self.headers.items()}
        try:
            self._conn.request(self.command, self.path, body=body, headers=headers)
            response = self._conn.getresponse()
            data = response.read()
        except OSError:
            self._conn.close()
            self.close_connection = True
            return
        if after:
            self._error(after, None, "Retry-After")  # applied, but the client cannot know
            return
        self.send_response_only(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() in ("transfer-encoding", "connection"):
                continue
            if key.lower() == "content-length" and self.command != "HEAD":
                continue
            self.send_header(key, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, retry_after: float | None, header: str) -> None:
        code = _ERROR_CODES.get(status, "ServerBusy")
        payload = (
            f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>'
            "The server is busy (fault proxy).</Message></Error>"
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("x-ms-error-code", code)
        if retry_after is not None:
            wait = retry_after * 1000 if header.lower().endswith("-ms") else retry_after
            self.send_header(header, f"{wait:g}")
        self.send_header("Content-Length", str(0 if self.command == "HEAD" else len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _serve
