"""Events to Arrow record batches of the source schema (column by column, on executors)."""

from __future__ import annotations

import bisect
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from azure.eventhub import EventData

    from dagster_eventhub_ingest.resources.spark_source._stats import SubRangeStats

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


class ColumnRows:
    """Consecutive events of one partition laid out as Arrow's buffers by the native step.

    What :func:`dagster_eventhub_ingest.resources.spark_source._native.amqp_columns`'s ``scan``
    returns for a run of plain transfer frames: the sequence numbers and enqueued times (64-bit,
    little-endian), the body and the three string columns (32-bit offsets and values, a validity
    bitmap or None), whether the sequence numbers go up by one, and the two maps (``properties``:
    application properties; ``systemProperties``: annotations without a column, then message
    properties), their values as the Python path's ``_text`` writes them.
    """

    __slots__ = (
        "_batch",
        "body",
        "body_bytes",
        "body_offsets",
        "contiguous",
        "first_seq",
        "last_seq",
        "offset",
        "partition_key",
        "properties",
        "publisher",
        "rows",
        "seq",
        "system_properties",
        "time",
        "time_valid",
    )

    def __init__(self, columns: dict[str, Any]) -> None:
        self.rows: int = columns["rows"]
        self.first_seq: int = columns["first_seq"]
        self.last_seq: int = columns["last_seq"]
        self.contiguous: bool = columns["contiguous"]
        self.body_bytes: int = columns["body_bytes"]
        self.seq: bytes = columns["seq"]
        self.time: bytes = columns["time"]
        self.time_valid: bytes | None = columns["time_valid"]
        self.body_offsets: bytes = columns["body_offsets"]
        self.body: bytes = columns["body"]
        self.offset: tuple[bytes, bytes, bytes | None] = columns["offset"]
        self.partition_key: tuple[bytes, bytes, bytes | None] = columns["partition_key"]
        self.publisher: tuple[bytes, bytes, bytes | None] = columns["publisher"]
        # Maps: offsets, key offsets, keys, value offsets, values, values' validity or None.
        self.properties: tuple[bytes, ...] = columns["properties"]
        self.system_properties: tuple[bytes, ...] = columns["system_properties"]
        self._batch: pa.RecordBatch | None = None

    def __repr__(self) -> str:
        return f"ColumnRows({self.rows} events, sequence numbers {self.first_seq}-{self.last_seq})"

    def sequence_numbers(self) -> list[int]:
        return memoryview(self.seq).cast("q").tolist()

    def segments(self) -> list[tuple[int, int, int]]:
        """Row ranges ``[a, b)`` whose sequence numbers go up by one from the third item (one
        range, unless the service redelivered)."""
        if self.contiguous:
            return [(0, self.rows, self.first_seq)]
        seqs = self.sequence_numbers()
        out, a = [], 0
        for i in range(1, len(seqs)):
            if seqs[i] != seqs[i - 1] + 1:
                out.append((a, i, seqs[a]))
                a = i
        out.append((a, len(seqs), seqs[a]))
        return out

    def rows_reaching(self, a: int, b: int, size: int) -> int:
        """The end of the rows from ``a`` whose bodies first reach ``size`` bytes, at most ``b``."""
        offsets = memoryview(self.body_offsets).cast("i")
        return min(b, bisect.bisect_left(offsets, offsets[a] + max(size, 1), a + 1, b + 1))

    def body_bytes_of(self, a: int, b: int) -> int:
        offsets = memoryview(self.body_offsets).cast("i")
        return int(offsets[b] - offsets[a])

    def record_batch(self, partition_id: str, schema: pa.Schema) -> pa.RecordBatch:
        """The rows as a record batch of the source schema (built once)."""
        if self._batch is None:
            import pyarrow as pa

            from dagster_eventhub_ingest.resources.spark_source._arrow import (
                map_array_of_buffers,
                repeated_string,
                string_array_of_buffers,
            )

            n = self.rows
            props_type = schema.field("properties").type
            system_type = schema.field("systemProperties").type
            props = map_array_of_buffers(n, self.properties, props_type)
            # The usual run has neither: one empty map array serves both columns.
            system = (
                props
                if self.system_properties == self.properties and system_type == props_type
                else map_array_of_buffers(n, self.system_properties, system_type)
            )
            self._batch = pa.RecordBatch.from_arrays(
                [
                    string_array_of_buffers(
                        n, self.body_offsets, self.body, None, schema.field("body").type
                    ),
                    repeated_string(partition_id, n),
                    string_array_of_buffers(n, *self.offset),
                    pa.Array.from_buffers(
                        pa.int64(), n, [None, pa.py_buffer(self.seq)], null_count=0
                    ),
                    pa.Array.from_buffers(
                        schema.field("enqueuedTime").type,
                        n,
                        [
                            None if self.time_valid is None else pa.py_buffer(self.time_valid),
                            pa.py_buffer(self.time),
                        ],
                        null_count=0 if self.time_valid is None else -1,
                    ),
                    string_array_of_buffers(n, *self.publisher),
                    string_array_of_buffers(n, *self.partition_key),
                    props,
                    system,
                ],
                schema=schema,
            )
        return self._batch


class _ArrowBuilder:
    """Accumulates events column by column and emits record batches of the source schema."""

    def __init__(self, partition_id: str, schema: pa.Schema) -> None:
        self.partition_id = partition_id
        self.schema = schema
        # What every batch flushed so far held
        # (``dagster_eventhub_ingest.resources.spark_source._stats``): events, body bytes, first and
        # last sequence number, the last event's offset, first and last enqueued time
        # (microseconds).
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
        self._reset_lists()
        # What goes into the next batch, in arrival order: rows [a, b) of a native run
        # (ColumnRows, a, b), or of the events added one by one (None, a, b). Events added one
        # by one after the last segment are not in it yet (the per-event path stays as cheap).
        self._segments: list[tuple[ColumnRows | None, int, int]] = []
        self._listed = 0
        self._piece_rows = 0
        self.body_bytes = 0

    def _reset_lists(self) -> None:
        self.body: list[bytes] = []
        self.offset: list[str | None] = []
        self.seq: list[int] = []
        self.time_us: list[int | None] = []
        self.publisher: list[str | None] = []
        self.pkey: list[str | None] = []
        self.props: list[list[tuple[str, str | None]]] = []
        self.sysprops: list[list[tuple[str, str | None]]] = []

    def __len__(self) -> int:
        return len(self.seq) + self._piece_rows

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

    def add_rows(self, rows: ColumnRows, a: int = 0, b: int | None = None) -> None:
        """Rows ``[a, b)`` of a native run (all of it by default), after what was added before.

        Only noted here: the batch is laid out once, at :meth:`flush`.
        """
        b = rows.rows if b is None else b
        if b <= a:
            return
        listed = len(self.seq)
        if listed > self._listed:  # events added one by one since the last run come first
            self._segments.append((None, self._listed, listed))
            self._listed = listed
        self._segments.append((rows, a, b))
        self._piece_rows += b - a
        self.body_bytes += (
            rows.body_bytes if a == 0 and b == rows.rows else rows.body_bytes_of(a, b)
        )

    def flush(self) -> pa.RecordBatch:
        """One record batch of everything added since the last flush, in the order added."""
        segments = self._segments
        listed = len(self.seq)
        lists = self._lists_batch() if listed or not segments else None
        if not segments:
            batch = lists
        else:
            import pyarrow as pa

            if listed > self._listed:
                segments.append((None, self._listed, listed))
            pieces = []
            for rows, a, b in segments:
                whole = lists if rows is None else rows.record_batch(self.partition_id, self.schema)
                assert whole is not None  # events added one by one made the lists' batch
                pieces.append(whole if a == 0 and b == whole.num_rows else whole.slice(a, b - a))
            batch = pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)
        self._count(batch)
        self._reset()
        return batch

    def _lists_batch(self) -> pa.RecordBatch:
        """The events added one by one, as a batch of the source schema."""
        import pyarrow as pa

        from dagster_eventhub_ingest.resources.spark_source._arrow import (
            int64_array,
            map_array,
            repeated_string,
            varbinary_array,
        )

        n = len(self.seq)
        fields = self.schema
        return pa.RecordBatch.from_arrays(
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

    def _count(self, batch: pa.RecordBatch) -> None:
        """Add a flushed batch to :meth:`summary` (events arrive in sequence order)."""
        n = batch.num_rows
        if not n:
            return
        import pyarrow.compute as pc

        self.rows += n
        self.total_bytes += self.body_bytes
        seq = batch.column(3)
        if self.first_seq is None:
            self.first_seq = seq[0].as_py()
        self.last_seq = seq[n - 1].as_py()
        self.last_offset = batch.column(2)[n - 1].as_py()
        bounds = pc.min_max(batch.column(4).cast("int64"))
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        if lo is not None:
            self.first_time = lo if self.first_time is None else min(self.first_time, lo)
            self.last_time = hi if self.last_time is None else max(self.last_time, hi)
