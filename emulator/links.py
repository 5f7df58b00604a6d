"""The emulator's AMQP links: replies, requests, producers and partition readers.

A link knows its session by what it asks of it (:class:`LinkSession`, :class:`LinkConnection`),
and the service directly.
"""

from __future__ import annotations

import logging
import struct
from typing import Any, Protocol

from dagster_eventhub_ingest.emulator.hub import Hub, Partition, StoredEvent
from dagster_eventhub_ingest.emulator.service import Service
from dagster_eventhub_ingest.emulator.wire import (
    LAST_OFFSET,
    LAST_SEQ,
    LAST_TIME,
    PRODUCER_CREDIT,
    RETRIEVAL_TIME,
    decode_request,
    now_ms,
    split_batch,
)
from dagster_eventhub_ingest.resources.amqp import framing
from dagster_eventhub_ingest.resources.amqp.codec import (
    AMQPDecodeError,
    Described,
    Timestamp,
    encode,
    split_list,
)

logger = logging.getLogger(__name__)


class LinkConnection(Protocol):
    """What a link asks of its connection."""

    @property
    def service(self) -> Service: ...
    @property
    def authorized(self) -> set[str]: ...
    @property
    def paused(self) -> bool: ...
    @property
    def out(self) -> list[bytes]: ...
    @property
    def remote_max_frame_size(self) -> int: ...

    def out_bytes_hint(self, n: int) -> bool: ...
    def schedule_flush(self) -> None: ...


class LinkSession(Protocol):
    """What a link asks of its session (the delivery counters it advances included)."""

    next_delivery_id: int
    next_outgoing_id: int
    remote_incoming_window: int

    @property
    def channel(self) -> int: ...
    @property
    def connection(self) -> LinkConnection: ...

    def send_link_flow(self, handle: int, delivery_count: int, credit: int) -> None: ...
    def send_delivery(self, handle: int, payload: bytes) -> None: ...
    def settle(self, delivery_id: int, state: Described) -> None: ...
    def reply_link(self, node: str) -> ReplyLink | None: ...
    def detach_link(self, link: Link, error: Described | None) -> None: ...


class Link:
    """State shared by every link: names, handles, the session it lives in."""

    def __init__(self, session: LinkSession, name: str, handle: int) -> None:
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


class ReplyLink(Link):
    """Our sender on ``$cbs`` / ``$management``: carries responses, pre-settled."""

    def __init__(self, session: LinkSession, name: str, handle: int, node: str) -> None:
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


class IncomingLink(Link):
    """A link where the client sends to us: grant credit, reassemble, settle Accepted."""

    def __init__(self, session: LinkSession, name: str, handle: int, delivery_count: int) -> None:
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


class RequestLink(IncomingLink):
    """Client's sender on ``$cbs`` / ``$management``: requests answered on the reply link."""

    def __init__(
        self, session: LinkSession, name: str, handle: int, delivery_count: int, node: str
    ) -> None:
        super().__init__(session, name, handle, delivery_count)
        self.node = node

    def on_transfer(
        self, delivery_id: int, message_format: int, payload: bytes, settled: bool
    ) -> None:
        self.received()
        request = decode_request(payload)
        if self.node == "$cbs":
            response = self.session.connection.service.handle_cbs(
                self.session.connection.authorized, request
            )
        else:
            response = self.session.connection.service.handle_management(
                self.session.connection.authorized, request
            )
        if not settled:
            self.session.settle(delivery_id, framing.accepted())
        reply = self.session.reply_link(self.node)
        if reply is None:
            logger.warning("%s request without a reply link; response dropped", self.node)
            return
        reply.send(response)


class ProducerLink(IncomingLink):
    """Client's sender to a hub or a partition: every delivery is enqueued then accepted."""

    def __init__(
        self,
        session: LinkSession,
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
            messages, partition_key = split_batch(payload, message_format)
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


class ConsumerLink(Link):
    """Our sender for a partition reader: streams stored events within the client's credit."""

    def __init__(
        self,
        session: LinkSession,
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
                LAST_SEQ: p.next_seq - 1,
                LAST_OFFSET: str(p.last_offset),
                LAST_TIME: Timestamp(p.last_enqueued_ms),
                RETRIEVAL_TIME: Timestamp(now_ms()),
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
            self.session.connection.service.unregister_reader(self)
