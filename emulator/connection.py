"""One client connection of the emulator: protocol headers, SASL, framing, sessions."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from dagster_eventhub_ingest.emulator.hub import Hub, Partition
from dagster_eventhub_ingest.emulator.links import (
    ConsumerLink,
    IncomingLink,
    Link,
    ProducerLink,
    ReplyLink,
    RequestLink,
)
from dagster_eventhub_ingest.emulator.service import Service
from dagster_eventhub_ingest.emulator.wire import (
    FRAME_SIZE,
    RUNTIME_METRIC,
    SESSION_WINDOW,
    LinkRefused,
    text_of,
)
from dagster_eventhub_ingest.resources.amqp import framing
from dagster_eventhub_ingest.resources.amqp.codec import (
    AMQPDecodeError,
    Described,
    split_list,
)
from dagster_eventhub_ingest.resources.amqp.framing import Performative

logger = logging.getLogger(__name__)


class Session:
    """One AMQP session: channel mapping, transfer windows, links by handle."""

    def __init__(self, connection: Connection, channel: int, remote_channel: int) -> None:
        self.connection = connection
        self.channel = channel
        self.remote_channel = remote_channel
        self.links: dict[int, Link] = {}
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

    def reply_link(self, node: str) -> ReplyLink | None:
        candidates = [
            link
            for link in self.links.values()
            if isinstance(link, ReplyLink) and link.node == node
        ]
        return candidates[-1] if candidates else None

    def detach_link(self, link: Link, error: Described | None) -> None:
        """Detach a link on our initiative (e.g. ``amqp:link:stolen``)."""
        self.connection.send(framing.detach(self.channel, link.handle, True, error))
        self.closing.add(link.handle)
        self.links.pop(link.handle, None)
        link.on_detached()
        self.connection.schedule_flush()

    # -- incoming -----------------------------------------------------------------------------

    def on_attach(self, fields: list[Any], body: bytes) -> None:
        name = text_of(fields[0]) or ""
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
        desired_caps = {text_of(d) for d in (desired or [])}
        service = self.connection.service
        authorized = self.connection.authorized
        max_size = service.max_message_size
        self.closing.discard(handle)
        try:
            if client_is_receiver:
                address = text_of(source[0]) if source else None
                if address in ("$cbs", "$management"):
                    link: Link = ReplyLink(self, name, handle, address)
                    offered = None
                else:
                    metric = RUNTIME_METRIC in desired_caps

                    def reader(
                        hub: Hub, group: str, partition: Partition, start: int, epoch: int | None
                    ) -> ConsumerLink:
                        return ConsumerLink(
                            self, name, handle, hub, group, partition, start, epoch, metric
                        )

                    link = service.open_consumer(
                        authorized, address or "", source, properties, reader
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
                if isinstance(link, ConsumerLink):
                    service.register_reader(link)
            else:
                address = text_of(target[0]) if target else None
                initial = int(fields[9]) if len(fields) > 9 and fields[9] is not None else 0
                if address in ("$cbs", "$management"):
                    link = RequestLink(self, name, handle, initial, address)
                else:
                    hub, partition = service.open_producer(authorized, address or "")
                    link = ProducerLink(self, name, handle, initial, hub, partition, max_size)
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
                assert isinstance(link, IncomingLink)
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
                if isinstance(link, (ConsumerLink, ReplyLink)):
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


class Connection(asyncio.Protocol):
    """One client connection: protocol headers, SASL, framing, sessions."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.phase = "header"  # header -> sasl -> header -> amqp -> closed
        self.sasl_done = False
        self.sessions: dict[int, Session] = {}  # by the peer's channel
        self.out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self.paused = False
        self.remote_max_frame_size = 512
        self.authorized: set[str] = set()  # CBS audiences (lower-cased) put on this connection
        self._heartbeat: asyncio.TimerHandle | None = None
        self._idle_check: asyncio.TimerHandle | None = None
        self._last_received = service.loop.time()
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
        self.service.connections.add(self)
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
        self.service.connections.discard(self)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        for session in list(self.sessions.values()):
            for link in list(session.links.values()):
                if isinstance(link, ConsumerLink):
                    link._pump()

    def data_received(self, data: bytes) -> None:
        self._last_received = self.service.loop.time()
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
                size = FRAME_SIZE.unpack_from(buf, pos)[0]
                if size < 8 or size > self.service.max_frame_size:
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
            self.service.loop.call_soon(self.flush)

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
                    if isinstance(link, ConsumerLink) and link.credit > 0:
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
        limit = self.service.idle_timeout or 0.0
        silent = self.service.loop.time() - self._last_received
        if silent > limit:
            logger.info("connection %s: idle for %.1fs, closing", self.peer, silent)
            self._fail(
                "amqp:resource-limit-exceeded",
                f"local-idle-timeout expired: nothing received for {limit:g}s (the idle-time-out "
                "this emulator advertised in its open frame)",
            )
            return
        self._idle_check = self.service.loop.call_later(limit / 4, self._idle_tick)

    def _heartbeat_tick(self) -> None:
        if self.phase == "closed":
            return
        if not self._sent_since_tick:
            self.send(framing.empty_frame())
        self._sent_since_tick = False
        self._heartbeat = self.service.loop.call_later(
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
                mechanism = text_of(fields[0])
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
            session = Session(self, ours, channel)
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
                self.service.max_frame_size,
            )
            idle = fields[4] if len(fields) > 4 else None
            our_idle = self.service.idle_timeout
            self.send(
                framing.open_(
                    self.service.container_id,
                    self.service.max_frame_size,
                    int(our_idle * 1000) if our_idle else None,
                )
            )
            if our_idle:
                self._idle_check = self.service.loop.call_later(our_idle / 4, self._idle_tick)
            if idle:
                self._heartbeat_interval = max(idle / 2000.0, 0.05)
                self._heartbeat = self.service.loop.call_later(
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
