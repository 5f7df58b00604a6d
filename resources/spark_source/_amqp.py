"""Cuts in what azure-eventhub's pyamqp spends per received event (the fast pull's only).

:class:`~dagster_eventhub_ingest.resources.spark_source._receiver._PartitionPull` drives the SDK's
partition consumer, whose pyamqp stack is most of ``read_range``'s ~23 us of CPU per 1 KB event;
four of its steps have cheaper equivalents (the first two 23 -> 17.5 us per event,
bench/read_range_cpu.py; the whole-frame read below then 16.6 -> 14.2; the performative decoder 14.4
-> 13.2):

* **Reads.** pyamqp reads each frame with two ``recv_into`` calls on its socket (the 8-byte
  header, then the body): two system calls per event on plain TCP. :class:`BufferedSocket` serves
  them from a buffer that one large ``recv_into`` refills (1.5-3.5 us per event less), and a
  frame wholly in the buffer is sliced out in one step (:class:`_FrameReader`).
* **Decoding.** pyamqp's ``decode_payload`` slices a ``memoryview`` per value;
  :func:`decode_payload` indexes one ``bytes`` copy instead (4.1 -> 2.2 us per 1 KB message) and
  returns exactly what pyamqp's returns, falling back to it on anything it does not decode.
  :func:`decode_frame` does the same for each frame's performative (a transfer's: 2.4 -> 1.5 us).
* **Transfers.** pyamqp takes each frame through ~15 Python calls (listen loop, read, dispatch
  by connection, session and link, the client's and the consumer's callbacks);
  :class:`_TransferListen` does their work inline for a transfer frame whole in the buffer
  (read_range alone, alternated: 16.9 -> 12.7 us per 1 KB event).
* **Messages.** The pull's messages are never pyamqp's: its decoder cannot tell strings from
  binaries and fails on chars and decimal32/64. :class:`_TransferListen` and the pull's link
  (:class:`_RawTransfer`, :func:`raw_transfers`) hand each message over decoded from its bytes
  by :func:`~dagster_eventhub_ingest.resources.spark_source._message.decode_event`. (The global
  :func:`decode_payload` serves pyamqp's other receivers in the process, not the pull.)

All stand on pyamqp internals (``SSLTransport._read`` and its ``sock``, the receiver module's
``decode_payload`` and the transport module's ``decode_frame`` globals, the ``Message``
tuples): :func:`sdk_supported` checks they are there, the decoders are installed only over
the ``_decode`` source they were proven equal to (:data:`_DECODER_SOURCE_SHA256`), and the
inline transfers only over the functions whose work they do (:data:`_TRANSFER_SOURCE_SHA256`;
tests/test_spark_source_amqp.py is the proof).
"""

from __future__ import annotations

import hashlib
import logging
import socket
import time
import uuid
from typing import Any

from dagster_eventhub_ingest.resources.spark_source._events import _MESSAGE_PROPERTIES, ColumnRows
from dagster_eventhub_ingest.resources.spark_source._message import decode_event
from dagster_eventhub_ingest.resources.spark_source._values import (
    _f32,
    _f64,
    _i16,
    _i32,
    _i64,
    _u16,
    _u32,
    _u64,
)

logger = logging.getLogger(__name__)

# One refill serves ~250 frames of a 1 KB event on plain TCP (what the kernel holds); over TLS a
# refill is one TLS record (<= 16 KB), still ~16 frames.
_BUFFER_BYTES = 256 * 1024

# sha256 of the source of azure.eventhub._pyamqp._decode that decode_payload is equivalent to
# (azure-eventhub 5.15.1). Another source keeps pyamqp's decoder: read its diff, run
# tests/test_spark_source_amqp.py against it, then update this.
_DECODER_SOURCE_SHA256 = "e0e27b5c8c90663c51a0cd75c4dcf3b16c5564c79e3176f888f019e8e4682436"


# -- reads ----------------------------------------------------------------------------------------


class BufferedSocket:
    """A socket whose ``recv_into``/``recv`` are served from a buffer; the rest is the socket's.

    A read returns buffered bytes (at least one, at most what was asked) without touching the
    socket; with nothing buffered it makes one real ``recv_into`` of up to ``size`` bytes, so a
    timeout, an SSL error or ``0`` at end of stream reach the caller exactly as before and nothing
    is consumed by a failed read. Buffered bytes are only ever handed out in order, never dropped
    while the socket is in use. Everything else (``settimeout``, ``send``, ``unwrap``, ``close``,
    ``fileno``...) goes to the wrapped socket: pyamqp's ``SSLTransport`` reads only through
    ``recv_into``. Not for the WebSocket transport, which reads through websocket-client.
    """

    __slots__ = ("_buf", "_end", "_size", "_sock", "_start", "_view")

    def __init__(self, sock: socket.socket, size: int = _BUFFER_BYTES) -> None:
        self._sock = sock
        self._size = size
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0

    @property
    def wrapped(self) -> socket.socket:
        """The real socket (plain or ``ssl.SSLSocket``)."""
        return self._sock

    @property
    def buffered(self) -> int:
        """Bytes received from the socket and not read yet."""
        return self._end - self._start

    def _fill(self) -> int:
        got = self._sock.recv_into(self._view)
        self._start, self._end = 0, got
        return got

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        """``socket.recv_into``, from the buffer; a real read only when it is empty."""
        size = len(buffer)
        if nbytes:
            if not 0 < nbytes <= size:
                raise ValueError(f"recv_into: nbytes {nbytes} outside 0..{size} (the buffer)")
            size = nbytes
        start = self._start
        avail = self._end - start
        if not avail:
            # Flags (MSG_PEEK...), an empty request or one the buffer could not hold: the socket's
            # own read, unbuffered.
            if flags or not size or size >= self._size:
                return self._sock.recv_into(buffer, nbytes, flags)
            avail = self._fill()
            if not avail:
                return 0  # end of stream
            start = 0
        elif flags:
            raise ValueError("recv_into: flags are not supported while data is buffered")
        n = size if size < avail else avail
        buffer[:n] = self._view[start : start + n]
        self._start = start + n
        return n

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        """``socket.recv``, from the buffer (pyamqp does not call it; kept in order if one does)."""
        if bufsize < 0:
            raise ValueError("negative buffersize in recv")
        start = self._start
        avail = self._end - start
        if not avail:
            if flags or not bufsize or bufsize >= self._size:
                return self._sock.recv(bufsize, flags)
            avail = self._fill()
            if not avail:
                return b""
            start = 0
        elif flags:
            raise ValueError("recv: flags are not supported while data is buffered")
        n = bufsize if bufsize < avail else avail
        self._start = start + n
        return bytes(self._view[start : start + n])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def __repr__(self) -> str:
        return f"BufferedSocket({self._sock!r}, buffered={self._end - self._start})"


def buffer_reads(handler: Any) -> bool:
    """Put a :class:`BufferedSocket` under ``handler``'s connection (once per socket).

    Cheap enough to call before every read: the pull does, after the consumer's ``_open()``
    succeeded, so the new socket of a reconnect is buffered too. Returns whether the reads are
    buffered (never on the WebSocket transport; not yet while the keep-alive thread reads).
    """
    transport = getattr(getattr(handler, "_connection", None), "_transport", None)
    sock = getattr(transport, "sock", None)
    if type(sock) is BufferedSocket:
        return True
    if not sdk_supported():
        return False
    if _SSLTransport is None:
        _bind()
    # SSLTransport._read (plain TCP or TLS) reads only through self.sock.recv_into, what this
    # buffer serves; the WebSocket transport, or a subclass with its own _read, is left alone.
    if (
        not isinstance(transport, _SSLTransport)
        or type(transport)._read is not _SSLTransport._read
        or not isinstance(sock, socket.socket)
    ):
        return False
    lock = transport.socket_lock
    # The SDK's keep-alive thread reads frames under this lock: swap between its reads (though
    # the new buffer starts empty, so even a swap amid a read would lose nothing), never wait.
    if not lock.acquire(blocking=False):
        return False
    try:
        if transport.sock is sock:
            transport.sock = BufferedSocket(sock)
            if type(transport).read is _SSLTransport.read and "read" not in vars(transport):
                transport.read = _FrameReader(transport, transport.read)
    finally:
        lock.release()
    return type(transport.sock) is BufferedSocket


def _read_to_end(stash: Any) -> bool:
    """Whether pyamqp's stash (a ``BytesIO`` of bytes its read put back after a timeout) holds
    nothing unread; the buffer's frames come after what it holds."""
    at = stash.tell()
    if stash.seek(0, 2) == at:
        return True
    stash.seek(at)
    return False


class _FrameReader:
    """pyamqp's ``read`` (one frame) for a transport over a :class:`BufferedSocket`.

    A frame wholly in the buffer is sliced out of it in one step; pyamqp's own ``read`` takes a
    ``BytesIO``, two ``bytearray``s and two ``_read`` calls per frame (30 % of the reader's CPU
    after the buffer). Anything else goes to pyamqp's ``read``, which then behaves exactly as
    before: a frame not wholly buffered, bytes pyamqp stashed after a timeout, the protocol
    header, a size below 8, a frame type other than the one asked for (pyamqp's raises), any
    other argument. The return value is pyamqp's: the 8-byte header and the payload from the
    data offset, each over a ``bytearray`` of its own (never over the buffer, which a refill
    overwrites), and the channel. Installed per transport by :func:`buffer_reads`.
    """

    __slots__ = ("_drained", "_read", "_transport")

    def __init__(self, transport: Any, read: Any) -> None:
        self._transport = transport
        self._read = read  # pyamqp's own, bound to the transport
        self._drained: Any = None  # the stash (BytesIO) last seen read to its end

    def __call__(self, verify_frame_type: int | None = 0, **kwargs: Any) -> Any:
        transport = self._transport
        sock = transport.sock
        if not kwargs and type(sock) is BufferedSocket:
            with transport.socket_lock:
                frame = self._buffered_frame(transport, sock, verify_frame_type)
            if frame is not None:
                return frame
        return self._read(verify_frame_type=verify_frame_type, **kwargs)

    def _buffered_frame(self, transport: Any, sock: BufferedSocket, verify: int | None) -> Any:
        stash = transport._read_buffer  # what pyamqp's read put back after a timeout
        if stash is not self._drained:
            if not _read_to_end(stash):
                return None
            self._drained = stash
        start = sock._start
        avail = sock._end - start
        if avail < 8:
            return None
        buf = sock._buf
        size = _I(buf, start)[0]
        if size < 8 or size > avail or buf[start : start + 4] == b"AMQP":
            return None
        if verify is not None and buf[start + 5] != verify:
            return None
        end = start + size
        header = memoryview(buf[start : start + 8])
        payload = memoryview(buf[start + 8 : end])
        sock._start = end
        return header, (buf[start + 6] << 8) | buf[start + 7], payload[header[4] - 2 :]


# -- decoding -------------------------------------------------------------------------------------

_I, _i, _Q, _q = _u32, _i32, _u64, _i64
_H, _h, _f, _d = _u16, _i16, _f32, _f64
_UUID = uuid.UUID
_new = tuple.__new__
_COMPOSITES = {35: "received", 36: "accepted", 37: "rejected", 38: "released", 39: "modified"}


class _Unhandled(Exception):
    """A constructor this decoder leaves to pyamqp's (decimals, unknown codes, huge counts)."""


def _typed(c: int, b: bytes, i: int) -> tuple[Any, int]:
    """The value of constructor ``c`` encoded from ``b[i]`` on, and the index after it.

    Mirrors pyamqp's ``_DECODE_BY_CONSTRUCTOR`` value for value (strings and symbols stay bytes,
    timestamps ints, list/map sizes are skipped and counts trusted, a described value with a
    delivery-state descriptor becomes ``{name: value}``). Short input raises (IndexError,
    struct.error, ValueError) where pyamqp's may return: the caller then asks pyamqp.
    """
    # Most frequent first: symbol keys, strings, binary, longs and timestamps of the annotations.
    if c == 0xA3 or c == 0xA1 or c == 0xA0:  # sym8, str8, vbin8
        j = i + 1 + b[i]
        return b[i + 1 : j], j
    if c == 0x81 or c == 0x83:  # long, timestamp
        return _q(b, i)[0], i + 8
    if c == 0xB0 or c == 0xB1 or c == 0xB3:  # vbin32, str32, sym32
        j = i + 4 + _I(b, i)[0]
        return b[i + 4 : j], j
    if c == 0x40:
        return None, i
    if c == 0x52 or c == 0x53 or c == 0x50:  # smalluint, smallulong, ubyte
        return b[i], i + 1
    if c == 0x54 or c == 0x55 or c == 0x51:  # smallint, smalllong, byte
        v = b[i]
        return (v - 256 if v > 127 else v), i + 1
    if c == 0x80:
        return _Q(b, i)[0], i + 8
    if c == 0x70:
        return _I(b, i)[0], i + 4
    if c == 0x71:
        return _i(b, i)[0], i + 4
    if c == 0x43 or c == 0x44:  # uint0, ulong0
        return 0, i
    if c == 0x41:
        return True, i
    if c == 0x42:
        return False, i
    if c == 0x56:
        return b[i] == 1, i + 1
    if c == 0xC1 or c == 0xD1:  # map8, map32: count of keys and values, pairs decoded in order
        if c == 0xC1:
            count = b[i + 1] >> 1
            i += 2
        else:
            count = _I(b, i + 4)[0] >> 1
            i += 8
        out: dict[Any, Any] = {}
        # Inline: the usual annotation (symbol key; long, timestamp or string value).
        for _ in range(count):
            k = b[i]
            if k == 0xA3:
                j = i + 2 + b[i + 1]
                key: Any = b[i + 2 : j]
                i = j
            else:
                key, i = _typed(k, b, i + 1)
            k = b[i]
            if k == 0x81 or k == 0x83:
                out[key] = _q(b, i + 1)[0]
                i += 9
            elif k == 0xA1:
                j = i + 2 + b[i + 1]
                out[key] = b[i + 2 : j]
                i = j
            else:
                out[key], i = _typed(k, b, i + 1)
        return out, i
    if c == 0xC0 or c == 0xD0:  # list8, list32
        if c == 0xC0:
            count = b[i + 1]
            i += 2
        else:
            count = _I(b, i + 4)[0]
            i += 8
            if count > len(b) - i:  # more elements than bytes: pyamqp's to fail (or allocate)
                raise _Unhandled
        items: list[Any] = [None] * count
        for n in range(count):
            items[n], i = _typed(b[i], b, i + 1)
        return items, i
    if c == 0xE0 or c == 0xF0:  # array8, array32: one element constructor, then the elements
        if c == 0xE0:
            count = b[i + 1]
            i += 2
        else:
            count = _I(b, i + 4)[0]
            i += 8
            if count > len(b) - i:  # garbage, or zero-width elements (nulls): pyamqp's case
                raise _Unhandled
        if not count:
            return [], i
        sub = b[i]
        i += 1
        items = [None] * count
        for n in range(count):
            items[n], i = _typed(sub, b, i)
        return items, i
    if c == 0x45:  # list0
        return [], i
    if c == 0x98:
        return _UUID(bytes=b[i : i + 16]), i + 16
    if c == 0x60:
        return _H(b, i)[0], i + 2
    if c == 0x61:
        return _h(b, i)[0], i + 2
    if c == 0x72:
        return _f(b, i)[0], i + 4
    if c == 0x82:
        return _d(b, i)[0], i + 8
    if c == 0x00:  # described: descriptor, then value
        descriptor, i = _typed(b[i], b, i + 1)
        value, i = _typed(b[i], b, i + 1)
        name = _COMPOSITES.get(descriptor)
        return (value if name is None else {name: value}), i
    raise _Unhandled  # decimal128 (pyamqp's own) and codes pyamqp rejects in its own way


def _decode(b: bytes) -> Any:
    n = len(b)
    i = 0
    header = delivery = annotations = properties = application = data = sequence = value = None
    footer = None
    while i < n:
        # Bytes i and i+1 are the section's described-type and ulong constructors, skipped as
        # pyamqp skips them; byte i+2 names the section.
        section = b[i + 2]
        c = b[i + 3]
        if c == 0xB0:  # a data section's vbin32, inline
            j = i + 8 + _I(b, i + 4)[0]
            v: Any = b[i + 8 : j]
            i = j
        else:
            v, i = _typed(c, b, i + 4)
        if section == 0x75:
            if data is None:
                data = [v]
            else:
                data.append(v)
        elif section == 0x72:
            annotations = v
        elif section == 0x74:
            application = v
        elif section == 0x73:
            properties = _Properties(*v)
        elif section == 0x70:
            header = _Header(*v)
        elif section == 0x71:
            delivery = v
        elif section == 0x76:
            if sequence is None:
                sequence = [v]
            else:
                sequence.append(v)
        elif section == 0x77:
            value = v
        elif section == 0x78:
            footer = v
    # tuple.__new__ is what Message(...) calls, without its Python frame.
    return _new(
        _Message,
        (header, delivery, annotations, properties, application, data, sequence, value, footer),
    )


def decode_payload(buffer: Any) -> Any:
    """pyamqp's ``decode_payload``, faster: the same ``Message`` for every input.

    Decodes by index over one ``bytes`` copy; on anything it does not handle (a decimal, an
    unknown constructor, truncated or malformed input) it returns, or raises, whatever pyamqp's
    own ``decode_payload`` does for that input.
    """
    if _sdk_decode_payload is None:
        _bind()
    try:
        return _decode(bytes(buffer))
    except Exception:
        return _sdk_decode_payload(buffer)


def _decode_frame(data: Any) -> tuple[int, list[Any]]:
    """pyamqp's ``decode_frame`` by index over one ``bytes`` copy; raises on what it leaves to
    pyamqp's (a list constructor other than list8/list32, a count past the input, anything
    :func:`_typed` does not decode, a value running past the frame's end)."""
    b = bytes(data)
    c = b[3]
    if c == 0xC0:
        count = b[5]
        i = 6
    elif c == 0xD0:
        count = _i(b, 8)[0]  # signed, as pyamqp reads it
        i = 12
        if not 0 <= count <= len(b) - i:
            raise _Unhandled
    else:  # pyamqp reads any other constructor as a list8: its own affair
        raise _Unhandled
    fields: list[Any] = [None] * count
    for n in range(count):
        # Inline: what a performative's fields are (null, booleans, small and 4-byte uints, the
        # delivery tag's vbin8); the rest as in a message.
        k = b[i]
        if k == 0x40:
            i += 1
        elif k == 0x70:
            fields[n] = _I(b, i + 1)[0]
            i += 5
        elif k == 0x52:
            fields[n] = b[i + 1]
            i += 2
        elif k == 0x41 or k == 0x42:
            fields[n] = k == 0x41
            i += 1
        elif k == 0x43:
            fields[n] = 0
            i += 1
        elif k == 0xA0:
            j = i + 2 + b[i + 1]
            fields[n] = b[i + 2 : j]
            i = j
        else:
            fields[n], i = _typed(k, b, i + 1)
    if i > len(b):  # a value ran past the end: pyamqp's to truncate
        raise _Unhandled
    if b[2] == 20:  # a transfer: the message follows, as a view into the frame (pyamqp's too)
        fields.append(data[i:])
    return b[2], fields


def decode_frame(data: Any) -> tuple[int, list[Any]]:
    """pyamqp's ``decode_frame`` (a frame's performative), faster: the same result for every
    input, falling back to pyamqp's on anything :func:`_decode_frame` does not handle."""
    if _sdk_decode_frame is None:
        _bind()
    try:
        return _decode_frame(data)
    except Exception:
        return _sdk_decode_frame(data)


# pyamqp's decoder, message tuples and transport, bound on first use (azure.eventhub is imported
# lazily: the driver imports this package without it).
_sdk_decode_payload: Any = None
_sdk_decode_frame: Any = None
_Message: Any = None
_Header: Any = None
_Properties: Any = None
_SSLTransport: Any = None


def _bind() -> None:
    global _sdk_decode_payload, _sdk_decode_frame, _Message, _Header, _Properties, _SSLTransport
    from azure.eventhub._pyamqp import _decode as sdk
    from azure.eventhub._pyamqp._transport import SSLTransport
    from azure.eventhub._pyamqp.message import Header, Message, Properties

    _Message, _Header, _Properties = Message, Header, Properties
    _SSLTransport = SSLTransport
    _sdk_decode_payload = sdk.decode_payload
    _sdk_decode_frame = sdk.decode_frame


def decoder_source_sha256() -> str | None:
    """sha256 of pyamqp's ``_decode`` module source (None when it cannot be read)."""
    import inspect

    from azure.eventhub._pyamqp import _decode as sdk

    try:
        source = inspect.getsource(sdk)
    except Exception:  # no source shipped (only .pyc): unknown, so never replaced
        return None
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


_decoder_installed: bool | None = None


def install_decoder() -> bool:
    """Make pyamqp decode with :func:`decode_payload` and :func:`decode_frame` (once per process).

    Module-global replacements: every sync receiver link in the process then decodes its
    messages with the first, and every sync transport its frames' performatives with the second,
    which is safe only because each returns what pyamqp's does for every input. Installed only
    over the ``_decode`` source they were proven against, each only if nothing else replaced the
    global. Returns whether both are ours.
    """
    global _decoder_installed
    if _decoder_installed is not None:
        return _decoder_installed
    digest = decoder_source_sha256() if sdk_supported() else None
    if digest != _DECODER_SOURCE_SHA256:
        logger.debug("pyamqp's decoder is not the one ours was proven against (%s)", digest)
        _decoder_installed = False
        return False
    from azure.eventhub._pyamqp import _decode as sdk
    from azure.eventhub._pyamqp import _transport, receiver

    if receiver.decode_payload is sdk.decode_payload:
        receiver.decode_payload = decode_payload
    if _transport.decode_frame is sdk.decode_frame:
        _transport.decode_frame = decode_frame
    _decoder_installed = (
        receiver.decode_payload is decode_payload and _transport.decode_frame is decode_frame
    )
    return _decoder_installed


_supported: bool | None = None


def sdk_supported() -> bool:
    """Whether this azure-eventhub has the pyamqp internals the cuts stand on (checked once)."""
    global _supported
    if _supported is None:
        _supported = _check_sdk()
    return _supported


def _check_sdk() -> bool:
    try:
        from azure.eventhub._pyamqp import _decode, _transport, receiver
        from azure.eventhub._pyamqp._transport import SSLTransport, WebSocketTransport
        from azure.eventhub._pyamqp.message import Header, Message, Properties
    except ImportError:
        return False
    return (
        callable(getattr(receiver, "decode_payload", None))
        and callable(getattr(_decode, "decode_payload", None))
        and callable(getattr(_transport, "decode_frame", None))
        and callable(getattr(_decode, "decode_frame", None))
        and callable(getattr(SSLTransport, "_read", None))
        and not issubclass(WebSocketTransport, SSLTransport)
        and Message._fields == _MESSAGE_FIELDS
        and Header._fields == _HEADER_FIELDS
        and Properties._fields == _MESSAGE_PROPERTIES
    )


_MESSAGE_FIELDS = (
    "header",
    "delivery_annotations",
    "message_annotations",
    "properties",
    "application_properties",
    "data",
    "sequence",
    "value",
    "footer",
)
_HEADER_FIELDS = ("durable", "priority", "ttl", "first_acquirer", "delivery_count")


# -- transfers ------------------------------------------------------------------------------------

#: sha256 of the sources of the pyamqp and SDK functions a transfer passes through
#: (:func:`_transfer_functions`, azure-eventhub 5.15.1), which :class:`_TransferListen` does the
#: work of. Another source keeps pyamqp's own path: read its diff, run
#: tests/test_spark_source_amqp.py against it, then update this.
_TRANSFER_SOURCE_SHA256 = "35872727a6ec1e19c590bcd20f235de991a61ad5fec758843776eac96832c5dc"


#: What pyamqp and the SDK run for one received transfer (the listen loop, the read, the
#: connection's, session's and link's dispatch, the client's and consumer's callbacks): its
#: name, and the role of the object whose class resolves it (:func:`fast_transfers`).
_TRANSFER_PATH = (
    ("Connection.listen", "connection"),
    ("Connection._read_frame", "connection"),
    ("Connection._process_incoming_frame", "connection"),
    ("_AbstractTransport.receive_frame", "transport"),
    ("Session._incoming_transfer", "session"),
    ("ReceiverLink._incoming_transfer", "link"),
    ("ReceiverLink._process_incoming_message", "link"),
    ("ReceiveClient._message_received", "client"),
    ("EventHubConsumer._message_received", "consumer"),
)


def _transfer_functions() -> dict[str, Any]:
    """The functions of :data:`_TRANSFER_PATH` in pyamqp's and the SDK's own classes, by name."""
    from azure.eventhub._consumer import EventHubConsumer
    from azure.eventhub._pyamqp._connection import Connection
    from azure.eventhub._pyamqp._transport import _AbstractTransport
    from azure.eventhub._pyamqp.client import ReceiveClient
    from azure.eventhub._pyamqp.receiver import ReceiverLink
    from azure.eventhub._pyamqp.session import Session

    classes: dict[str, type] = {
        cls.__name__: cls
        for cls in (
            Connection,
            _AbstractTransport,
            Session,
            ReceiverLink,
            ReceiveClient,
            EventHubConsumer,
        )
    }
    return {
        name: getattr(classes[name.split(".")[0]], name.split(".")[1])
        for name, _role in _TRANSFER_PATH
    }


def transfer_source_sha256() -> str | None:
    """sha256 of the sources of :func:`_transfer_functions` (None when one cannot be read)."""
    import inspect

    digest = hashlib.sha256()
    try:
        for name, fn in _transfer_functions().items():
            digest.update(name.encode() + b"\0" + inspect.getsource(fn).encode("utf-8") + b"\0")
    except Exception:  # no source shipped, or a name gone: unknown, so never replaced
        return None
    return digest.hexdigest()


#: The functions proven (their source hashed to _TRANSFER_SOURCE_SHA256), once per process;
#: None until checked, {} when they are not the ones proven.
_proven_transfer: dict[str, Any] | None = None


def transfer_path_proven() -> dict[str, Any]:
    """The functions of :data:`_TRANSFER_PATH` when their source is the one proven (checked
    once per process: ~6 ms of reading sources), else ``{}``."""
    global _proven_transfer
    if _proven_transfer is None:
        ok = sdk_supported() and transfer_source_sha256() == _TRANSFER_SOURCE_SHA256
        if not ok:
            logger.debug("pyamqp's transfer path is not the one ours was proven against")
        _proven_transfer = _transfer_functions() if ok else {}
    return _proven_transfer


def fast_transfers(handler: Any, consumer: Any, *, columns: bool = False) -> bool:
    """Install :class:`_TransferListen` on ``handler``'s connection (once per connection).

    Only where every function a transfer passes through is the one proven (a subclass or a
    patched method keeps pyamqp's path), the reads are buffered (:func:`buffer_reads`), the
    decoders are ours (:func:`install_decoder`), and the client hands each message to
    ``consumer``'s buffer and nothing else. Returns whether the connection's listen is ours.

    With ``columns`` and the native step loaded (:mod:`._native`), runs of plain transfers go to
    the buffer as :class:`~dagster_eventhub_ingest.resources.spark_source._events.ColumnRows`
    instead of one message each (the caller must take both, in the buffer's order).
    """
    conn: Any = getattr(handler, "_connection", None)
    link: Any = getattr(handler, "_link", None)
    session: Any = getattr(link, "_session", None)
    if conn is None or session is None or not hasattr(conn, "__dict__"):
        return False
    listen = vars(conn).get("listen")
    if type(listen) is _TransferListen:
        return listen._handler is handler
    proven = transfer_path_proven()
    if not proven or not install_decoder():
        return False
    transport: Any = getattr(conn, "_transport", None)
    callback = getattr(handler, "_message_received_callback", None)
    roles = {
        "connection": conn,
        "transport": transport,
        "session": session,
        "link": link,
        "client": handler,
        "consumer": consumer,
    }
    resolved = [
        (getattr(type(roles[role]), name.split(".")[1], None), name)
        for name, role in _TRANSFER_PATH
    ]
    if (
        listen is not None  # something else replaced this connection's listen
        or type(getattr(transport, "sock", None)) is not BufferedSocket
        or any(fn is not proven[name] for fn, name in resolved)
        or getattr(handler, "_streaming_receive", False) is not True
        or callback != consumer._message_received
        or link._on_transfer != handler._message_received
    ):
        return False
    native = None
    if columns:
        from dagster_eventhub_ingest.resources.spark_source._native import amqp_columns

        native = amqp_columns()
    conn.listen = _TransferListen(conn, handler, consumer._message_buffer.append, native)
    return True


def raw_transfers(handler: Any, consumer: Any) -> bool:
    """Hand the pull's messages over as their bytes decoded by the reader (once per link).

    pyamqp decodes strings, symbols and binaries alike to ``bytes`` (the connector tells them
    apart) and raises on an AMQP char or decimal32/64, which would stop the partition at that
    event, link after link. So the pull's own link gets :class:`_RawTransfer` as its
    ``_incoming_transfer``: pyamqp's counting, then
    :func:`~dagster_eventhub_ingest.resources.spark_source._message.decode_event` instead of
    pyamqp's decoder. Only where the functions a transfer passes through are the proven ones
    (:data:`_TRANSFER_SOURCE_SHA256`), the link is not traced and its client hands each
    message to ``consumer``'s buffer and nothing else. Returns whether the link's transfers
    are ours.
    """
    link: Any = getattr(handler, "_link", None)
    if link is None or not hasattr(link, "__dict__"):
        return False
    current = vars(link).get("_incoming_transfer")
    if type(current) is _RawTransfer:
        return True
    proven = transfer_path_proven()
    cls = type(link)
    if (
        current is not None  # something else replaced it
        or not proven
        or link.network_trace
        or cls._incoming_transfer is not proven["ReceiverLink._incoming_transfer"]
        or cls._process_incoming_message is not proven["ReceiverLink._process_incoming_message"]
        or getattr(type(handler), "_message_received", None)
        is not proven["ReceiveClient._message_received"]
        or getattr(type(consumer), "_message_received", None)
        is not proven["EventHubConsumer._message_received"]
        or getattr(handler, "_streaming_receive", False) is not True
        or getattr(handler, "_message_received_callback", None) != consumer._message_received
        or link._on_transfer != handler._message_received
    ):
        return False
    link._incoming_transfer = _RawTransfer(link)
    return True


class _RawTransfer:
    """pyamqp's ``ReceiverLink._incoming_transfer`` for one link, the message decoded by the
    reader (:func:`raw_transfers`): the same credit, delivery count, tags and assembly of a
    message in several frames, the same disposition when one is due."""

    __slots__ = ("_link",)

    def __init__(self, link: Any) -> None:
        self._link = link

    def __call__(self, frame: Any) -> None:
        link = self._link
        more = frame[5]
        if not more:
            link.current_link_credit -= 1
            link.delivery_count += 1
        link.received_delivery_id = frame[1]
        if link.received_delivery_id is not None:
            link._first_frame = frame
        if link._received_payload or more:
            link._received_payload.extend(frame[11])
        if more:
            return
        first = link._first_frame
        link._received_delivery_tags.add(first[2])
        if link._received_payload:
            payload = bytes(link._received_payload)
            link._received_payload = bytearray()
        else:
            payload = bytes(frame[11])
        state = link._process_incoming_message(first, decode_event(payload))
        if not frame[4] and state:  # not settled, and the callback gave a state
            link._outgoing_disposition(
                first=first[1],
                last=first[1],
                delivery_tag=first[2],
                settled=True,
                state=state,
                batchable=None,
            )


class _TransferListen:
    """pyamqp's ``Connection.listen`` for the pull's connection, with plain transfers inline.

    pyamqp takes each received frame through ~15 Python calls: the listen loop, the read, the
    performative decode, the connection's, the session's and the link's dispatch, the message
    decode, the client's and the consumer's callbacks (a quarter of the reader's CPU). This does
    what they do for a transfer frame already whole in the buffer, in one loop: the session's
    and the link's counters, the delivery tag, the decoded message appended to the consumer's
    buffer, the session's flow when its window is spent, the connection's and the client's
    last-activity times. The performative is decoded by :func:`_decode_frame` (pyamqp's own on
    what it leaves to it, as :func:`decode_frame` does), the message by
    :func:`~dagster_eventhub_ingest.resources.spark_source._message.decode_event`.

    Everything else is pyamqp's own listen, one frame at a time: the connection's error and
    idle-timeout checks, a frame not wholly buffered (its read refills the buffer; a timeout
    ends the listen), any performative but a transfer, a transfer on another channel, network
    tracing, a listen with other arguments. A transfer it took that is not plain (another link,
    a message in several frames, fields it does not decode) goes to pyamqp's
    ``_process_incoming_frame`` exactly as pyamqp's read would have handed it, and ends the loop.
    A listen returns after ``batch`` frames, as pyamqp's does, or sooner (a frame that was not a
    transfer): the pull just listens again.
    """

    __slots__ = ("_append", "_conn", "_handler", "_listen", "_native")

    def __init__(self, conn: Any, handler: Any, append: Any, native: Any = None) -> None:
        self._conn = conn
        self._handler = handler
        self._append = append  # the consumer's buffer's append
        self._listen = conn.listen  # pyamqp's own, bound to the connection
        self._native = native  # _native.amqp_columns(): runs of plain transfers as columns

    def __call__(self, wait: Any = False, batch: int = 1, **kwargs: Any) -> None:
        listen = self._listen
        if kwargs or batch < 2:
            return listen(wait=wait, batch=batch, **kwargs)
        link = self._handler._link
        taken = 0
        while True:
            before = link.delivery_count, len(link._received_payload)
            listen(wait=wait, batch=1)  # checks, and a read that refills the buffer
            if (link.delivery_count, len(link._received_payload)) == before:
                return None  # a timeout, or a frame that was not a transfer
            taken += 1
            if taken < batch:
                taken += self._drain(batch - taken)
            if taken >= batch:
                return None

    def _drain(self, limit: int) -> int:
        """Process up to ``limit`` transfer frames whole in the buffer; how many it took."""
        conn = self._conn
        try:
            return self._transfers(conn, limit)
        except OSError as exc:  # a flow's write (socket, SSL): recorded as pyamqp's listen does
            from azure.eventhub._pyamqp.error import AMQPConnectionError, ErrorCondition

            conn._error = AMQPConnectionError(
                ErrorCondition.SocketError,
                description="Can not read frame due to exception: " + str(exc),
                error=exc,
            )
            return limit

    def _transfers(self, conn: Any, limit: int) -> int:
        transport = conn._transport
        sock = transport.sock
        handler = self._handler
        link = handler._link
        session = link._session
        if (
            type(sock) is not BufferedSocket
            or not conn._can_read()
            or conn._network_trace
            or session.network_trace
            or link.network_trace
            or link._received_payload
        ):
            return 0
        if not _read_to_end(transport._read_buffer):  # what pyamqp put back comes first
            return 0
        channel = next((c for c, s in conn._incoming_endpoints.items() if s is session), None)
        if channel is None:
            return 0
        high, low = channel >> 8, channel & 0xFF
        buf = sock._buf
        view = sock._view
        lock = transport.socket_lock
        inputs = session._input_handles
        tags = link._received_delivery_tags
        append = self._append
        native = self._native
        handle = None
        if native is not None:
            handle = next((h for h, end in inputs.items() if end is link), None)
        taken = 0
        while taken < limit:
            if handle is not None and session.incoming_window > 0:
                got = self._native_run(native, sock, lock, channel, handle, limit - taken)
                if got:
                    taken += got
                    continue
            with lock:
                start = sock._start
                avail = sock._end - start
                if avail < 8:
                    break
                size = _I(buf, start)[0]
                end = start + size
                p = start + 4 * buf[start + 4]  # the data offset, in 4-byte words
                if (
                    size > avail
                    or p + 3 > end
                    or buf[start + 5] != 0  # an AMQP frame
                    or buf[start + 6] != high
                    or buf[start + 7] != low
                    or buf[p] != 0  # described, smallulong 0x14: a transfer
                    or buf[p + 1] != 0x53
                    or buf[p + 2] != 0x14
                ):
                    break
                frame = view[p:end].tobytes()
                sock._start = end
            taken += 1
            try:
                fields: Any = _decode_frame(frame)[1]
            except Exception:
                fields = None
            if (
                fields is None
                or len(fields) != 12
                or fields[5]  # more: pyamqp assembles the message
                or inputs.get(fields[0]) is not link
                or link._received_payload
            ):
                conn._process_incoming_frame(channel, decode_frame(memoryview(frame)))
                break
            # Session._incoming_transfer, then ReceiverLink._incoming_transfer.
            _count_transfers(session, link, 1)
            delivery_id = fields[1]
            link.received_delivery_id = delivery_id
            if delivery_id is not None:
                link._first_frame = fields
            tags.add(link._first_frame[2])
            # The message from its bytes (never raises); ReceiveClient._message_received ->
            # EventHubConsumer._message_received; it returns no delivery state, so no
            # disposition follows.
            append(decode_event(bytes(fields[11])))
            _renew_window(session)
        if taken:
            now = time.time()
            conn._last_frame_received_time = now
            handler._last_activity_timestamp = now
        return taken

    def _native_run(
        self, native: Any, sock: BufferedSocket, lock: Any, channel: int, handle: int, most: int
    ) -> int:
        """Plain transfers from the buffer through the native step, as pyamqp would count them.

        At most ``most`` frames and no more than the session's incoming window, so that a spent
        window is renewed at the frame where pyamqp renews it. The run goes to the consumer's
        buffer as one :class:`~dagster_eventhub_ingest.resources.spark_source._events.ColumnRows`; 0
        when the next frame is not a plain transfer (the caller's loop takes it one by one).
        """
        link = self._handler._link
        session = link._session
        with lock:
            got = native.scan(
                sock._buf,
                sock._start,
                sock._end,
                channel,
                handle,
                min(most, session.incoming_window),
                link._received_delivery_tags,
            )
            if got is None:
                return 0
            n, sock._start, last_p, last_end, last_id, columns = got
            last = sock._view[last_p:last_end].tobytes()
        # Session._incoming_transfer, then ReceiverLink._incoming_transfer, n times (each tag was
        # added to the link's set by the scan).
        _count_transfers(session, link, n)
        link.received_delivery_id = last_id
        link._first_frame = _decode_frame(last)[1]
        self._append(ColumnRows(columns))
        _renew_window(session)
        return int(n)


def _count_transfers(session: Any, link: Any, n: int) -> None:
    """What pyamqp's session and receiver link count for ``n`` whole transfers (not ``more``)."""
    session.next_incoming_id += n
    session.remote_outgoing_window -= n
    session.incoming_window -= n
    link.current_link_credit -= n
    link.delivery_count += n


def _renew_window(session: Any) -> None:
    """pyamqp's session renews a spent incoming window with a flow (after the transfer)."""
    if session.incoming_window == 0:
        session.incoming_window = session.target_incoming_window
        session._outgoing_flow()
