"""The emulator's listeners: one :class:`EmulatorServer` serves a namespace over AMQP 1.0.

One :class:`EmulatorServer` serves a :class:`~dagster_eventhub_ingest.emulator.hub.Namespace` on
127.0.0.1 (and, if asked, AMQP over WebSockets). Everything runs on one event loop thread, so hub
state needs no locks (``Namespace.create_hub`` has its own for callers on other threads).
:mod:`.connection` speaks AMQP with each client (sessions, links in :mod:`.links`), and
:mod:`.service` answers as Event Hubs does; :mod:`.wire` holds the vocabulary they share.
Outgoing frames are collected per connection and written once per loop iteration; stored events
are already encoded, so delivering one is a header pack and a slice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl

from dagster_eventhub_ingest.emulator.auth import Authenticator
from dagster_eventhub_ingest.emulator.connection import Connection
from dagster_eventhub_ingest.emulator.hub import Namespace
from dagster_eventhub_ingest.emulator.service import Reader, Service
from dagster_eventhub_ingest.emulator.wire import (
    BATCH_MESSAGE_FORMAT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_MESSAGE_SIZE,
    MAX_CONCURRENT_READERS,
)
from dagster_eventhub_ingest.emulator.ws import WEBSOCKET_PATH, WebSocketProtocol

__all__ = [
    "BATCH_MESSAGE_FORMAT",
    "DEFAULT_IDLE_TIMEOUT",
    "MAX_CONCURRENT_READERS",
    "EmulatorServer",
    "server_ssl_context",
]

logger = logging.getLogger(__name__)


def server_ssl_context(
    cert: str | os.PathLike[str] | None, key: str | os.PathLike[str] | None
) -> ssl.SSLContext | None:
    """TLS context for the listeners from PEM files (``key`` may be inside ``cert``); None: off.

    Raises ``ValueError`` naming the file and what is wrong when they cannot be loaded.
    """
    if cert is None:
        if key is not None:
            raise ValueError("a TLS key was given without a certificate: give --tls-cert too")
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(os.fspath(cert), os.fspath(key) if key is not None else None)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(
            f"cannot load the TLS certificate {os.fspath(cert)!r}"
            + (f" / key {os.fspath(key)!r}" if key is not None else "")
            + f": {exc}. Give PEM files: the server certificate (its chain) and its private key."
        ) from None
    return context


class EmulatorServer:
    """The Event Hubs emulator: serves a :class:`Namespace` over AMQP 1.0 on asyncio.

    Example::

        server = EmulatorServer(Namespace())
        server.namespace.create_hub("telemetry", 4)
        await server.start()          # server.port is the bound port
        ...
        await server.stop()
    """

    def __init__(
        self,
        namespace: Namespace,
        host: str = "127.0.0.1",
        port: int = 0,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        auth: Authenticator | None = None,
        ws_port: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    ) -> None:
        self.namespace = namespace
        self.auth = auth if auth is not None else Authenticator()
        self.host = host
        self.port = port
        self.ws_port = ws_port
        self.ssl_context = ssl_context
        self.service = Service(
            namespace, self.auth, host, max_message_size, max_frame_size, idle_timeout
        )
        self._server: asyncio.base_events.Server | None = None
        self._ws_server: asyncio.base_events.Server | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the server runs on (set by :meth:`start`)."""
        return self.service.loop

    @property
    def readers(self) -> dict[tuple[str, str, str], list[Reader]]:
        """The attached readers by (hub, consumer group lower-cased, partition id)."""
        return self.service.readers

    async def start(self) -> None:
        """Bind and start accepting connections (``self.port`` is set to the bound port)."""
        loop = self.service.loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self.service),
            self.host,
            self.port,
            reuse_address=True,
            ssl=self.ssl_context,
        )
        self.port = self.service.port = self._server.sockets[0].getsockname()[1]
        scheme = "amqps" if self.ssl_context is not None else "amqp"
        logger.info("emulator listening on %s://%s:%d", scheme, self.host, self.port)
        if self.ws_port is not None:
            try:
                self._ws_server = await loop.create_server(
                    lambda: WebSocketProtocol(lambda: Connection(self.service)),
                    self.host,
                    self.ws_port,
                    reuse_address=True,
                    ssl=self.ssl_context,
                )
            except OSError:
                self._server.close()
                raise
            self.ws_port = self._ws_server.sockets[0].getsockname()[1]
            logger.info(
                "AMQP over WebSockets on %s://%s:%d%s",
                "wss" if self.ssl_context is not None else "ws",
                self.host,
                self.ws_port,
                WEBSOCKET_PATH,
            )

    async def stop(self) -> None:
        """Stop accepting, close every connection, close persistence files."""
        for listener in (self._server, self._ws_server):
            if listener is not None:
                listener.close()
        for conn in list(self.service.connections):
            if conn.transport is not None:
                conn.transport.abort()
        for listener in (self._server, self._ws_server):
            if listener is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(listener.wait_closed(), 5)
        self._server = self._ws_server = None
        self.namespace.close()
