"""Events to Arrow record batches of the source schema (column by column, on executors)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from azure.eventhub import EventData

    from resources.spark_source._stats import SubRangeStats

# Annotations that have their own column; the rest go to systemProperties.
_SEQ = b"x-opt-sequence-number"
_OFFSET = b"x-opt-offset"
_TIME = b"x-opt-enqueued-time"
_PKEY = b"x-opt-partition-key"
_PUBLISHER = b"x-opt-publisher"
_COLUMN_ANNOTATIONS = frozenset({_SEQ, _OFFSET, _TIME, _PKEY, _PUBLISHER})
_MESSAGE_PROPERTIES = (
    "message_id",
    "user_id",
    "to",
    "subject",
    "reply_to",
    "correlation_id",
    "content_type",
    "content_encoding",
    "absolute_expiry_time",
    "creation_time",
    "group_id",
    "group_sequence",
    "reply_to_group_id",
)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _body_bytes(body: Any) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    if body is None:
        return b""
    if isinstance(body, list | tuple) or hasattr(body, "__next__"):
        parts = list(body)
        if all(isinstance(p, bytes | bytearray) for p in parts):
            return b"".join(parts)
        body = parts
    return json.dumps(body, default=str).encode("utf-8")


def _message_body(msg: Any) -> bytes:
    """The body's bytes; the usual event (one or more data sections) without a generator."""
    data = getattr(msg, "_data_body", None)  # azure-eventhub's data sections, when a data body
    if type(data) is list and data and all(type(d) is bytes for d in data):
        return data[0] if len(data) == 1 else b"".join(data)
    return _body_bytes(msg.body)


def _to_ms(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return int(value)


class _ArrowBuilder:
    """Accumulates events column by column and emits record batches of the source schema."""

    def __init__(self, partition_id: str, schema: pa.Schema) -> None:
        self.partition_id = partition_id
        self.schema = schema
        # What every batch flushed so far held (``resources.spark_source._stats``): events,
        # body bytes, first and last sequence number, the last event's offset, first and last
        # enqueued time (microseconds).
        self.rows = 0
        self.total_bytes = 0
        self.first_seq: int | None = None
        self.last_seq: int | None = None
        self.last_offset: str | None = None
        self.first_time: int | None = None
        self.last_time: int | None = None
        self._reset()

    def summary(self) -> SubRangeStats:
        """The statistics of every event flushed so far (``_stats.SubRangeStats``)."""
        return (
            self.rows,
            self.total_bytes,
            self.first_seq,
            self.last_seq,
            self.last_offset,
            self.first_time,
            self.last_time,
        )

    def _reset(self) -> None:
        self.body: list[bytes] = []
        self.body_bytes = 0
        self.offset: list[str | None] = []
        self.seq: list[int] = []
        self.time_us: list[int | None] = []
        self.publisher: list[str | None] = []
        self.pkey: list[str | None] = []
        self.props: list[list[tuple[str, str | None]]] = []
        self.sysprops: list[list[tuple[str, str | None]]] = []

    def __len__(self) -> int:
        return len(self.seq)

    def add(self, event: EventData, seq: int) -> None:
        """An ``EventData`` (the SDK's public receive)."""
        msg = event.raw_amqp_message
        self._add(
            _message_body(msg),
            msg.annotations or {},
            msg.application_properties,
            msg.properties,
            seq,
        )

    def add_message(self, message: Any, seq: int) -> None:
        """A raw AMQP message as the SDK's consumer decoded it (the fast path's)."""
        data = message.data
        if type(data) is list and len(data) == 1 and type(data[0]) is bytes:
            body = data[0]  # the usual event: one data section
        elif type(data) is list and data and all(type(d) is bytes for d in data):
            body = b"".join(data)
        elif data:
            body = _body_bytes(data)
        elif message.sequence:
            body = _body_bytes(message.sequence)
        else:
            body = _body_bytes(message.value)
        self._add(
            body,
            message.message_annotations or {},
            message.application_properties,
            message.properties,
            seq,
        )

    def _add(self, body: bytes, ann: Any, app: Any, mprops: Any, seq: int) -> None:
        self.body.append(body)
        self.body_bytes += len(body)
        self.seq.append(seq)
        offset = ann.get(_OFFSET)
        if type(offset) is bytes:  # as pyamqp decodes an AMQP string
            offset = offset.decode("utf-8", "replace")
        self.offset.append(offset if offset is None or type(offset) is str else _text(offset))
        when = ann.get(_TIME)
        ms = when if when is None or type(when) is int else _to_ms(when)
        self.time_us.append(None if ms is None else ms * 1000)
        publisher = ann.get(_PUBLISHER)
        self.publisher.append(None if publisher is None else _text(publisher))
        pkey = ann.get(_PKEY)
        self.pkey.append(None if pkey is None else _text(pkey))
        self.props.append([(_text(k) or "", _text(v)) for k, v in app.items()] if app else [])
        if len(ann) > len(_COLUMN_ANNOTATIONS) or not ann.keys() <= _COLUMN_ANNOTATIONS:
            sysprops = [
                (_text(k) or "", _text(v)) for k, v in ann.items() if k not in _COLUMN_ANNOTATIONS
            ]
        else:
            sysprops = []  # the usual event: every annotation has its own column
        if mprops is not None:
            for name in _MESSAGE_PROPERTIES:
                value = getattr(mprops, name, None)
                if value is not None:
                    sysprops.append((name.replace("_", "-"), _text(value)))
        self.sysprops.append(sysprops)

    def flush(self) -> pa.RecordBatch:
        import pyarrow as pa

        from resources.spark_source._arrow import (
            int64_array,
            map_array,
            repeated_string,
            varbinary_array,
        )

        n = len(self.seq)
        if n:
            self._count()
        fields = self.schema
        batch = pa.RecordBatch.from_arrays(
            [
                varbinary_array(self.body, fields.field("body").type),
                repeated_string(self.partition_id, n),
                varbinary_array(self.offset, pa.string()),
                int64_array(self.seq, pa.int64()),
                int64_array(self.time_us, fields.field("enqueuedTime").type),
                varbinary_array(self.publisher, pa.string()),
                varbinary_array(self.pkey, pa.string()),
                map_array(self.props, fields.field("properties").type),
                map_array(self.sysprops, fields.field("systemProperties").type),
            ],
            schema=fields,
        )
        self._reset()
        return batch

    def _count(self) -> None:
        """Add the pending events to :meth:`summary` (events arrive in sequence order)."""
        self.rows += len(self.seq)
        self.total_bytes += self.body_bytes
        if self.first_seq is None:
            self.first_seq = self.seq[0]
        self.last_seq = self.seq[-1]
        self.last_offset = self.offset[-1]
        times = [t for t in self.time_us if t is not None]
        if times:
            lo, hi = min(times), max(times)
            self.first_time = lo if self.first_time is None else min(self.first_time, lo)
            self.last_time = hi if self.last_time is None else max(self.last_time, hi)
