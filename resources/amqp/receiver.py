"""The receiver link of one Event Hubs partition: attach, credit, transfers to decoded events.

:class:`PartitionReceiver` attaches as the SDK's consumers attach (a source naming
``<hub>/ConsumerGroups/<group>/Partitions/<id>`` with an ``apache.org:selector-filter:string``
that says where to start: :func:`selector`; the SDK's link properties and capabilities), then
keeps the service sending: credit in windows of ``prefetch``, topped up once half of it is used,
never past the events a bounded range still needs (``end``), so the service delivers a range
without a pause at each window and nothing past its end. The service sends every event settled,
so the receiver never settles one (the SDK does not either).

:meth:`PartitionReceiver.receive` takes what the connection's buffer holds: a run of plain
transfer frames goes through the native step (the reader's ``_amqp_columns.c``, its ``scan``)
straight into Arrow's column buffers, handed over as ``run(columns)``; any other transfer of the
link is cut from the buffer by index and handed over as ``decode(message bytes)``; a message in
several frames is joined through :meth:`Connection.dispatch` first, and every other frame goes
there too. The reader passes its own ``decode`` and ``run``
(:func:`~dagster_eventhub_ingest.resources.eventhubs_source.message.decode_event`,
:class:`~dagster_eventhub_ingest.resources.eventhubs_source.events.ColumnRows`): what they return
has the sequence number it carries as ``seq`` (a run: ``last_seq``), which the credit follows.
No object per frame but the event itself.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from types import ModuleType
from typing import Any

from dagster_eventhub_ingest.resources.amqp import framing
from dagster_eventhub_ingest.resources.amqp.codec import FIXED_WIDTH, Described, Symbol
from dagster_eventhub_ingest.resources.amqp.connection import Connection, Link

__all__ = ["PartitionReceiver", "selector", "source_address"]

SELECTOR_FILTER = Symbol("apache.org:selector-filter:string")
#: What the SDK's consumers attach with (``com.microsoft:timeout`` 0: the service's own).
_LINK_PROPERTIES = {Symbol("com.microsoft:timeout"): 0}
_DESIRED_CAPABILITIES = ["com.microsoft:georeplication"]
#: Receivers accept messages up to this size (the SDK's value).
MAX_MESSAGE_SIZE = 1024 * 1024
#: Frames the native step takes per call at most (its own cap).
_NATIVE_RUN = 4096

_u32 = struct.Struct(">I").unpack_from


def selector(position: int | str | datetime, *, inclusive: bool) -> str:
    """The selector filter for a start position, as the SDK writes it: a sequence number, an
    offset (``"-1"`` the start, ``"@latest"`` the end) or an enqueued time (milliseconds; a
    time without a zone is UTC)."""
    op = ">=" if inclusive else ">"
    if isinstance(position, datetime):
        when = position if position.tzinfo else position.replace(tzinfo=timezone.utc)
        ms = int(when.timestamp() * 1000)
        return f"amqp.annotation.x-opt-enqueued-time {op} '{ms}'"
    if isinstance(position, int):
        return f"amqp.annotation.x-opt-sequence-number {op} '{position}'"
    return f"amqp.annotation.x-opt-offset {op} '{position}'"


def source_address(namespace: str, hub: str, consumer_group: str, partition_id: str) -> str:
    """The link source of a partition, as the SDK names it (``amqps://`` even without TLS)."""
    return f"amqps://{namespace}/{hub}/ConsumerGroups/{consumer_group}/Partitions/{partition_id}"


def _transfer(b: bytearray, q: int, stop: int) -> tuple[int, bool, int] | None:
    """A transfer performative's list at ``b[q]``: its handle, ``more``, where the payload
    starts; None when the fields are not the usual encodings (the codec decodes it then)."""
    c = b[q]
    if c == 0xC0:
        count, i, at = b[q + 2], q + 3, q + 2 + b[q + 1]
    elif c == 0xD0:
        count, i, at = _u32(b, q + 5)[0], q + 9, q + 5 + _u32(b, q + 1)[0]
    else:
        return None
    if at > stop or count < 1:
        return None
    c = b[i]
    if c == 0x52:
        handle, i = b[i + 1], i + 2
    elif c == 0x43:
        handle, i = 0, i + 1
    elif c == 0x70:
        handle, i = _u32(b, i + 1)[0], i + 5
    else:
        return None
    more = False
    if count > 5:
        for _ in range(4):  # delivery-id, delivery-tag, message-format, settled
            c = b[i]
            if c == 0xA0:
                i += 2 + b[i + 1]
            elif c == 0xB0:
                i += 5 + _u32(b, i + 1)[0]
            else:
                width = FIXED_WIDTH.get(c)
                if width is None:
                    return None
                i += 1 + width
        c = b[i]
        if c == 0x41 or (c == 0x56 and b[i + 1]):
            more = True
        elif c != 0x42 and c != 0x40 and c != 0x56:
            return None
    return handle, more, at


class PartitionReceiver(Link):
    """The link that receives one partition on ``conn`` (see the module docstring)."""

    def __init__(
        self,
        conn: Connection,
        address: str,
        position: int | str | datetime,
        *,
        inclusive: bool,
        prefetch: int,
        decode: Callable[[bytes], Any],
        end: int | None = None,
        native: ModuleType | None = None,
        run: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        name = str(uuid.uuid4())
        super().__init__(name, conn.new_handle())
        self._conn = conn
        self.address = address
        self.filter = selector(position, inclusive=inclusive)
        self._prefetch = max(1, prefetch)
        self._end = end
        self._decode = decode
        # The last sequence number received: the credit never asks for more than the range
        # still needs. A start that is not a sequence number has no end (a probe).
        self.last_seq: int | None = None
        if isinstance(position, int):
            self.last_seq = position - 1 if inclusive else position
        self._native = native if run is not None else None
        self._run = run
        self.credit = 0
        self.delivery_count = 0
        self._partial: bytearray | None = None  # a message arriving in several frames
        self._pending: list[Any] = []  # events decoded through dispatch (during a handshake)
        self._refused = False

    # -- attaching ---------------------------------------------------------------------------

    def attach(self) -> None:
        """Attach and grant the first credit; raises :class:`LinkDetachedError` when the
        service refuses (an unknown hub, consumer group or partition, a stolen link...)."""
        conn = self._conn
        filters = {SELECTOR_FILTER: Described(SELECTOR_FILTER, self.filter)}
        conn.attach(
            self,
            receiver=True,
            source=framing.source(self.address, filters),
            target=framing.target(f"receiver-link-{self.name}"),
            max_message_size=MAX_MESSAGE_SIZE,
            desired_capabilities=_DESIRED_CAPABILITIES,
            properties=_LINK_PROPERTIES,
        )
        deadline = time.monotonic() + conn.timeout

        def settled() -> bool:
            if self.error is not None:
                raise self.error
            return self.attached and not self._refused

        conn.pump(settled, deadline, f"attaching to {self.address}")
        self._top_up()

    def on_attach(self, fields: list[Any]) -> None:
        super().on_attach(fields)
        # A refusal is an attach without a source, then a detach with the error.
        self._refused = fields[5] is None
        if len(fields) > 9 and fields[9] is not None:
            self.delivery_count = fields[9]

    def on_transfer(self, fields: list[Any], payload: bytes) -> None:
        """A transfer that came through :meth:`Connection.dispatch` (one the fast path left:
        during the handshake, or in an encoding it does not read)."""
        more = len(fields) > 5 and bool(fields[5])
        aborted = len(fields) > 9 and bool(fields[9])
        if self._partial is not None or more:
            if self._partial is None:
                self._partial = bytearray()
            self._partial += payload
            if more and not aborted:
                return
            payload, self._partial = bytes(self._partial), None
        self._delivered(1)
        if aborted:
            return
        event = self._decode(bytes(payload))
        if event.seq is not None:
            self.last_seq = event.seq
        self._pending.append(event)

    # -- receiving ---------------------------------------------------------------------------

    def receive(self, wait: float) -> list[Any]:
        """The events received next, in order (``Event``s and ``ColumnRows``), or ``[]`` when
        none arrived for ``wait`` seconds. Raises the link's or the connection's error."""
        conn = self._conn
        deadline: float | None = None
        out: list[Any] = []
        while True:
            if self._pending:
                out += self._pending
                self._pending = []
            self._take(out)
            if self.error is not None:
                raise self.error
            self._top_up()
            if out:
                return out
            now = time.monotonic()
            if deadline is None:
                deadline = now + wait
            elif now >= deadline:
                return out
            conn.fill(deadline - now)

    def _top_up(self) -> bool:
        """Credit up to ``prefetch`` (or what the range still needs) once half is used; the
        session's window renewed once half is used. Whether credit was granted."""
        want = self._prefetch
        if self._end is not None and self.last_seq is not None:
            want = min(want, self._end - self.last_seq)
        if want > self.credit and self.credit * 2 <= self._prefetch:
            self.credit = want
            self._conn.send_flow(
                handle=self.handle, delivery_count=self.delivery_count, link_credit=want
            )
            return True
        if self._conn.incoming_window < self._conn.window // 2:
            self._conn.send_flow()
        return False

    def _delivered(self, n: int) -> None:
        self.credit -= n
        self.delivery_count = (self.delivery_count + n) & 0xFFFFFFFF

    def _take(self, out: list[Any]) -> None:
        """Take the whole frames in the buffer: this link's transfers here, the rest through
        :meth:`Connection.dispatch`."""
        conn = self._conn
        handle = self.remote_handle
        channel = conn.remote_channel
        if handle is None or channel is None:
            return
        buf = conn.buf
        start, end = conn.start, conn.end
        hi, lo = channel >> 8, channel & 0xFF
        native = self._native
        run = self._run
        decode = self._decode
        frames = deliveries = 0
        last_seq = self.last_seq
        # Deliveries after which half the credit is spent: it is topped up there, mid-buffer,
        # so that the service goes on sending while this buffer is decoded.
        half = self._prefetch // 2
        check = self.credit - half
        while end - start >= 8:
            if deliveries >= check:
                self._settle_counts(frames, deliveries, last_seq)
                frames = deliveries = 0
                conn.start = start
                check = self.credit - half if self._top_up() else 1 << 62
            size = _u32(buf, start)[0]
            if size > end - start or size < 8:
                break
            stop = start + size
            p = start + 4 * buf[start + 4]
            ours = None
            if (
                buf[start + 5] == 0
                and buf[start + 6] == hi
                and buf[start + 7] == lo
                and p + 3 < stop
                and buf[p] == 0
                and buf[p + 1] == 0x53
                and buf[p + 2] == 0x14
            ):
                if native is not None and self._partial is None:
                    most = max(1, min(_NATIVE_RUN, check - deliveries))
                    got = native.scan(buf, start, end, channel, handle, most, None)
                    if got is not None:
                        n = got[0]
                        start = got[1]
                        rows = run(got[5])  # type: ignore[misc]
                        out.append(rows)
                        frames += n
                        deliveries += n
                        last_seq = rows.last_seq
                        continue
                ours = _transfer(buf, p + 3, stop)
            if ours is None or ours[0] != handle or ours[1] or self._partial is not None:
                # Anything else, and the frames of a message in several: the codec's.
                self._settle_counts(frames, deliveries, last_seq)
                frames = deliveries = 0
                conn.start = start
                conn.dispatch(size)
                start, end, buf = conn.start, conn.end, conn.buf
                if self._pending:
                    out += self._pending
                    self._pending = []
                last_seq = self.last_seq
                check = self.credit - half
                if self.error is not None:
                    break
                continue
            frames += 1
            deliveries += 1
            event = decode(conn.view[ours[2] : stop].tobytes())
            start = stop
            if event.seq is not None:
                last_seq = event.seq
            out.append(event)
        conn.start = start
        self._settle_counts(frames, deliveries, last_seq)

    def _settle_counts(self, frames: int, deliveries: int, last_seq: int | None) -> None:
        """What the session and the link count for the transfers taken here."""
        if frames:
            conn = self._conn
            conn.next_incoming_id += frames
            conn.incoming_window -= frames
            self._delivered(deliveries)
        self.last_seq = last_seq
