"""One AMQP 1.0 connection with one session, over TCP or TLS: the receiver's transport.

It opens as the Azure SDK's clients open theirs: SASL ``ANONYMOUS`` (authorization follows over
``$cbs``, :mod:`.cbs`), then the protocol header, ``open`` and ``begin`` pipelined. Every read
goes into one buffer that a single ``recv_into`` refills (a 1 KB event is ~1/250 of a refill on
plain TCP, one TLS record over TLS), so the partition receiver (:mod:`.receiver`) takes whole
frames straight from it: its own transfers by index (or a run of them through the native step),
anything else through :meth:`Connection.dispatch`, which decodes the performative and hands it to
the link it names. Writes are few (flows, a token now and then) and go out at once; an empty
frame keeps the connection open when nothing was written for half the peer's idle time-out.

Nothing here is shared between connections or with any other library: a reader owns its socket.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import platform
import socket
import ssl
import struct
import sys
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from dagster_eventhub_ingest.resources.amqp import framing
from dagster_eventhub_ingest.resources.amqp.codec import AMQPDecodeError, Symbol
from dagster_eventhub_ingest.resources.amqp.errors import (
    AmqpError,
    ConnectionLostError,
    LinkDetachedError,
)
from dagster_eventhub_ingest.resources.amqp.framing import AMQP_HEADER, SASL_HEADER, Performative

if TYPE_CHECKING:
    from collections.abc import Callable

    from dagster_eventhub_ingest.resources.settings import EventHubSettings

__all__ = ["Connection", "Endpoint", "Link"]

logger = logging.getLogger(__name__)

AMQP_PORT = 5672
AMQPS_PORT = 5671
#: What we accept per frame (the SDK's value): larger messages come in several frames.
MAX_FRAME_SIZE = 1024 * 1024
#: Transfer frames the peer may send before we renew the session's window (the SDK's value).
SESSION_WINDOW = 64 * 1024
#: The receive buffer; it grows to the size of a larger frame when one arrives.
BUFFER_BYTES = 256 * 1024
CONNECT_TIMEOUT_SECONDS = 10.0

_u32 = struct.Struct(">I").unpack_from
_EMPTY = framing.empty_frame()


@dataclass(frozen=True)
class Endpoint:
    """Where a connection dials, whether it speaks TLS, and the host name it presents.

    ``hostname`` is the namespace's host (TLS's server name and certificate check, ``open`` and
    SASL's hostname); ``host``/``port`` are where the socket goes (the same host, unless a test
    points it elsewhere). ``cafile``: trust these CAs instead of the system's.
    """

    host: str
    port: int
    tls: bool
    hostname: str
    cafile: str | None = None

    @classmethod
    def of(cls, settings: EventHubSettings) -> Endpoint:
        """Where the Azure SDK would connect for ``settings``: TLS on 5671 at the namespace's
        host (the port given with it is not used under TLS, as in the SDK); plain AMQP on the
        connection string's port (5672 if none) with ``UseDevelopmentEmulator=true``."""
        parsed = urlparse(f"sb://{settings.namespace}")
        hostname = parsed.hostname or settings.namespace
        if settings.is_emulator:
            return cls(hostname, parsed.port or AMQP_PORT, False, hostname)
        return cls(hostname, AMQPS_PORT, True, hostname)


class Link:
    """One end of a link on the connection's session: what :meth:`Connection.dispatch` calls.

    ``handle`` is ours; ``remote_handle`` the peer's, known once its ``attach`` arrived (frames
    the peer sends on the link name that one).
    """

    def __init__(self, name: str, handle: int) -> None:
        self.name = name
        self.handle = handle
        self.remote_handle: int | None = None
        self.attached = False
        self.error: AmqpError | None = None  # set when the peer detached the link

    def on_attach(self, fields: list[Any]) -> None:
        self.remote_handle = fields[1]
        self.attached = True

    def on_flow(self, fields: list[Any]) -> None:
        """The peer's flow naming this link."""

    def on_transfer(self, fields: list[Any], payload: bytes) -> None:
        """A transfer frame on this link (``payload``: its part of the message)."""

    def on_disposition(self, fields: list[Any]) -> None:
        """A disposition on the session (every link sees it)."""

    def on_detach(self, fields: list[Any]) -> None:
        self.attached = False
        error = fields[2] if len(fields) > 2 else None
        self.error = LinkDetachedError.from_error(error, "amqp:link:detach-forced")


@functools.cache
def _properties() -> dict[Any, Any]:
    """The connection's properties, as a user agent (what the SDK sends under its own name)."""
    try:
        from importlib.metadata import version

        ours = version("dagster-eventhub-ingest")
    except Exception:  # code shipped as a zip has no distribution metadata
        ours = "unknown"
    framework = "Python/{}.{}.{}".format(*sys.version_info[:3])
    system = platform.platform()
    return {
        Symbol("product"): "dagster-eventhub-ingest",
        Symbol("version"): ours,
        Symbol("framework"): framework,
        Symbol("platform"): system,
        Symbol("user-agent"): f"dagster-eventhub-ingest/{ours} {framework} ({system})",
    }


class Connection:
    """An AMQP connection to ``endpoint`` with one session on channel 0 (see the module doc).

    The buffer is public to the receiver: ``buf[start:end]`` holds what was received and not
    taken yet; the receiver moves ``start`` past the frames it takes itself.
    """

    channel = 0

    def __init__(self, endpoint: Endpoint, *, timeout: float) -> None:
        self.endpoint = endpoint
        self.timeout = timeout  # the handshake's and each request's deadline, in seconds
        self.container_id = f"ehingest-{uuid.uuid4()}"
        self.sock: socket.socket | None = None
        self.buf = bytearray(BUFFER_BYTES)
        self.view = memoryview(self.buf)
        self.start = 0
        self.end = 0
        self.remote_channel: int | None = None  # the peer's channel of our session
        self.remote_max_frame_size = 512
        self._heartbeat: float | None = None  # seconds between writes, from the peer's open
        self._last_sent = time.monotonic()
        self._opened = False
        # Session state (AMQP 2.5.6): transfer ids and windows, both ways.
        self.next_outgoing_id = 0
        self.next_incoming_id = 0
        self.window = SESSION_WINDOW
        self.incoming_window = self.window
        self.max_frame_size = MAX_FRAME_SIZE
        self._links: dict[str, Link] = {}
        self._remote: dict[int, Link] = {}
        self._next_handle = 0
        self.closed = False

    # -- opening ----------------------------------------------------------------------------

    def open(self) -> None:
        """Connect, SASL ``ANONYMOUS``, ``open`` and ``begin``; raises on failure (the socket is
        closed then)."""
        try:
            self.sock = self._connect()
            deadline = time.monotonic() + self.timeout
            self._sasl(deadline)
            self.send(
                AMQP_HEADER
                + framing.open_(
                    self.container_id,
                    self.max_frame_size,
                    None,
                    hostname=self.endpoint.hostname,
                    properties=_properties(),
                )
                + framing.begin(self.channel, None, 0, self.window, self.window)
            )
            self._expect_header(AMQP_HEADER, deadline)
            self.pump(lambda: self.remote_channel is not None, deadline, "opening the session")
        except BaseException:
            self.close()
            raise

    def _connect(self) -> socket.socket:
        ep = self.endpoint
        where = f"{ep.host}:{ep.port}" + (" (TLS)" if ep.tls else "")
        try:
            sock = socket.create_connection((ep.host, ep.port), CONNECT_TIMEOUT_SECONDS)
        except OSError as exc:
            raise ConnectionLostError(
                "amqp:connection:forced", f"cannot connect to {where}: {exc}"
            ) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if ep.tls:
                context = ssl.create_default_context(cafile=ep.cafile)
                sock = context.wrap_socket(sock, server_hostname=ep.hostname)
        except ssl.SSLCertVerificationError as exc:
            sock.close()
            raise ConnectionLostError(
                "amqp:connection:forced",
                f"the certificate of {where} is not trusted: {exc}",
                retryable=False,
            ) from exc
        except OSError as exc:
            sock.close()
            raise ConnectionLostError(
                "amqp:connection:forced", f"TLS with {where} failed: {exc}"
            ) from exc
        return sock

    def _sasl(self, deadline: float) -> None:
        self.send(SASL_HEADER)
        self._expect_header(SASL_HEADER, deadline)
        code, fields = self._sasl_frame(deadline)
        offered = fields[0] if fields else None
        mechanisms = [offered] if isinstance(offered, str) else list(offered or [])
        if code != Performative.SASL_MECHANISMS or "ANONYMOUS" not in mechanisms:
            raise ConnectionLostError(
                "amqp:not-implemented",
                f"the service offers SASL {mechanisms}, not ANONYMOUS (authorization is by CBS)",
            )
        self.send(framing.sasl_init("ANONYMOUS", b"", self.endpoint.hostname))
        code, fields = self._sasl_frame(deadline)
        if code != Performative.SASL_OUTCOME or not fields or fields[0] != 0:
            raise ConnectionLostError(
                "amqp:unauthorized-access", f"SASL outcome {fields[0] if fields else None}"
            )

    def _sasl_frame(self, deadline: float) -> tuple[int, list[Any]]:
        while True:
            size = self.whole_frame()
            if size is None:
                self._fill_by(deadline, "the SASL handshake")
                continue
            start = self.start
            body = bytes(self.view[start + 4 * self.buf[start + 4] : start + size])
            self.start = start + size
            if not body:
                continue  # an empty frame (a heartbeat)
            code, fields, _ = framing.parse_performative(body)
            return code, fields

    def _expect_header(self, header: bytes, deadline: float) -> None:
        while self.end - self.start < 8:
            self._fill_by(deadline, "the protocol header")
        got = bytes(self.view[self.start : self.start + 8])
        self.start += 8
        if got != header:
            raise ConnectionLostError(
                "amqp:connection:framing-error",
                f"the service answered protocol header {got!r}, not {header!r}",
            )

    # -- reading ----------------------------------------------------------------------------

    def whole_frame(self) -> int | None:
        """The size of the frame at ``start`` if it is wholly in the buffer, else None (the
        buffer is made large enough for it)."""
        avail = self.end - self.start
        if avail < 8:
            return None
        size: int = _u32(self.buf, self.start)[0]
        if size < 8 or size > self.max_frame_size:
            raise ConnectionLostError(
                "amqp:connection:framing-error",
                f"a frame of {size} bytes (8 to {self.max_frame_size} were agreed)",
            )
        if size > avail:
            if size > len(self.buf):
                self._grow(size)
            return None
        return size

    def _grow(self, size: int) -> None:
        data = self.buf[self.start : self.end]
        self.buf = bytearray(max(size, 2 * len(self.buf)))
        self.view = memoryview(self.buf)
        self.buf[: len(data)] = data
        self.start, self.end = 0, len(data)

    def fill(self, timeout: float) -> bool:
        """Receive what the socket has (waiting up to ``timeout`` seconds); False on a timeout.

        Sends the keep-alive empty frame first when one is due, and never waits past the next.
        Raises :class:`ConnectionLostError` when the connection ended.
        """
        sock = self.sock
        if sock is None:
            raise ConnectionLostError("amqp:connection:forced", "the connection is closed")
        if self._heartbeat is not None:
            idle = time.monotonic() - self._last_sent
            if idle >= self._heartbeat:
                self.send(_EMPTY)
                idle = 0.0
            timeout = min(timeout, self._heartbeat - idle)
        start, end = self.start, self.end
        if start == end:
            start = end = self.start = self.end = 0
        else:
            # The frame at ``start`` must fit whole; a refill needs room after ``end``.
            size = _u32(self.buf, start)[0] if end - start >= 8 else 0
            if size > len(self.buf):
                self._grow(size)
                start, end = self.start, self.end
            elif len(self.buf) - end < 16 * 1024 or start + size > len(self.buf):
                self.buf[: end - start] = self.buf[start:end]
                start, end = 0, end - start
                self.start, self.end = start, end
        try:
            sock.settimeout(max(timeout, 0.0))
            got = sock.recv_into(self.view[end:])
        except TimeoutError:
            return False
        except ssl.SSLWantReadError:
            return False
        except OSError as exc:
            raise ConnectionLostError(
                "amqp:connection:forced", f"the connection failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not got:
            raise ConnectionLostError("amqp:connection:forced", "the service closed the socket")
        self.end = end + got
        return True

    def _fill_by(self, deadline: float, what: str) -> None:
        left = deadline - time.monotonic()
        if (left <= 0 or not self.fill(left)) and time.monotonic() >= deadline:
            raise ConnectionLostError(
                "amqp:connection:forced", f"no answer within {self.timeout:g}s during {what}"
            )

    def pump(self, done: Callable[[], bool], deadline: float, what: str) -> None:
        """Take frames (through :meth:`dispatch`) until ``done()``; raises past ``deadline``."""
        while not done():
            size = self.whole_frame()
            if size is None:
                self._fill_by(deadline, what)
                continue
            self.dispatch(size)

    # -- frames -----------------------------------------------------------------------------

    def dispatch(self, size: int) -> None:
        """Take the frame of ``size`` bytes at ``start`` and act on it (any performative)."""
        start = self.start
        buf = self.buf
        body_at = start + 4 * buf[start + 4]
        frame_type = buf[start + 5]
        self.start = start + size
        if body_at >= start + size:
            return  # an empty frame: the peer's keep-alive
        body = bytes(self.view[body_at : start + size])
        try:
            code, fields, at = framing.parse_performative(body)
        except (AMQPDecodeError, ValueError, IndexError) as exc:
            raise ConnectionLostError(
                "amqp:decode-error", f"a frame that is not AMQP: {exc}"
            ) from exc
        if frame_type != 0:
            raise ConnectionLostError(
                "amqp:connection:framing-error", f"a frame of type {frame_type} after SASL"
            )
        if code == Performative.TRANSFER:
            self.next_incoming_id += 1
            self.incoming_window -= 1
            link = self._remote.get(fields[0])
            if link is not None:
                link.on_transfer(fields, body[at:])
            if self.incoming_window < self.window // 2:
                self.send_flow()
        elif code == Performative.FLOW:
            handle = fields[4] if len(fields) > 4 else None
            link = None if handle is None else self._remote.get(handle)
            if link is not None:
                link.on_flow(fields)
        elif code == Performative.DISPOSITION:
            for link in list(self._links.values()):
                link.on_disposition(fields)
        elif code == Performative.ATTACH:
            link = self._links.get(_text(fields[0]))
            if link is not None:
                self._remote[fields[1]] = link
                link.on_attach(fields)
        elif code == Performative.DETACH:
            link = self._remote.pop(fields[0], None)
            if link is not None:
                self._links.pop(link.name, None)
                link.on_detach(fields)
                if len(fields) > 1 and fields[1]:
                    self._send_quietly(framing.detach(self.channel, link.handle, True))
        elif code == Performative.OPEN:
            self._on_open(fields)
        elif code == Performative.BEGIN:
            self.remote_channel = int.from_bytes(buf[start + 6 : start + 8], "big")
            self.next_incoming_id = fields[1] or 0
        elif code == Performative.END:
            raise ConnectionLostError.from_error(fields[0] if fields else None, "amqp:session:end")
        elif code == Performative.CLOSE:
            self._send_quietly(framing.close())
            raise ConnectionLostError.from_error(
                fields[0] if fields else None, "amqp:connection:forced"
            )

    def _on_open(self, fields: list[Any]) -> None:
        self._opened = True
        if len(fields) > 2 and fields[2]:
            self.remote_max_frame_size = int(fields[2])
        idle_ms = fields[4] if len(fields) > 4 else None
        # The SDK's ratio: an empty frame after half the peer's idle time-out without a write.
        self._heartbeat = idle_ms / 2000 if idle_ms else None

    # -- writing ----------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Write ``data`` (whole frames) now; raises :class:`ConnectionLostError` if it cannot."""
        sock = self.sock
        if sock is None:
            raise ConnectionLostError("amqp:connection:forced", "the connection is closed")
        try:
            sock.settimeout(self.timeout)
            sock.sendall(data)
        except OSError as exc:
            raise ConnectionLostError(
                "amqp:connection:forced", f"the connection failed: {type(exc).__name__}: {exc}"
            ) from exc
        self._last_sent = time.monotonic()

    def _send_quietly(self, data: bytes) -> None:
        try:
            self.send(data)
        except ConnectionLostError:
            logger.debug("a reply to the service's detach or close could not be written")

    def send_flow(
        self,
        *,
        handle: int | None = None,
        delivery_count: int | None = None,
        link_credit: int | None = None,
    ) -> None:
        """A flow renewing the session's incoming window; a link's flow too with ``handle``,
        its ``delivery_count`` and the ``link_credit`` it grants."""
        self.incoming_window = self.window
        self.send(
            framing.flow(
                self.channel,
                next_incoming_id=self.next_incoming_id,
                incoming_window=self.window,
                next_outgoing_id=self.next_outgoing_id,
                outgoing_window=self.window,
                handle=handle,
                delivery_count=delivery_count,
                link_credit=link_credit,
            )
        )

    def attach(
        self,
        link: Link,
        *,
        receiver: bool,
        source: bytes,
        target: bytes,
        max_message_size: int | None = None,
        desired_capabilities: list[str] | None = None,
        properties: dict[Any, Any] | None = None,
    ) -> None:
        """Send ``link``'s attach as the SDK's clients write theirs (settlement left to the
        service, no delivery count on a receiver); the peer's frames reach the link by its name
        until its attach names its handle."""
        self._links[link.name] = link
        self.send(
            framing.attach(
                self.channel,
                name=link.name,
                handle=link.handle,
                role_receiver=receiver,
                source=source,
                target=target,
                snd_settle_mode=0,
                rcv_settle_mode=0,
                initial_delivery_count=None if receiver else 0,
                max_message_size=max_message_size,
                desired_capabilities=desired_capabilities,
                properties=properties,
                incomplete_unsettled=None,
            )
        )

    def new_handle(self) -> int:
        handle = self._next_handle
        self._next_handle += 1
        return handle

    def close(self) -> None:
        """End the session and close the connection without waiting for the peer's answers
        (idempotent; never raises)."""
        if self.closed:
            return
        self.closed = True
        sock, self.sock = self.sock, None
        if sock is None:
            return
        with contextlib.suppress(OSError), contextlib.closing(sock):
            if self._opened:
                goodbye = b"".join(
                    framing.detach(self.channel, link.handle, True)
                    for link in self._links.values()
                    if link.attached
                )
                sock.settimeout(1.0)
                sock.sendall(goodbye + framing.end(self.channel) + framing.close())


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)
