"""AMQP over WebSockets for the emulator (the SDK's ``TransportType.AmqpOverWebsocket``).

The SDK (websocket-client for sync, aiohttp for aio) sends an HTTP/1.1 upgrade to
``/$servicebus/websocket`` with subprotocol ``AMQPWSB10``, then carries the AMQP byte stream in
masked binary frames; the service answers in unmasked binary frames. :class:`WebSocketProtocol`
does the upgrade and the framing (RFC 6455) and hands the bytes to the ordinary AMQP connection
through :class:`_FramedTransport`, so everything above the transport is shared with plain AMQP.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import struct
from collections.abc import Callable
from typing import Any

__all__ = ["SUBPROTOCOL", "WEBSOCKET_PATH", "WebSocketProtocol"]

logger = logging.getLogger(__name__)

SUBPROTOCOL = "AMQPWSB10"
WEBSOCKET_PATH = "/$servicebus/websocket"
_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_MAX_HEADER = 16 * 1024
_OP_CONT, _OP_TEXT, _OP_BINARY, _OP_CLOSE, _OP_PING, _OP_PONG = 0, 1, 2, 8, 9, 10


def _frame(opcode: int, payload: bytes) -> bytes:
    n = len(payload)
    if n < 126:
        head = struct.pack(">BB", 0x80 | opcode, n)
    elif n < 65536:
        head = struct.pack(">BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack(">BBQ", 0x80 | opcode, 127, n)
    return head + payload


def _unmask(payload: bytes, mask: bytes) -> bytes:
    n = len(payload)
    if not n:
        return payload
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")


class _FramedTransport(asyncio.Transport):
    """What the AMQP connection writes to: each write becomes one binary WebSocket frame."""

    def __init__(self, outer: WebSocketProtocol, transport: asyncio.Transport) -> None:
        super().__init__()
        self._outer = outer
        self._transport = transport

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if data:
            self._transport.write(_frame(_OP_BINARY, bytes(data)))

    def close(self) -> None:
        if not self._transport.is_closing():
            self._transport.write(_frame(_OP_CLOSE, struct.pack(">H", 1000)))
            self._transport.close()

    def abort(self) -> None:
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high=high, low=low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()


class WebSocketProtocol(asyncio.Protocol):
    """Server side of one WebSocket connection wrapping an AMQP connection protocol."""

    def __init__(self, make_inner: Callable[[], asyncio.Protocol]) -> None:
        self._make_inner = make_inner
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._upgraded = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if not self._upgraded:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > _MAX_HEADER:
                    self._refuse(431, "Request Header Fields Too Large", "headers too long")
                return
            request = bytes(self._buffer[:end]).decode("latin-1")
            del self._buffer[: end + 4]
            if not self._upgrade(request):
                return
        self._read_frames()

    def _refuse(self, status: int, reason: str, why: str) -> None:
        assert self._transport is not None
        logger.info("websocket upgrade refused: %d %s (%s)", status, reason, why)
        body = f"{why}\n".encode()
        self._transport.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        self._transport.close()

    def _upgrade(self, request: str) -> bool:
        assert self._transport is not None
        lines = request.split("\r\n")
        parts = lines[0].split(" ")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if len(parts) != 3 or parts[0] != "GET":
            self._refuse(400, "Bad Request", f"expected 'GET {WEBSOCKET_PATH} HTTP/1.1'")
            return False
        path = parts[1].split("?", 1)[0]
        if path.rstrip("/") != WEBSOCKET_PATH:
            self._refuse(404, "Not Found", f"{path!r}: AMQP over WebSockets is at {WEBSOCKET_PATH}")
            return False
        key = headers.get("sec-websocket-key")
        if headers.get("upgrade", "").lower() != "websocket" or not key:
            self._refuse(400, "Bad Request", "not a WebSocket upgrade (Upgrade/Sec-WebSocket-Key)")
            return False
        offered = [p.strip() for p in headers.get("sec-websocket-protocol", "").split(",")]
        if SUBPROTOCOL not in offered:
            self._refuse(400, "Bad Request", f"subprotocol {SUBPROTOCOL} is required")
            return False
        accept = base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()
        self._transport.write(
            (
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: {SUBPROTOCOL}\r\n\r\n"
            ).encode()
        )
        self._upgraded = True
        self._inner = self._make_inner()
        self._inner.connection_made(_FramedTransport(self, self._transport))
        return True

    def _read_frames(self) -> None:
        buf = self._buffer
        pos = 0
        while len(buf) - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            opcode, masked, n = b0 & 0x0F, b1 & 0x80, b1 & 0x7F
            head = 2
            if n == 126:
                if len(buf) - pos < 4:
                    break
                n = struct.unpack_from(">H", buf, pos + 2)[0]
                head = 4
            elif n == 127:
                if len(buf) - pos < 10:
                    break
                n = struct.unpack_from(">Q", buf, pos + 2)[0]
                head = 10
            mask = b""
            if masked:
                if len(buf) - pos < head + 4:
                    break
                mask = bytes(buf[pos + head : pos + head + 4])
                head += 4
            if len(buf) - pos < head + n:
                break
            payload = bytes(buf[pos + head : pos + head + n])
            pos += head + n
            if mask:
                payload = _unmask(payload, mask)
            if not self._on_frame(opcode, payload):
                break
        del buf[:pos]

    def _on_frame(self, opcode: int, payload: bytes) -> bool:
        assert self._transport is not None
        if opcode in (_OP_BINARY, _OP_CONT):
            if self._inner is not None and payload:
                self._inner.data_received(payload)
            return not self._transport.is_closing()
        if opcode == _OP_PING:
            self._transport.write(_frame(_OP_PONG, payload))
            return True
        if opcode == _OP_PONG:
            return True
        if opcode == _OP_CLOSE:
            if not self._transport.is_closing():
                self._transport.write(_frame(_OP_CLOSE, payload[:2]))
                self._transport.close()
            return False
        # text frames cannot carry AMQP bytes
        self._transport.write(_frame(_OP_CLOSE, struct.pack(">H", 1003)))
        self._transport.close()
        return False
