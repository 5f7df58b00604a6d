"""Events to Arrow record batches of the source schema (column by column, on executors)."""

from __future__ import annotations

import bisect
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dagster_eventhub_ingest.resources.eventhubs_source.message import (
    _OFFSET,
    _PKEY,
    _PUBLISHER,
    _SEQ,
    _TIME,
    MESSAGE_PROPERTY_NAMES,
    TIME_MAX_MS,
    TIME_MIN_MS,
    Event,
)
from dagster_eventhub_ingest.resources.eventhubs_source.values import text_of

if TYPE_CHECKING:
    import pyarrow as pa
    from azure.eventhub import EventData

    from dagster_eventhub_ingest.resources.eventhubs_source.stats import SubRangeStats

# The SDK's names of the message properties (``AmqpMessageProperties``), in field order: what
# its public receive's events have (MESSAGE_PROPERTY_NAMES are the connector's).
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
# Annotations removed from systemProperties (they have their own column), as the connector does.
_DROPPED_ANNOTATIONS = frozenset({_SEQ, _OFFSET, _TIME})


def _ms(value: Any) -> int | None:
    """Milliseconds of an enqueued time as the SDK decoded it (an int, or a datetime)."""
    if isinstance(value, datetime):
        value = int(value.timestamp() * 1000)
    if type(value) is not int or not TIME_MIN_MS <= value <= TIME_MAX_MS:
        return None
    return value


def _column_text(value: Any) -> str | None:
    return None if value is None else text_of(value)


def _sdk_other_body(sequence: Any, value: Any, has_value: bool) -> bytes | None:
    """amqp-sequence / amqp-value sections re-encoded from what the SDK decoded (its public
    receive keeps no bytes: strings come back as binary there)."""
    if not sequence and not has_value:
        return None
    from dagster_eventhub_ingest.resources.amqp.framing import encode_section

    sections = [(0x76, part) for part in sequence or ()]
    if has_value:
        sections.append((0x77, value))
    return b"".join(encode_section(code, part) for code, part in sections)


def _sdk_row(data: Any, other_body: bytes | None, ann: Any, app: Any, mprops: Any) -> Event:
    """An :class:`Event` of a message the SDK decoded (see :func:`.values.text_of`)."""
    ev = Event()
    if data:
        parts = [bytes(d) for d in data]
        ev.body = parts[0] if len(parts) == 1 else b"".join(parts)
    ev.amqp_body = other_body
    ann = ann or {}
    seq = ann.get(_SEQ)
    ev.seq = seq if type(seq) is int else None
    ev.offset = _column_text(ann.get(_OFFSET))
    ev.time_ms = _ms(ann.get(_TIME))
    ev.publisher = _column_text(ann.get(_PUBLISHER))
    ev.partition_key = _column_text(ann.get(_PKEY))
    if app:
        ev.properties = [(text_of(k), text_of(v)) for k, v in app.items()]
    ev.system_properties = [
        (text_of(k), text_of(v)) for k, v in ann.items() if k not in _DROPPED_ANNOTATIONS
    ]
    if mprops is not None:
        for name, own in zip(_MESSAGE_PROPERTIES, MESSAGE_PROPERTY_NAMES, strict=True):
            value = getattr(mprops, name, None)
            if value is not None:
                ev.system_properties.append((own, text_of(value)))
    return ev


class ColumnRows:
    """Consecutive events of one partition laid out as Arrow's buffers by the native step.

    What :func:`~dagster_eventhub_ingest.resources.eventhubs_source.fastpath.loader.amqp_columns`'s
    ``scan`` returns for a run of plain transfer frames: the sequence numbers and enqueued times
    (64-bit, little-endian), the body and the three string columns (32-bit offsets and values, a
    validity bitmap or None), whether the sequence numbers go up by one, and the two maps
    (``properties``: application properties; ``systemProperties``: annotations but the three
    dropped, then message properties), their texts as :mod:`.values` writes them. The native step
    takes data bodies only: ``amqpBody`` is null in every row.
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

            from dagster_eventhub_ingest.resources.eventhubs_source.arrow import (
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
                    pa.nulls(n, schema.field("amqpBody").type),
                ],
                schema=schema,
            )
        return self._batch


class ArrowBuilder:
    """Accumulates events column by column and emits record batches of the source schema."""

    def __init__(self, partition_id: str, schema: pa.Schema) -> None:
        self.partition_id = partition_id
        self.schema = schema
        # What every batch flushed so far held
        # (:mod:`.stats`): events, body bytes, first and
        # last sequence number, the last event's offset, first and last enqueued time
        # (microseconds).
        self.rows = 0
        self.total_bytes = 0
        self.first_seq: int | None = None
        self.last_seq: int | None = None
        self.last_offset: str | None = None
        self.first_time: int | None = None
        self.last_time: int | None = None
        #: Sequence numbers of events the reader logs, with what is unusual about them
        #: (``Event.unusual``); the reader takes them as it goes.
        self.unusual: list[tuple[int, str]] = []
        self._reset()

    def summary(self) -> SubRangeStats:
        """The statistics of every event flushed so far (``stats.SubRangeStats``)."""
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
        self.body: list[bytes | None] = []
        self.amqp_body: list[bytes | None] = []
        self.offset: list[str | None] = []
        self.seq: list[int] = []
        self.time_us: list[int | None] = []
        self.publisher: list[str | None] = []
        self.pkey: list[str | None] = []
        self.props: list[list[tuple[str, str]]] = []
        self.sysprops: list[list[tuple[str, str]]] = []

    def __len__(self) -> int:
        return len(self.seq) + self._piece_rows

    def add(self, event: EventData, seq: int) -> None:
        """An ``EventData`` (the SDK's public receive: values as the SDK decoded them)."""
        msg = event.raw_amqp_message
        from azure.eventhub.amqp import AmqpMessageBodyType

        kind = msg.body_type
        data = getattr(msg, "_data_body", None) if kind == AmqpMessageBodyType.DATA else None
        other = None
        if kind == AmqpMessageBodyType.SEQUENCE:
            other = _sdk_other_body(list(msg.body), None, False)
        elif kind == AmqpMessageBodyType.VALUE and msg.body is not None:
            # (the SDK gives no body as a null value: told apart from a null value only by
            # the bytes, which this path does not have)
            other = _sdk_other_body(None, msg.body, True)
        self.add_event(
            _sdk_row(data, other, msg.annotations, msg.application_properties, msg.properties),
            seq,
        )

    def add_event(self, event: Event, seq: int) -> None:
        """One decoded event (:func:`.message.decode_event`)."""
        body = event.body
        self.body.append(body)
        if body is not None:
            self.body_bytes += len(body)
        self.amqp_body.append(event.amqp_body)
        self.seq.append(seq)
        self.offset.append(event.offset)
        ms = event.time_ms
        self.time_us.append(None if ms is None else ms * 1000)
        self.publisher.append(event.publisher)
        self.pkey.append(event.partition_key)
        self.props.append(event.properties)
        self.sysprops.append(event.system_properties)
        if event.amqp_body is not None:
            why = event.unusual
            if why is not None:
                self.unusual.append((seq, why))

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
            from dagster_eventhub_ingest.resources.eventhubs_source.arrow import concat_batches

            if listed > self._listed:
                segments.append((None, self._listed, listed))
            pieces = []
            for rows, a, b in segments:
                whole = lists if rows is None else rows.record_batch(self.partition_id, self.schema)
                assert whole is not None  # events added one by one made the lists' batch
                pieces.append(whole if a == 0 and b == whole.num_rows else whole.slice(a, b - a))
            batch = pieces[0] if len(pieces) == 1 else concat_batches(pieces)
        self._count(batch)
        self._reset()
        return batch

    def _lists_batch(self) -> pa.RecordBatch:
        """The events added one by one, as a batch of the source schema."""
        import pyarrow as pa

        from dagster_eventhub_ingest.resources.eventhubs_source.arrow import (
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
                varbinary_array(self.amqp_body, fields.field("amqpBody").type),
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
