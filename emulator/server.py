"""The emulator's AMQP 1.0 peer on asyncio: connections, sessions, links, CBS and management.

One :class:`EmulatorServer` serves a :class:`~dagster_eventhub_ingest.emulator.hub.Namespace` on
127.0.0.1. Everything runs on one event loop thread, so hub state needs no locks
(``Namespace.create_hub`` has its own for callers on other threads). Outgoing frames are collected
per connection and written once per loop iteration; stored events are already encoded, so delivering
one is a header pack and a slice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import ssl
import struct
import time
import uuid
from typing import Any

from dagster_eventhub_ingest.emulator.auth import Authenticator
from dagster_eventhub_ingest.emulator.hub import Hub, Namespace, Partition, StoredEvent
from dagster_eventhub_ingest.emulator.ws import WEBSOCKET_PATH, WebSocketProtocol
from dagster_eventhub_ingest.resources.amqp import framing
from dagster_eventhub_ingest.resources.amqp.codec import (
    AMQPDecodeError,
    Described,
    Int,
    Symbol,
    Timestamp,
    decode,
    encode,
    split_list,
)
from dagster_eventhub_ingest.resources.amqp.framing import Performative, section_spans

__all__ = [
    "BATCH_MESSAGE_FORMAT",
    "DEFAULT_IDLE_TIMEOUT",
    "MAX_CONCURRENT_READERS",
    "EmulatorServer",
    "server_ssl_context",
]

logger = logging.getLogger(__name__)

BATCH_MESSAGE_FORMAT = 0x80013700
MAX_CONCURRENT_READERS = 5  # non-epoch readers per partition and consumer group (the service's)
DEFAULT_MAX_MESSAGE_SIZE = 1024 * 1024
DEFAULT_MAX_FRAME_SIZE = 1024 * 1024
# Advertised in our open and enforced: a connection silent for longer is closed (the service
# closes idle connections too; the SDK reconnects on its next call).
DEFAULT_IDLE_TIMEOUT = 240.0
SESSION_WINDOW = 0x7FFFFFFF
PRODUCER_CREDIT = 1000

EPOCH = b"com.microsoft:epoch"
RUNTIME_METRIC = "com.microsoft:enable-receiver-runtime-metric"
SELECTOR_FILTER = b"apache.org:selector-filter:string"
SELECTOR_FILTER_CODE = 0x0000468C00000004
_SELECTOR = re.compile(
    r"^\s*amqp\.annotation\.x-opt-(offset|sequence-number|enqueued-time)\s*(>=|>)\s*'([^']*)'\s*$",
    re.IGNORECASE,
)
_PROPERTIES_FIELDS = 13
_LAST_SEQ = Symbol("last_enqueued_sequence_number")
_LAST_OFFSET = Symbol("last_enqueued_offset")
_LAST_TIME = Symbol("last_enqueued_time_utc")
_RETRIEVAL_TIME = Symbol("runtime_info_retrieval_time_utc")
_FRAME_SIZE = struct.Struct(">I")


class LinkRefused(Exception):
    """An attach the service would refuse: carries the AMQP error condition and description."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _path_of(address: str) -> list[str]:
    """Path segments of a link address: ``amqps://host:port/hub/...`` or ``hub/...``."""
    if "://" in address:
        rest = address.split("://", 1)[1]
        path = rest.split("/", 1)[1] if "/" in rest else ""
    else:
        path = address
    return [p for p in path.split("/") if p]


class _Link:
    """State shared by every link: names, handles, the session it lives in."""

    def __init__(self, session: _Session, name: str, handle: int) -> None:
        self.session = session
        self.name = name
        self.handle = handle  # we use the peer's handle number as ours (one-to-one, unique)
        self.closed = False

    def on_flow(self, fields: list[Any]) -> None:
        """A flow naming this link arrived."""

    def on_transfer(
        self, delivery_id: int, message_format: int, payload: bytes, settled: bool
    ) -> None:
        """A complete delivery arrived on this link (we are the receiver)."""
        raise AMQPDecodeError("transfer on a link where the emulator is the sender")

    def on_detached(self) -> None:
        """The link is gone (peer detach, session end or connection loss): release resources."""
        self.closed = True


class _ReplyLink(_Link):
    """Our sender on ``$cbs`` / ``$management``: carries responses, pre-settled."""

    def __init__(self, session: _Session, name: str, handle: int, node: str) -> None:
        super().__init__(session, name, handle)
        self.node = node
        self.credit = 0
        self.delivery_count = 0
        self.pending: list[bytes] = []

    def on_flow(self, fields: list[Any]) -> None:
        if fields[6] is not None and fields[5] is not None:
            self.credit = fields[5] + fields[6] - self.delivery_count
        self._pump()

    def send(self, payload: bytes) -> None:
        self.pending.append(payload)
        self._pump()

    def _pump(self) -> None:
        while self.pending and self.credit > 0 and not self.closed:
            self.session.send_delivery(self.handle, self.pending.pop(0))
            self.credit -= 1
            self.delivery_count += 1


class _ReceiverBase(_Link):
    """A link where the client sends to us: grant credit, reassemble, settle Accepted."""

    def __init__(self, session: _Session, name: str, handle: int, delivery_count: int) -> None:
        super().__init__(session, name, handle)
        self.delivery_count = delivery_count
        self.credit = 0

    def grant(self) -> None:
        self.credit = PRODUCER_CREDIT
        self.session.send_link_flow(self.handle, self.delivery_count, self.credit)

    def received(self) -> None:
        self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
        self.credit -= 1
        if self.credit <= PRODUCER_CREDIT // 2:
            self.grant()

    def on_flow(self, fields: list[Any]) -> None:
        if fields[9]:  # echo requested
            self.session.send_link_flow(self.handle, self.delivery_count, self.credit)


class _RequestLink(_ReceiverBase):
    """Client's sender on ``$cbs`` / ``$management``: requests answered on the reply link."""

    def __init__(
        self, session: _Session, name: str, handle: int, delivery_count: int, node: str
    ) -> None:
        super().__init__(session, name, handle, delivery_count)
        self.node = node

    def on_transfer(
        self, delivery_id: int, message_format: int, payload: bytes, settled: bool
    ) -> None:
        self.received()
        request = _decode_request(payload)
        if self.node == "$cbs":
            response = self.session.connection.server.handle_cbs(self.session.connection, request)
        else:
            response = self.session.connection.server.handle_management(
                self.session.connection, request
            )
        if not settled:
            self.session.settle(delivery_id, framing.accepted())
        reply = self.session.reply_link(self.node)
        if reply is None:
            logger.warning("%s request without a reply link; response dropped", self.node)
            return
        reply.send(response)


class _ProducerLink(_ReceiverBase):
    """Client's sender to a hub or a partition: every delivery is enqueued then accepted."""

    def __init__(
        self,
        session: _Session,
        name: str,
        handle: int,
        delivery_count: int,
        hub: Hub,
        partition: Partition | None,
        max_message_size: int,
    ) -> None:
        super().__init__(session, name, handle, delivery_count)
        self.hub = hub
        self.partition = partition
        self.max_message_size = max_message_size

    def on_transfer(
        self, delivery_id: int, message_format: int, payload: bytes, settled: bool
    ) -> None:
        self.received()
        if len(payload) > self.max_message_size:
            state = framing.rejected(
                "amqp:link:message-size-exceeded",
                f"The received message (delivery-id:{delivery_id}, size:{len(payload)} bytes) "
                f"exceeds the limit ({self.max_message_size} bytes) currently allowed on the link.",
            )
            if not settled:
                self.session.settle(delivery_id, state)
            return
        try:
            messages, partition_key = _split_batch(payload, message_format)
        except (AMQPDecodeError, ValueError) as exc:
            if not settled:
                self.session.settle(
                    delivery_id, framing.rejected("amqp:decode-error", f"malformed message: {exc}")
                )
            return
        target = self.partition or self.hub.route(partition_key)
        target.append(messages, partition_key)
        if not settled:
            self.session.settle(delivery_id, framing.accepted())


class _ConsumerLink(_Link):
    """Our sender for a partition reader: streams stored events within the client's credit."""

    def __init__(
        self,
        session: _Session,
        name: str,
        handle: int,
        hub: Hub,
        consumer_group: str,
        partition: Partition,
        start_seq: int,
        epoch: int | None,
        runtime_metric: bool,
    ) -> None:
        super().__init__(session, name, handle)
        self.hub = hub
        self.consumer_group = consumer_group
        self.partition = partition
        self.cursor = start_seq
        self.epoch = epoch
        self.runtime_metric = runtime_metric
        self.credit = 0
        self.delivery_count = 0
        self.pump = self._pump  # bound once: used as the partition's listener

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.hub.name, self.consumer_group.lower(), self.partition.id)

    def on_flow(self, fields: list[Any]) -> None:
        if fields[6] is not None:
            count = fields[5] if fields[5] is not None else self.delivery_count
            self.credit = (count + fields[6] - self.delivery_count) & 0xFFFFFFFF
            if self.credit > 0x7FFFFFFF:
                self.credit = 0
        if fields[9]:
            self.session.send_link_flow(self.handle, self.delivery_count, self.credit)
        self._pump()
        if fields[8] and self.credit > 0 and self.partition.event_at(self.cursor) is None:
            # drain: nothing more to send now, so use up the credit and say so (AMQP 2.6.7)
            self.delivery_count = (self.delivery_count + self.credit) & 0xFFFFFFFF
            self.credit = 0
            self.session.send_link_flow(self.handle, self.delivery_count, 0)

    def _pump(self) -> None:
        if self.closed or self.credit <= 0:
            return
        session = self.session
        conn = session.connection
        if conn.paused:
            return
        partition = self.partition
        partition.prune()
        out = conn.out
        max_chunk = conn.remote_max_frame_size - framing.TRANSFER_OVERHEAD
        channel, handle = session.channel, self.handle
        transfer_header = framing.transfer_header
        sent = 0
        while self.credit > 0 and session.remote_incoming_window > 0:
            event = partition.event_at(self.cursor)
            if event is None:
                begin = partition.begin_sequence_number
                if self.cursor < begin:  # past retention: continue from what is left
                    self.cursor = begin
                    continue
                break
            payload = event.payload
            if self.runtime_metric:
                payload = self._with_runtime_metric(event)
            delivery_id = session.next_delivery_id
            session.next_delivery_id = (delivery_id + 1) & 0xFFFFFFFF
            if len(payload) <= max_chunk:
                out.append(transfer_header(channel, handle, delivery_id, len(payload), False))
                out.append(payload)
                session.next_outgoing_id += 1
                session.remote_incoming_window -= 1
            else:
                for start in range(0, len(payload), max_chunk):
                    chunk = payload[start : start + max_chunk]
                    more = start + max_chunk < len(payload)
                    out.append(transfer_header(channel, handle, delivery_id, len(chunk), more))
                    out.append(chunk)
                    session.next_outgoing_id += 1
                    session.remote_incoming_window -= 1
            self.cursor += 1
            self.credit -= 1
            self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
            sent += 1
            if conn.out_bytes_hint(len(payload)):
                break  # let the transport drain; resume_writing pumps again
        if sent:
            conn.schedule_flush()

    def _with_runtime_metric(self, event: StoredEvent) -> bytes:
        p = self.partition
        payload = event.payload
        split = end = event.split
        ours = encode(
            {
                _LAST_SEQ: p.next_seq - 1,
                _LAST_OFFSET: str(p.last_offset),
                _LAST_TIME: Timestamp(p.last_enqueued_ms),
                _RETRIEVAL_TIME: Timestamp(_now_ms()),
            }
        )
        if payload[split : split + 3] != b"\x00\x53\x71":
            return payload[:split] + b"\x00\x53\x71" + ours + payload[split:]
        # The producer's own delivery annotations: one map with theirs (byte for byte) and ours.
        theirs, end = split_list(payload, split + 3)
        our_spans, _ = split_list(ours, 0)
        our_keys = {ours[a:b] for a, b in our_spans[0::2]}
        pairs = []
        for i in range(0, len(theirs) - 1, 2):
            if payload[theirs[i][0] : theirs[i][1]] not in our_keys:
                pairs += [payload[a:b] for a, b in theirs[i : i + 2]]
        pairs += [ours[a:b] for a, b in our_spans]
        body = b"".join(pairs)
        head = struct.pack(">BII", 0xD1, len(body) + 4, len(pairs))
        return payload[:split] + b"\x00\x53\x71" + head + body + payload[end:]

    def stolen(self, description: str) -> None:
        """Detach this reader because a reader with a higher (or equal) owner level arrived."""
        if self.closed:
            return
        logger.info(
            "reader %s stolen: hub %s, consumer group %s, partition %s, owner level %s",
            self.name,
            self.hub.name,
            self.consumer_group,
            self.partition.id,
            self.epoch,
        )
        self.session.detach_link(self, framing.amqp_error("amqp:link:stolen", description))

    def on_detached(self) -> None:
        if not self.closed:
            self.closed = True
            self.partition.listeners.discard(self.pump)
            self.session.connection.server.unregister_reader(self)


def _decode_request(payload: bytes) -> dict[str, Any]:
    """The parts of a CBS or management request the emulator needs."""
    request: dict[str, Any] = {"app": {}, "body": None, "message_id": None, "reply_to": None}
    for code, start, _end in section_spans(payload):
        value, _ = decode(payload, start + 3) if payload[start + 1] == 0x53 else (None, 0)
        if code == 0x73 and isinstance(value, list):
            request["message_id"] = value[0] if value else None
            request["reply_to"] = _text(value[4]) if len(value) > 4 else None
        elif code == 0x74 and isinstance(value, dict):
            request["app"] = {_text(k): v for k, v in value.items()}
        elif code in (0x75, 0x77):
            request["body"] = value
    return request


def _response(correlation_id: Any, status: int, description: str, body: Any = None) -> bytes:
    props: list[Any] = [None] * _PROPERTIES_FIELDS
    props[5] = correlation_id
    out = bytearray()
    out += framing.encode_section(0x73, props)
    out += framing.encode_section(
        0x74,
        {
            "status-code": Int(status),
            "status-description": description,
            "statusDescription": description,
        },
    )
    if body is not None:
        out += framing.encode_section(0x77, body)
    return bytes(out)


_PKEY = b"x-opt-partition-key"


def _split_batch(payload: bytes, message_format: int) -> tuple[list[bytes], str | None]:
    """The inner messages of a send (one, or N for a batch) and its partition key, if any.

    The key is the ``x-opt-partition-key`` message annotation of the message sent (the outer
    one of a batch), so a single keyed event is routed exactly like a keyed batch.
    """
    batch = message_format == BATCH_MESSAGE_FORMAT
    messages: list[bytes] = [] if batch else [payload]
    partition_key: str | None = None
    for code, start, _end in section_spans(payload):
        if payload[start + 1] != 0x53:
            continue
        if code == 0x75 and batch:
            value, _ = decode(payload, start + 3)
            messages.append(bytes(value))
        elif code == 0x72 and payload[start + 3] != 0x40:
            # Only the key's value is decoded: the map may hold keys a dict cannot (lists).
            spans, _ = split_list(payload, start + 3)
            for i in range(0, len(spans) - 1, 2):
                ks = spans[i][0]
                if payload[ks] in (0xA3, 0xA1) and payload[ks + 2 : spans[i][1]] == _PKEY:
                    value, _ = decode(payload, spans[i + 1][0])
                    if value is not None:
                        partition_key = _text(value)
        elif code > 0x72 and not batch:
            break  # annotations come before properties and the body
    if not messages:
        raise ValueError("a batch message (format 0x80013700) must carry data sections")
    return messages, partition_key


class _Session:
    """One AMQP session: channel mapping, transfer windows, links by handle."""

    def __init__(self, connection: _Connection, channel: int, remote_channel: int) -> None:
        self.connection = connection
        self.channel = channel
        self.remote_channel = remote_channel
        self.links: dict[int, _Link] = {}
        self.closing: set[int] = set()  # handles we detached, waiting for the peer's detach
        self.next_incoming_id = 0
        self.next_outgoing_id = 0
        self.next_delivery_id = 0
        self.remote_incoming_window = 0
        self.partial: dict[int, tuple[int, int, bool, bytearray]] = {}

    # -- outgoing -----------------------------------------------------------------------------

    def send_link_flow(self, handle: int, delivery_count: int, credit: int) -> None:
        self.connection.send(
            framing.flow(
                self.channel,
                next_incoming_id=self.next_incoming_id,
                incoming_window=SESSION_WINDOW,
                next_outgoing_id=self.next_outgoing_id,
                outgoing_window=SESSION_WINDOW,
                handle=handle,
                delivery_count=delivery_count,
                link_credit=credit,
            )
        )

    def send_delivery(self, handle: int, payload: bytes) -> None:
        """Send one small pre-settled delivery (CBS/management responses)."""
        delivery_id = self.next_delivery_id
        self.next_delivery_id = (delivery_id + 1) & 0xFFFFFFFF
        self.connection.send(
            framing.transfer_header(self.channel, handle, delivery_id, len(payload), False)
        )
        self.connection.send(payload)
        self.next_outgoing_id += 1
        self.remote_incoming_window -= 1

    def settle(self, delivery_id: int, state: Described) -> None:
        self.connection.send(
            framing.disposition(self.channel, first=delivery_id, last=delivery_id, state=state)
        )

    def reply_link(self, node: str) -> _ReplyLink | None:
        candidates = [
            link
            for link in self.links.values()
            if isinstance(link, _ReplyLink) and link.node == node
        ]
        return candidates[-1] if candidates else None

    def detach_link(self, link: _Link, error: Described | None) -> None:
        """Detach a link on our initiative (e.g. ``amqp:link:stolen``)."""
        self.connection.send(framing.detach(self.channel, link.handle, True, error))
        self.closing.add(link.handle)
        self.links.pop(link.handle, None)
        link.on_detached()
        self.connection.schedule_flush()

    # -- incoming -----------------------------------------------------------------------------

    def on_attach(self, fields: list[Any], body: bytes) -> None:
        name = _text(fields[0]) or ""
        handle = int(fields[1])
        client_is_receiver = bool(fields[2])
        spans, _ = split_list(body, 3)
        source_raw = body[spans[5][0] : spans[5][1]] if len(spans) > 5 else None
        target_raw = body[spans[6][0] : spans[6][1]] if len(spans) > 6 else None
        if source_raw == b"\x40":
            source_raw = None
        if target_raw == b"\x40":
            target_raw = None
        source = fields[5].value if isinstance(fields[5], Described) else None
        target = fields[6].value if isinstance(fields[6], Described) else None
        properties = fields[13] if len(fields) > 13 and isinstance(fields[13], dict) else {}
        desired = fields[12] if len(fields) > 12 else None
        if isinstance(desired, (str, bytes)):
            desired = [desired]
        desired_caps = {_text(d) for d in (desired or [])}
        server = self.connection.server
        max_size = server.max_message_size
        self.closing.discard(handle)
        try:
            if client_is_receiver:
                address = _text(source[0]) if source else None
                if address in ("$cbs", "$management"):
                    link: _Link = _ReplyLink(self, name, handle, address)
                    offered = None
                else:
                    link = server.open_consumer(
                        self, name, handle, address or "", source, properties, desired_caps
                    )
                    offered = [RUNTIME_METRIC] if RUNTIME_METRIC in desired_caps else None
                self.links[handle] = link
                self.connection.send(
                    framing.attach(
                        self.channel,
                        name=name,
                        handle=handle,
                        role_receiver=False,
                        source=source_raw,
                        target=target_raw,
                        snd_settle_mode=1,
                        rcv_settle_mode=0,
                        initial_delivery_count=0,
                        max_message_size=max_size,
                        offered_capabilities=offered,
                    )
                )
                if isinstance(link, _ConsumerLink):
                    server.register_reader(link)
            else:
                address = _text(target[0]) if target else None
                initial = int(fields[9]) if len(fields) > 9 and fields[9] is not None else 0
                if address in ("$cbs", "$management"):
                    link = _RequestLink(self, name, handle, initial, address)
                else:
                    hub, partition = server.open_producer(self, address or "")
                    link = _ProducerLink(self, name, handle, initial, hub, partition, max_size)
                self.links[handle] = link
                self.connection.send(
                    framing.attach(
                        self.channel,
                        name=name,
                        handle=handle,
                        role_receiver=True,
                        source=source_raw,
                        target=target_raw,
                        snd_settle_mode=2,
                        rcv_settle_mode=0,
                        initial_delivery_count=None,
                        max_message_size=max_size,
                    )
                )
                assert isinstance(link, _ReceiverBase)
                link.grant()
        except LinkRefused as refused:
            logger.info("attach %r refused: %s %s", name, refused.condition, refused.description)
            # A refusal is an attach with a null terminus followed by a closing detach.
            self.connection.send(
                framing.attach(
                    self.channel,
                    name=name,
                    handle=handle,
                    role_receiver=not client_is_receiver,
                    source=None if client_is_receiver else source_raw,
                    target=target_raw if client_is_receiver else None,
                    snd_settle_mode=0,
                    rcv_settle_mode=0,
                    initial_delivery_count=0 if client_is_receiver else None,
                    max_message_size=max_size,
                )
            )
            self.connection.send(
                framing.detach(
                    self.channel,
                    handle,
                    True,
                    framing.amqp_error(refused.condition, refused.description),
                )
            )
            self.closing.add(handle)

    def on_flow(self, fields: list[Any]) -> None:
        next_incoming = fields[0] if fields[0] is not None else 0
        self.remote_incoming_window = next_incoming + fields[1] - self.next_outgoing_id
        handle = fields[4]
        if handle is not None:
            link = self.links.get(handle)
            if link is not None:
                link.on_flow(fields)
        else:
            for link in list(self.links.values()):
                if isinstance(link, (_ConsumerLink, _ReplyLink)):
                    link._pump()
        if fields[9] and handle is None:
            self.connection.send(
                framing.flow(
                    self.channel,
                    next_incoming_id=self.next_incoming_id,
                    incoming_window=SESSION_WINDOW,
                    next_outgoing_id=self.next_outgoing_id,
                    outgoing_window=SESSION_WINDOW,
                )
            )

    def on_transfer(self, fields: list[Any], payload: bytes) -> None:
        self.next_incoming_id = (self.next_incoming_id + 1) & 0xFFFFFFFF
        handle = fields[0]
        link = self.links.get(handle)
        if link is None:
            if handle in self.closing:
                return  # in flight while we detached the link
            raise AMQPDecodeError(f"transfer on unattached handle {handle}")
        more = bool(fields[5]) if len(fields) > 5 else False
        aborted = bool(fields[9]) if len(fields) > 9 else False
        partial = self.partial.get(handle)
        if partial is None:
            delivery_id = fields[1]
            message_format = fields[3] or 0
            settled = bool(fields[4])
            if more:
                self.partial[handle] = (delivery_id, message_format, settled, bytearray(payload))
                return
            data = payload
        else:
            delivery_id, message_format, settled, buffer = partial
            if fields[4]:
                settled = True
            buffer += payload
            if more and not aborted:
                return
            del self.partial[handle]
            if aborted:
                return
            data = bytes(buffer)
        link.on_transfer(delivery_id, message_format, data, settled)

    def on_detach(self, fields: list[Any]) -> None:
        handle = fields[0]
        if handle in self.closing:
            self.closing.discard(handle)
            return
        link = self.links.pop(handle, None)
        self.partial.pop(handle, None)
        self.connection.send(framing.detach(self.channel, handle, bool(fields[1])))
        if link is not None:
            link.on_detached()

    def on_end(self) -> None:
        for link in list(self.links.values()):
            link.on_detached()
        self.links.clear()


class _Connection(asyncio.Protocol):
    """One client connection: protocol headers, SASL, framing, sessions."""

    def __init__(self, server: EmulatorServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.phase = "header"  # header -> sasl -> header -> amqp -> closed
        self.sasl_done = False
        self.sessions: dict[int, _Session] = {}  # by the peer's channel
        self.out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self.paused = False
        self.remote_max_frame_size = 512
        self.authorized: set[str] = set()  # CBS audiences (lower-cased) put on this connection
        self._heartbeat: asyncio.TimerHandle | None = None
        self._idle_check: asyncio.TimerHandle | None = None
        self._last_received = server.loop.time()
        self._heartbeat_interval = 0.0
        self._sent_since_tick = False
        self.peer = ""

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=8 * 1024 * 1024, low=1024 * 1024)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.server.connections.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                import socket

                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.phase = "closed"
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self._idle_check is not None:
            self._idle_check.cancel()
        for session in self.sessions.values():
            session.on_end()
        self.sessions.clear()
        self.server.connections.discard(self)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        for session in list(self.sessions.values()):
            for link in list(session.links.values()):
                if isinstance(link, _ConsumerLink):
                    link._pump()

    def data_received(self, data: bytes) -> None:
        self._last_received = self.server.loop.time()
        buf = self.buffer
        buf += data
        pos = 0
        try:
            while self.phase != "closed":
                avail = len(buf) - pos
                if self.phase == "header":
                    if avail < 8:
                        break
                    header = bytes(buf[pos : pos + 8])
                    pos += 8
                    self._on_protocol_header(header)
                    continue
                if avail < 8:
                    break
                size = _FRAME_SIZE.unpack_from(buf, pos)[0]
                if size < 8 or size > self.server.max_frame_size:
                    self._fail("amqp:connection:framing-error", f"invalid frame size {size}")
                    break
                if avail < size:
                    break
                doff = buf[pos + 4] * 4
                frame_type = buf[pos + 5]
                channel = (buf[pos + 6] << 8) | buf[pos + 7]
                body = bytes(buf[pos + doff : pos + size])
                pos += size
                self._on_frame(frame_type, channel, body)
        except (AMQPDecodeError, ValueError, IndexError, KeyError, TypeError) as exc:
            logger.warning("connection %s: protocol error: %s", self.peer, exc)
            self._fail("amqp:decode-error", str(exc))
        del buf[:pos]
        if self.out:
            self.schedule_flush()

    # -- output -------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        self.out.append(data)
        self.schedule_flush()

    def out_bytes_hint(self, n: int) -> bool:
        """Account for queued bytes; True once a flush should happen before queuing more."""
        self._out_bytes += n
        return self._out_bytes > 4 * 1024 * 1024

    def schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.server.loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        self._out_bytes = 0
        if not self.out:
            return
        out, self.out = self.out, []
        self._sent_since_tick = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))
        # A reader stopped by out_bytes_hint continues on the next loop iteration.
        if not self.paused:
            for session in list(self.sessions.values()):
                for link in list(session.links.values()):
                    if isinstance(link, _ConsumerLink) and link.credit > 0:
                        link._pump()

    def _fail(self, condition: str, description: str) -> None:
        if self.phase == "closed":
            return
        self.out.append(framing.close(framing.amqp_error(condition, description)))
        self.flush()
        self.phase = "closed"
        if self.transport is not None:
            self.transport.close()

    def _idle_tick(self) -> None:
        if self.phase == "closed":
            return
        limit = self.server.idle_timeout or 0.0
        silent = self.server.loop.time() - self._last_received
        if silent > limit:
            logger.info("connection %s: idle for %.1fs, closing", self.peer, silent)
            self._fail(
                "amqp:resource-limit-exceeded",
                f"local-idle-timeout expired: nothing received for {limit:g}s (the idle-time-out "
                "this emulator advertised in its open frame)",
            )
            return
        self._idle_check = self.server.loop.call_later(limit / 4, self._idle_tick)

    def _heartbeat_tick(self) -> None:
        if self.phase == "closed":
            return
        if not self._sent_since_tick:
            self.send(framing.empty_frame())
        self._sent_since_tick = False
        self._heartbeat = self.server.loop.call_later(
            self._heartbeat_interval, self._heartbeat_tick
        )

    # -- protocol -----------------------------------------------------------------------------

    def _on_protocol_header(self, header: bytes) -> None:
        if header == framing.SASL_HEADER and not self.sasl_done:
            self.send(framing.SASL_HEADER)
            self.send(framing.sasl_mechanisms(["ANONYMOUS", "PLAIN"]))
            self.phase = "sasl"
        elif header == framing.AMQP_HEADER:
            self.send(framing.AMQP_HEADER)
            self.phase = "amqp"
        else:
            # Answer with the header we speak, then close (AMQP 1.0 section 2.2).
            self.send(framing.AMQP_HEADER)
            self.flush()
            self.phase = "closed"
            if self.transport is not None:
                self.transport.close()

    def _on_frame(self, frame_type: int, channel: int, body: bytes) -> None:
        if not body:
            return  # heartbeat
        code, fields, payload_start = framing.parse_performative(body)
        if self.phase == "sasl":
            if code == Performative.SASL_INIT:
                mechanism = _text(fields[0])
                if mechanism not in ("ANONYMOUS", "PLAIN", "EXTERNAL"):
                    self.send(framing.sasl_outcome(1))
                    self.flush()
                    self.phase = "closed"
                    if self.transport is not None:
                        self.transport.close()
                    return
                self.send(framing.sasl_outcome(0))
                self.sasl_done = True
                self.phase = "header"
            return
        if code == Performative.TRANSFER:
            session = self.sessions.get(channel)
            if session is None:
                raise AMQPDecodeError(f"transfer on unknown channel {channel}")
            session.on_transfer(fields, body[payload_start:])
        elif code == Performative.FLOW:
            session = self.sessions.get(channel)
            if session is not None:
                session.on_flow(fields)
        elif code == Performative.DISPOSITION:
            pass  # every delivery we send is pre-settled
        elif code == Performative.ATTACH:
            self.sessions[channel].on_attach(fields, body)
        elif code == Performative.DETACH:
            session = self.sessions.get(channel)
            if session is not None:
                session.on_detach(fields)
        elif code == Performative.BEGIN:
            used = {s.channel for s in self.sessions.values()}
            ours = next(i for i in range(65536) if i not in used)
            session = _Session(self, ours, channel)
            session.next_incoming_id = fields[1] or 0
            session.remote_incoming_window = fields[2] or 0
            self.sessions[channel] = session
            self.send(framing.begin(ours, channel, 0, SESSION_WINDOW, SESSION_WINDOW))
        elif code == Performative.END:
            session = self.sessions.pop(channel, None)
            if session is not None:
                session.on_end()
                self.send(framing.end(session.channel))
        elif code == Performative.OPEN:
            self.remote_max_frame_size = min(
                int(fields[2]) if len(fields) > 2 and fields[2] is not None else 0xFFFFFFFF,
                self.server.max_frame_size,
            )
            idle = fields[4] if len(fields) > 4 else None
            our_idle = self.server.idle_timeout
            self.send(
                framing.open_(
                    self.server.container_id,
                    self.server.max_frame_size,
                    int(our_idle * 1000) if our_idle else None,
                )
            )
            if our_idle:
                self._idle_check = self.server.loop.call_later(our_idle / 4, self._idle_tick)
            if idle:
                self._heartbeat_interval = max(idle / 2000.0, 0.05)
                self._heartbeat = self.server.loop.call_later(
                    self._heartbeat_interval, self._heartbeat_tick
                )
        elif code == Performative.CLOSE:
            for session in self.sessions.values():
                session.on_end()
            self.sessions.clear()
            self.send(framing.close())
            self.flush()
            self.phase = "closed"
            if self.transport is not None:
                self.transport.close()
        else:
            raise AMQPDecodeError(f"unexpected performative 0x{code:02x}")


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
        self.ws_port = ws_port
        self.ssl_context = ssl_context
        self.idle_timeout = idle_timeout
        self._ws_server: asyncio.base_events.Server | None = None
        self.host = host
        self.port = port
        self.max_message_size = max_message_size
        self.max_frame_size = max_frame_size
        self.container_id = f"eventhubs-emulator-{uuid.uuid4().hex[:8]}"
        self.connections: set[_Connection] = set()
        self.readers: dict[tuple[str, str, str], list[_ConsumerLink]] = {}
        self._server: asyncio.base_events.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the server runs on (set by :meth:`start`)."""
        assert self._loop is not None, "EmulatorServer.start() has not run"
        return self._loop

    async def start(self) -> None:
        """Bind and start accepting connections (``self.port`` is set to the bound port)."""
        self._loop = asyncio.get_running_loop()
        self._server = await self._loop.create_server(
            lambda: _Connection(self),
            self.host,
            self.port,
            reuse_address=True,
            ssl=self.ssl_context,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        scheme = "amqps" if self.ssl_context is not None else "amqp"
        logger.info("emulator listening on %s://%s:%d", scheme, self.host, self.port)
        if self.ws_port is not None:
            try:
                self._ws_server = await self._loop.create_server(
                    lambda: WebSocketProtocol(lambda: _Connection(self)),
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
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        for listener in (self._server, self._ws_server):
            if listener is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(listener.wait_closed(), 5)
        self._server = self._ws_server = None
        self.namespace.close()

    # -- entity lookup ------------------------------------------------------------------------

    def _entity(self, hub_name: str) -> str:
        return f"sb://{self.host}:{self.port}/{hub_name}"

    def _hub(self, name: str) -> Hub:
        hub = self.namespace.get(name)
        if hub is None:
            raise LinkRefused(
                "amqp:not-found",
                f"The messaging entity '{self._entity(name)}' could not be found. To know more "
                "visit https://aka.ms/sbResourceMgrExceptions.",
            )
        return hub

    def _partition(self, hub: Hub, partition_id: str) -> Partition:
        partition = hub.partition(partition_id)
        if partition is None:
            raise LinkRefused(
                "com.microsoft:argument-out-of-range",
                "The specified partition is invalid for an EventHub partition sender or receiver."
                f" It should be between 0 and {len(hub.partitions) - 1}.",
            )
        return partition

    def _check_authorized(self, conn: _Connection, hub: Hub, consumer_group: str | None) -> None:
        wanted = {f"/{hub.name.lower()}", "/"}
        if consumer_group is not None:
            wanted.add(f"/{hub.name.lower()}/consumergroups/{consumer_group.lower()}")
        for audience in conn.authorized:
            path = "/" + "/".join(_path_of(audience)).lower()
            if path in wanted:
                return
        raise LinkRefused(
            "amqp:unauthorized-access",
            f"Unauthorized access. No CBS token was put for '{self._entity(hub.name)}'; the "
            "client must authenticate over $cbs first.",
        )

    def open_producer(self, session: _Session, address: str) -> tuple[Hub, Partition | None]:
        """Resolve a sender target ``<hub>`` or ``<hub>/Partitions/<id>``, or refuse."""
        parts = _path_of(address)
        if not parts:
            raise LinkRefused("amqp:not-found", f"link target {address!r} names no event hub")
        hub = self._hub(parts[0])
        self._check_authorized(session.connection, hub, None)
        if len(parts) == 1:
            return hub, None
        if len(parts) == 3 and parts[1].lower() == "partitions":
            return hub, self._partition(hub, parts[2])
        raise LinkRefused(
            "amqp:not-found",
            f"link target {address!r} is not '<hub>' or '<hub>/Partitions/<id>'",
        )

    def open_consumer(
        self,
        session: _Session,
        name: str,
        handle: int,
        address: str,
        source: list[Any] | None,
        properties: dict[Any, Any],
        desired_caps: set[str | None],
    ) -> _ConsumerLink:
        """Resolve ``<hub>/ConsumerGroups/<cg>/Partitions/<id>`` and the start filter, or refuse."""
        parts = _path_of(address)
        if (
            len(parts) != 5
            or parts[1].lower() != "consumergroups"
            or parts[3].lower() != "partitions"
        ):
            raise LinkRefused(
                "amqp:not-found",
                f"link source {address!r} is not '<hub>/ConsumerGroups/<cg>/Partitions/<id>'",
            )
        hub = self._hub(parts[0])
        cg = next((g for g in hub.consumer_groups if g.lower() == parts[2].lower()), None)
        if cg is None:
            raise LinkRefused(
                "amqp:not-found",
                f"The messaging entity '{self._entity(hub.name)}/consumergroups/{parts[2]}' could "
                "not be found. To know more visit https://aka.ms/sbResourceMgrExceptions.",
            )
        partition = self._partition(hub, parts[4])
        self._check_authorized(session.connection, hub, cg)
        start = self._start_sequence(partition, source)
        epoch = None
        for key, value in properties.items():
            if (key.encode() if isinstance(key, str) else key) == EPOCH and value is not None:
                epoch = int(value)
        link = _ConsumerLink(
            session,
            name,
            handle,
            hub,
            cg,
            partition,
            start,
            epoch,
            RUNTIME_METRIC in desired_caps,
        )
        self._admit_reader(link)
        return link

    def _start_sequence(self, partition: Partition, source: list[Any] | None) -> int:
        filters = source[7] if source and len(source) > 7 and isinstance(source[7], dict) else {}
        expression = None
        for value in filters.values():
            if isinstance(value, Described):
                descriptor = value.descriptor
                if isinstance(descriptor, str):
                    descriptor = descriptor.encode()
                if descriptor in (SELECTOR_FILTER, SELECTOR_FILTER_CODE):
                    expression = _text(value.value)
        if expression is None:
            return partition.begin_sequence_number
        match = _SELECTOR.match(expression)
        if match is None:
            raise LinkRefused(
                "amqp:invalid-field",
                f"selector filter {expression!r} is not supported; expected "
                "\"amqp.annotation.x-opt-(offset|sequence-number|enqueued-time) >[=] '<value>'\"",
            )
        kind, op, value = match.group(1).lower(), match.group(2), match.group(3)
        if not (value in ("-1", "@latest") and kind == "offset"):
            try:
                int(value)
            except ValueError:
                raise LinkRefused(
                    "amqp:invalid-field",
                    f"selector filter {expression!r}: {value!r} is not a number",
                ) from None
        return partition.start_sequence(kind, value, op == ">=")

    def _admit_reader(self, link: _ConsumerLink) -> None:
        readers = [r for r in self.readers.get(link.key, []) if not r.closed]
        epochs = [r.epoch for r in readers if r.epoch is not None]
        where = (
            f"hub '{link.hub.name}', consumer group '{link.consumer_group}', "
            f"partition '{link.partition.id}'"
        )
        if link.epoch is None:
            if epochs:
                raise LinkRefused(
                    "amqp:link:stolen",
                    f"At least one receiver for the endpoint is created with epoch of "
                    f"'{max(epochs)}', and so non-epoch receiver is not allowed. Either reconnect "
                    f"with a higher epoch, or make sure all epoch receivers are closed or "
                    f"disconnected. ({where})",
                )
            if len(readers) >= MAX_CONCURRENT_READERS:
                raise LinkRefused(
                    "amqp:resource-limit-exceeded",
                    f"Exceeded the maximum number of allowed receivers per partition in a consumer "
                    f"group which is {MAX_CONCURRENT_READERS}. ({where})",
                )
            return
        if epochs and max(epochs) > link.epoch:
            raise LinkRefused(
                "amqp:link:stolen",
                f"Receiver '{link.name}' with epoch '{link.epoch}' cannot be created because a "
                f"receiver with a higher epoch '{max(epochs)}' already exists. ({where})",
            )
        for old in readers:
            old_epoch = old.epoch if old.epoch is not None else 0
            old.stolen(
                f"New receiver '{link.name}' with higher epoch of '{link.epoch}' is created hence "
                f"current receiver '{old.name}' with epoch '{old_epoch}'"
                f" is getting disconnected. If you are recreating the receiver, make sure a higher "
                f"epoch is used. ({where})"
            )

    def register_reader(self, link: _ConsumerLink) -> None:
        """Track a reader (quota, epoch) and wake it on new events."""
        readers = [r for r in self.readers.get(link.key, []) if not r.closed]
        readers.append(link)
        self.readers[link.key] = readers
        link.partition.listeners.add(link.pump)
        logger.info(
            "reader %s attached: hub %s, consumer group %s, partition %s, owner level %s, from "
            "sequence number %d",
            link.name,
            link.hub.name,
            link.consumer_group,
            link.partition.id,
            link.epoch,
            link.cursor,
        )

    def unregister_reader(self, link: _ConsumerLink) -> None:
        """Forget a detached reader."""
        readers = self.readers.get(link.key)
        if readers and link in readers:
            readers.remove(link)

    # -- CBS and management -------------------------------------------------------------------

    def handle_cbs(self, conn: _Connection, request: dict[str, Any]) -> bytes:
        """Answer a put-token as the service does.

        202 for a valid token; 400 for a malformed request; 401 for a wrong key, a bad or
        expired signature, or a token that does not cover the audience; 404 when the audience
        names a hub (or consumer group, or namespace host) that does not exist.
        """
        app = request["app"]
        operation, token_type = _text(app.get("operation")), _text(app.get("type"))
        name, token = _text(app.get("name")), _text(request["body"])
        mid = request["message_id"]
        problem = None
        if operation != "put-token":
            problem = f"operation {operation!r} is not supported; expected 'put-token'"
        elif not name:
            problem = "the 'name' application property (the token audience) is missing"
        elif not token:
            problem = "the message body must be the token string"
        if problem is not None:
            logger.info("CBS put-token rejected: %s", problem)
            return _response(mid, 400, problem)
        assert name is not None and token is not None
        missing = self._missing_entity(name)
        if missing is not None:
            logger.info("CBS put-token for %s: 404 (%s)", name, missing)
            return _response(mid, 404, missing)
        status, reason = self.auth.check(token_type or "", token, name, app.get("expiration"))
        if status >= 300:
            logger.info("CBS put-token for %s refused: %d %s", name, status, reason)
            description = reason if status != 401 else f"{reason} TrackingId:{uuid.uuid4()}"
            return _response(mid, status, description)
        conn.authorized.add(name)
        return _response(mid, 202, "Accepted")

    def _missing_entity(self, audience: str) -> str | None:
        """The service's 404 text if ``audience`` names something this namespace lacks."""
        if not self.auth.serves_host(audience):
            return (
                f"The messaging entity '{audience}' could not be found (this emulator serves "
                f"{', '.join(sorted(self.auth.namespaces))}). To know more visit "
                "https://aka.ms/sbResourceMgrExceptions."
            )
        parts = _path_of(audience) if "://" in audience else _path_of("sb://" + audience)
        if not parts:
            return None  # the namespace itself
        if self.namespace.get(parts[0]) is None:
            return (
                f"The messaging entity '{self._entity(parts[0])}' could not be found. To know "
                "more visit https://aka.ms/sbResourceMgrExceptions."
            )
        return None  # an unknown consumer group is refused at attach, as the service does

    def handle_management(self, conn: _Connection, request: dict[str, Any]) -> bytes:
        """Answer a management READ of a hub or a partition."""
        app = request["app"]
        mid = request["message_id"]
        operation, entity_type = _text(app.get("operation")), _text(app.get("type"))
        name = _text(app.get("name")) or ""
        if not app.get("security_token") and not conn.authorized:
            return _response(mid, 401, "Unauthorized: the request carries no security_token")
        if operation != "READ":
            return _response(mid, 400, f"operation {operation!r} is not supported; use 'READ'")
        hub = self.namespace.get(name)
        if hub is None:
            return _response(
                mid,
                404,
                f"The messaging entity '{self._entity(name)}' could not be found. To know more "
                "visit https://aka.ms/sbResourceMgrExceptions.",
            )
        if entity_type == "com.microsoft:eventhub":
            return _response(mid, 200, "OK", hub.properties())
        if entity_type == "com.microsoft:partition":
            pid = _text(app.get("partition")) or ""
            partition = hub.partition(pid)
            if partition is None:
                return _response(
                    mid,
                    400,
                    "The specified partition is invalid for an EventHub partition sender or "
                    f"receiver. It should be between 0 and {len(hub.partitions) - 1}.",
                )
            return _response(mid, 200, "OK", partition.properties())
        return _response(mid, 400, f"type {entity_type!r} is not supported")
