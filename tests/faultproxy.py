"""A small TCP fault proxy for tests: forwards bytes between clients and one upstream service,
and injects the faults a network or a dying service causes.

- ``cut_after_bytes``: once a connection has carried more than this many bytes from the
  service to the client, it is closed and the proxy goes ``dead`` (every later connection is
  closed at once): the service dies mid-stream, e.g. the hub in the middle of a read.
- ``drop_response_after(marker)``: the first request whose bytes contain ``marker`` reaches
  the service, but its response is swallowed and the connection closed: a write that
  succeeded and whose answer was lost.
- ``die_at(marker)``: the service dies when a request containing ``marker`` arrives (that
  request never reaches it): e.g. the store killed at the checkpoint.
- ``dead``: set it to refuse service from now on (connections are accepted, then closed).

Everything runs on daemon threads on 127.0.0.1; use it as a context manager (always stopped).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

__all__ = ["FaultProxy"]


class FaultProxy:
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
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="faultproxy", daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

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
            state = {"down": 0, "drop": False}
            with self._lock:
                self._sockets += [client, server]
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
