"""The ``eventhubs`` PySpark data source: exact, bounded sequence-number ranges as a DataFrame.

Usage::

    register_eventhubs_source(spark)
    df = (
        spark.read.format("eventhubs")
        .option("connection_string", conn)  # or fully_qualified_namespace + credential_type
        .option("eventhub_name", "telemetry")
        .option("ranges", '{"0": [100, 199], "1": [0, 49]}')  # inclusive; or positions:
        # .option("starting_position", "earliest").option("ending_position", "latest")
        .load()
    )

How it reads (see docs/spark_source.md):

* Everything that talks to the service before reading happens when the DataFrame is created
  (``load()``, in Spark's planner worker on the driver): options are validated, positions are
  resolved to sequence numbers from ``get_partition_properties`` (and, for offsets and enqueued
  times, one probe receive), explicit ranges are checked against the partition ids and the
  retained sequence numbers. The resolved ranges are stored in the pickled data source, so every
  action on the same DataFrame reads exactly the same events, even if ``latest`` moved on.
* Each range becomes up to ``max_readers_per_partition`` input partitions (sub-ranges). A task
  creates its own ``EventHubConsumerClient`` inside ``read()`` (only the frozen
  :class:`~resources.settings.EventHubSettings` and the range are pickled), receives from the
  start sequence number inclusive until the end sequence number, and yields Arrow record batches.
* A sequence number that cannot be read (expired by retention, or a gap) raises
  :class:`~resources.errors.DataLossError` naming partition and range, unless
  ``on_data_loss=skip``: then the readable part is read, and the driver learns the skipped parts
  from :attr:`ReadPlan.gaps` (retention, known before reading) or from the write statistics
  (an event count below the range size, see ``ops.write``).
"""

from __future__ import annotations

import json
import logging
import math
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from resources.errors import (
    ConfigurationError,
    DataLossError,
    EventHubIngestError,
    EventHubUnavailableError,
    RangeError,
    redact,
)
from resources.settings import EVENT_COLUMNS, EventHubSettings

if TYPE_CHECKING:
    import pyarrow as pa
    from azure.eventhub import EventData, EventHubConsumerClient
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "EVENT_COLUMNS",
    "SOURCE_NAME",
    "DataGap",
    "EventHubsDataSource",
    "EventHubsInputPartition",
    "EventPosition",
    "PartitionInfo",
    "PartitionRange",
    "ReadOptions",
    "ReadPlan",
    "eventhubs_schema",
    "fetch_partition_info",
    "plan_read",
    "read_eventhubs",
    "read_range",
    "register_eventhubs_source",
    "split_range",
]

logger = logging.getLogger(__name__)

SOURCE_NAME = "eventhubs"


OnDataLoss = Literal["fail", "skip"]
PositionKind = Literal["earliest", "latest", "sequence_number", "offset", "enqueued_time"]

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

# Rows per Arrow batch handed to Spark: large enough to amortise the JVM hand-off, small enough
# that a task holds a few MB at a time.
_BATCH_ROWS = 8192


def eventhubs_schema() -> StructType:
    """The DataFrame schema of the ``eventhubs`` source (azure-event-hubs-spark column names)."""
    from pyspark.sql.types import (
        BinaryType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("body", BinaryType()),
            StructField("partition", StringType()),
            StructField("offset", StringType()),
            StructField("sequenceNumber", LongType()),
            StructField("enqueuedTime", TimestampType()),
            StructField("publisher", StringType()),
            StructField("partitionKey", StringType()),
            StructField("properties", MapType(StringType(), StringType())),
            StructField("systemProperties", MapType(StringType(), StringType())),
        ]
    )


# --------------------------------------------------------------------------------------------
# Plain values: ranges, positions, options
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class PartitionRange:
    """An inclusive sequence-number range ``[start, end]`` of one Event Hub partition."""

    partition_id: str
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0:
            raise RangeError(
                f"partition {self.partition_id!r}: start sequence number {self.start} is "
                "negative; sequence numbers start at 0"
            )
        if self.end < self.start:
            raise RangeError(
                f"partition {self.partition_id!r}: end {self.end} is before start "
                f"{self.start}; ranges are inclusive [start, end] with end >= start"
            )

    @property
    def count(self) -> int:
        """Number of sequence numbers in the range."""
        return self.end - self.start + 1

    def __str__(self) -> str:
        return f"partition {self.partition_id} [{self.start}, {self.end}]"


@dataclass(frozen=True)
class DataGap:
    """Sequence numbers of a requested range that could not be read (``on_data_loss=skip``)."""

    partition_id: str
    start: int
    end: int
    reason: str


@dataclass(frozen=True)
class EventPosition:
    """A starting or ending position, parsed from an option string.

    Accepted forms: ``earliest``, ``latest``, a sequence number (``1234`` or ``seq:1234``),
    an offset (``offset:<offset>``) and an enqueued time (``enqueued:2024-05-01T12:00:00Z``,
    ISO 8601, UTC if no zone is given).
    """

    kind: PositionKind
    value: int | str | datetime | None = None

    VALID_FORMS = (
        "'earliest', 'latest', a sequence number ('1234' or 'seq:1234'), 'offset:<offset>', "
        "'enqueued:<ISO 8601 time>'"
    )

    @classmethod
    def parse(cls, text: str, option: str) -> EventPosition:
        """Parse ``text``; the error names ``option``, the value and the valid forms."""
        raw = text.strip()
        low = raw.lower()
        try:
            if low in ("earliest", "-1", "@earliest"):
                return cls("earliest")
            if low in ("latest", "@latest"):
                return cls("latest")
            if low.startswith(("seq:", "sequence_number:", "sequencenumber:")):
                return cls._seq(raw.split(":", 1)[1])
            if low.lstrip("+").isdigit():
                return cls._seq(raw)
            if low.startswith("offset:"):
                value = raw.split(":", 1)[1].strip()
                if not value:
                    raise ValueError("empty offset")
                return cls("offset", value)
            if low.startswith(("enqueued:", "enqueued_time:", "enqueuedtime:", "time:")):
                stamp = raw.split(":", 1)[1].strip()
                when = datetime.fromisoformat(stamp.replace("Z", "+00:00").replace("z", "+00:00"))
                if when.tzinfo is None:
                    when = when.replace(tzinfo=UTC)
                return cls("enqueued_time", when.astimezone(UTC))
        except ValueError as exc:
            raise ConfigurationError(
                f"{option}: {text!r} is not a valid position ({exc}); valid: {cls.VALID_FORMS}"
            ) from exc
        raise ConfigurationError(
            f"{option}: {text!r} is not a valid position; valid: {cls.VALID_FORMS}"
        )

    @classmethod
    def _seq(cls, text: str) -> EventPosition:
        number = int(text.strip())
        if number < 0:
            raise ValueError("sequence numbers are >= 0")
        return cls("sequence_number", number)

    def __str__(self) -> str:
        if self.kind in ("earliest", "latest"):
            return self.kind
        if self.kind == "sequence_number":
            return f"seq:{self.value}"
        if self.kind == "offset":
            return f"offset:{self.value}"
        assert isinstance(self.value, datetime)
        return f"enqueued:{self.value.isoformat()}"


_OPTION_NAMES = (
    "connection_string",
    "eventhub_name",
    "consumer_group",
    "fully_qualified_namespace",
    "credential_type",
    "credential_options",
    "ranges",
    "starting_position",
    "ending_position",
    "partition_ids",
    "receive_timeout",
    "prefetch",
    "max_readers_per_partition",
    "min_events_per_reader",
    "on_data_loss",
)
# Spellings users bring from azure-event-hubs-spark or camelCase habits.
_OPTION_ALIASES = {
    "connectionstring": "connection_string",
    "hub": "eventhub_name",
    "eventhub": "eventhub_name",
    "eventhubname": "eventhub_name",
    "name": "eventhub_name",
    "consumergroup": "consumer_group",
    "fullyqualifiednamespace": "fully_qualified_namespace",
    "namespace": "fully_qualified_namespace",
    "credentialtype": "credential_type",
    "credentialoptions": "credential_options",
    "startingposition": "starting_position",
    "endingposition": "ending_position",
    "partitionids": "partition_ids",
    "receivetimeout": "receive_timeout",
    "maxreaderspartition": "max_readers_per_partition",
    "maxreadersperpartition": "max_readers_per_partition",
    "mineventsperreader": "min_events_per_reader",
    "ondataloss": "on_data_loss",
}

MAX_READERS_PER_PARTITION = 5


@dataclass(frozen=True)
class ReadOptions:
    """The validated options of one read; small, frozen and picklable.

    Either ``ranges`` (partition id -> inclusive range) or positions (defaults: ``earliest`` to
    ``latest``), optionally limited to ``partition_ids``.
    """

    settings: EventHubSettings
    ranges: tuple[PartitionRange, ...] | None = None
    starting_position: EventPosition = field(default_factory=lambda: EventPosition("earliest"))
    ending_position: EventPosition = field(default_factory=lambda: EventPosition("latest"))
    partition_ids: tuple[str, ...] | None = None
    receive_timeout: float = 30.0
    prefetch: int = 300
    max_readers_per_partition: int = 1
    min_events_per_reader: int = 10_000
    on_data_loss: OnDataLoss = "fail"

    def __post_init__(self) -> None:
        if not (isinstance(self.receive_timeout, int | float) and self.receive_timeout > 0):
            raise ConfigurationError(
                f"receive_timeout: {self.receive_timeout!r} must be a number of seconds > 0"
            )
        if not (isinstance(self.prefetch, int) and 1 <= self.prefetch <= 10_000):
            raise ConfigurationError(f"prefetch: {self.prefetch!r} must be an integer 1..10000")
        mr = self.max_readers_per_partition
        if not (isinstance(mr, int) and 1 <= mr <= MAX_READERS_PER_PARTITION):
            raise ConfigurationError(
                f"max_readers_per_partition: {mr!r} must be an integer "
                f"1..{MAX_READERS_PER_PARTITION} (Event Hubs allows 5 readers per partition "
                "and consumer group)"
            )
        if not (isinstance(self.min_events_per_reader, int) and self.min_events_per_reader >= 1):
            raise ConfigurationError(
                f"min_events_per_reader: {self.min_events_per_reader!r} must be an integer >= 1"
            )
        if self.on_data_loss not in ("fail", "skip"):
            raise ConfigurationError(
                f"on_data_loss: {self.on_data_loss!r} is not valid; valid: 'fail', 'skip'"
            )
        if self.ranges is not None:
            seen: set[str] = set()
            for rng in self.ranges:
                if rng.partition_id in seen:
                    raise RangeError(f"ranges: partition {rng.partition_id!r} given twice")
                seen.add(rng.partition_id)
            if self.partition_ids is not None:
                raise ConfigurationError(
                    "partition_ids: not allowed together with ranges (ranges already names "
                    "the partitions)"
                )

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ReadOptions:
        """Validate Spark reader options; every error names the option, its value, what's valid.

        Option keys are case-insensitive; an ``eventhubs.`` prefix and camelCase spellings are
        accepted. Secrets never appear in errors.
        """
        opts: dict[str, str] = {}
        for key, value in options.items():
            name = _canonical_option(key)
            if name is None:
                raise ConfigurationError(
                    f"eventhubs source: unknown option {key!r}; valid options: "
                    + ", ".join(_OPTION_NAMES)
                )
            opts[name] = value
        if "eventhub_name" not in opts:
            raise ConfigurationError(
                "eventhub_name: required (the Event Hub to read), e.g. "
                ".option('eventhub_name', 'telemetry')"
            )
        settings_kwargs: dict[str, Any] = {"eventhub_name": opts["eventhub_name"]}
        for name in ("consumer_group", "connection_string", "fully_qualified_namespace"):
            if name in opts:
                settings_kwargs[name] = opts[name]
        if "credential_type" in opts:
            settings_kwargs["credential_type"] = opts["credential_type"]
        elif "connection_string" not in opts and "fully_qualified_namespace" in opts:
            settings_kwargs["credential_type"] = "default_azure_credential"
        if "credential_options" in opts:
            # DefaultAzureCredential options (resources.config.IdentityOptions), as JSON.
            try:
                pairs = json.loads(opts["credential_options"])
                settings_kwargs["credential_options"] = tuple(
                    (str(k), v) for k, v in dict(pairs).items()
                )
            except (ValueError, TypeError):
                raise ConfigurationError(
                    f"credential_options: {opts['credential_options']!r} is not a JSON object "
                    "of DefaultAzureCredential options, e.g. "
                    '{"managed_identity_client_id": "<client id>"}'
                ) from None
        settings = EventHubSettings(**settings_kwargs)

        kwargs: dict[str, Any] = {"settings": settings}
        if "ranges" in opts:
            if "starting_position" in opts or "ending_position" in opts:
                raise ConfigurationError(
                    "ranges: give either ranges or starting_position/ending_position, not both"
                )
            kwargs["ranges"] = parse_ranges(opts["ranges"])
        if "starting_position" in opts:
            kwargs["starting_position"] = EventPosition.parse(
                opts["starting_position"], "starting_position"
            )
        if "ending_position" in opts:
            kwargs["ending_position"] = EventPosition.parse(
                opts["ending_position"], "ending_position"
            )
        if "partition_ids" in opts:
            ids = tuple(p.strip() for p in opts["partition_ids"].split(",") if p.strip())
            if not ids:
                raise ConfigurationError(
                    f"partition_ids: {opts['partition_ids']!r} names no partition; give a "
                    "comma-separated list such as '0,1,2'"
                )
            kwargs["partition_ids"] = ids
        if "receive_timeout" in opts:
            kwargs["receive_timeout"] = _number(opts["receive_timeout"], "receive_timeout", float)
        for name in ("prefetch", "max_readers_per_partition", "min_events_per_reader"):
            if name in opts:
                kwargs[name] = _number(opts[name], name, int)
        if "on_data_loss" in opts:
            kwargs["on_data_loss"] = opts["on_data_loss"].strip().lower()
        return cls(**kwargs)

    def to_options(self) -> dict[str, str]:
        """The Spark reader options that reproduce these options (holds the secret, if any)."""
        s = self.settings
        out: dict[str, str] = {
            "eventhub_name": s.eventhub_name,
            "consumer_group": s.consumer_group,
            "credential_type": s.credential_type,
            "receive_timeout": repr(float(self.receive_timeout)),
            "prefetch": str(self.prefetch),
            "max_readers_per_partition": str(self.max_readers_per_partition),
            "min_events_per_reader": str(self.min_events_per_reader),
            "on_data_loss": self.on_data_loss,
        }
        if s.connection_string:
            out["connection_string"] = s.connection_string
        if s.fully_qualified_namespace:
            out["fully_qualified_namespace"] = s.fully_qualified_namespace
        if s.credential_options:
            out["credential_options"] = json.dumps(dict(s.credential_options))
        if self.ranges is not None:
            out["ranges"] = json.dumps({r.partition_id: [r.start, r.end] for r in self.ranges})
        else:
            out["starting_position"] = str(self.starting_position)
            out["ending_position"] = str(self.ending_position)
            if self.partition_ids is not None:
                out["partition_ids"] = ",".join(self.partition_ids)
        return out


def _canonical_option(key: str) -> str | None:
    low = key.strip().lower()
    if low.startswith("eventhubs."):
        low = low[len("eventhubs.") :]
    if low in _OPTION_NAMES:
        return low
    return _OPTION_ALIASES.get(low.replace("_", "").replace("-", ""))


def _number(text: str, option: str, kind: type[int] | type[float]) -> Any:
    try:
        return kind(text.strip())
    except (TypeError, ValueError) as exc:
        what = "an integer" if kind is int else "a number"
        raise ConfigurationError(f"{option}: {text!r} is not {what}") from exc


def parse_ranges(text: str) -> tuple[PartitionRange, ...]:
    """Parse the ``ranges`` option: JSON ``{"0": [start, end], ...}``, inclusive sequence numbers.

    Raises:
        ConfigurationError: not that JSON shape (the message shows the expected form).
        RangeError: a range ends before it starts or is negative.
    """
    example = '{"0": [100, 199], "1": [0, 49]}'
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"ranges: {text!r} is not JSON ({exc.msg}); expected e.g. {example}"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigurationError(
            f"ranges: {text!r} must be a JSON object of partition id -> "
            f"[start, end], e.g. {example}"
        )
    out = []
    for pid, bounds in data.items():
        ok = (
            isinstance(bounds, list | tuple)
            and len(bounds) == 2
            and all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
        )
        if not ok:
            raise ConfigurationError(
                f"ranges: partition {pid!r} has {bounds!r}; expected [start_sequence_number, "
                f"end_sequence_number] (two integers, inclusive), e.g. {example}"
            )
        out.append(PartitionRange(str(pid), int(bounds[0]), int(bounds[1])))
    return tuple(sorted(out, key=lambda r: _pid_key(r.partition_id)))


def _pid_key(pid: str) -> tuple[int, str]:
    return (int(pid), pid) if pid.isdigit() else (1 << 62, pid)


def split_range(
    rng: PartitionRange, max_readers: int, min_events_per_reader: int
) -> list[PartitionRange]:
    """Split ``rng`` into at most ``max_readers`` contiguous sub-ranges of near-equal size.

    A sub-range is never smaller than ``min_events_per_reader`` (except when the whole range is):
    a reader costs a connection and a link, which only pays off for large ranges.
    """
    readers = max(1, min(max_readers, rng.count // max(1, min_events_per_reader)))
    size = math.ceil(rng.count / readers)
    out = []
    start = rng.start
    while start <= rng.end:
        end = min(rng.end, start + size - 1)
        out.append(PartitionRange(rng.partition_id, start, end))
        start = end + 1
    return out


# --------------------------------------------------------------------------------------------
# Driver side: partition properties, position resolution, data-loss check
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionInfo:
    """What ``get_partition_properties`` says about one partition (no secrets)."""

    partition_id: str
    begin_sequence_number: int
    last_enqueued_sequence_number: int
    last_enqueued_offset: str
    last_enqueued_time: datetime | None
    is_empty: bool

    @property
    def first_available(self) -> int:
        """The first sequence number still readable (``last + 1`` when nothing is retained)."""
        if self.is_empty:
            return self.last_enqueued_sequence_number + 1
        return self.begin_sequence_number


def _unavailable(settings: EventHubSettings, what: str, exc: BaseException) -> EventHubIngestError:
    return EventHubUnavailableError(
        f"Event Hub {settings.eventhub_name!r} (consumer group {settings.consumer_group!r}): "
        f"{what} failed: {type(exc).__name__}: {redact(str(exc))}"
    )


def _partition_info(pid: str, props: Mapping[str, Any]) -> PartitionInfo:
    return PartitionInfo(
        partition_id=pid,
        begin_sequence_number=int(props["beginning_sequence_number"]),
        last_enqueued_sequence_number=int(props["last_enqueued_sequence_number"]),
        last_enqueued_offset=str(props["last_enqueued_offset"]),
        last_enqueued_time=props.get("last_enqueued_time_utc"),
        is_empty=bool(props["is_empty"]),
    )


def fetch_partition_info(
    settings: EventHubSettings,
    partition_ids: Sequence[str] | None = None,
    *,
    client: EventHubConsumerClient | None = None,
) -> tuple[list[str], dict[str, PartitionInfo]]:
    """Return the hub's partition ids and the properties of ``partition_ids`` (default: all).

    Every management call of the SDK opens its own AMQP connection with its own CBS handshake
    (0.5-1.5 s, mostly the SDK's 50 ms polls per handshake frame), so the calls run
    concurrently on one client: with ``partition_ids`` given, the id listing and every
    partition's properties are one round trip; without, two (ids, then properties).
    Properties of ids that turn out not to exist are left out (callers name them).
    """
    from concurrent.futures import Future, ThreadPoolExecutor

    own = client is None
    cl = client if client is not None else settings.consumer_client()
    wanted = list(dict.fromkeys(partition_ids)) if partition_ids is not None else None
    pool = ThreadPoolExecutor(
        max_workers=min(16, 1 + len(wanted or ())), thread_name_prefix="eventhubs-mgmt"
    )
    wait = True
    try:

        def props(pid: str) -> PartitionInfo:
            return _partition_info(pid, cl.get_partition_properties(pid))

        ids_future = pool.submit(cl.get_partition_ids)
        futures: dict[str, Future[PartitionInfo]] = {}
        if wanted is not None:
            futures = {pid: pool.submit(props, pid) for pid in wanted}
        try:
            all_ids = [str(p) for p in ids_future.result()]
        except Exception as exc:
            wait = False
            raise _unavailable(settings, "reading the partition ids", exc) from exc
        if wanted is None:
            wanted = all_ids
            futures = {pid: pool.submit(props, pid) for pid in wanted}
        elif any(pid not in all_ids for pid in wanted):
            # The properties call of an unknown id may be retrying; nobody needs its answer.
            wait = False
        infos: dict[str, PartitionInfo] = {}
        for pid, future in futures.items():
            if pid not in all_ids:
                continue
            try:
                infos[pid] = future.result()
            except Exception as exc:
                wait = False
                raise _unavailable(settings, f"properties of partition {pid}", exc) from exc
        return all_ids, infos
    finally:
        pool.shutdown(wait=wait, cancel_futures=not wait)
        if own:
            cl.close()


def input_partitions(
    ranges: Sequence[PartitionRange], options: ReadOptions
) -> list[EventHubsInputPartition]:
    """One input partition per sub-range of each range, batch or stream alike.

    At most ``max_readers_per_partition`` readers per range; a hole inside a range follows
    ``on_data_loss`` on the executor (the driver already decided about expired starts).
    """
    return [
        EventHubsInputPartition(
            settings=options.settings,
            rng=sub,
            receive_timeout=options.receive_timeout,
            prefetch=options.prefetch,
            on_data_loss=options.on_data_loss,
        )
        for rng in ranges
        for sub in split_range(
            rng, options.max_readers_per_partition, options.min_events_per_reader
        )
    ]


@dataclass(frozen=True)
class ReadPlan:
    """Resolved, validated ranges of one read; what the ``eventhubs`` DataFrame will contain.

    ``ranges`` are the readable parts only (empty partitions are left out); ``gaps`` are the
    parts skipped because of ``on_data_loss=skip`` (known before reading: retention).
    """

    options: ReadOptions
    ranges: tuple[PartitionRange, ...]
    gaps: tuple[DataGap, ...] = ()
    #: The ranges as asked for (positions resolved), before skipped parts were cut off.
    requested: tuple[PartitionRange, ...] = ()

    @property
    def settings(self) -> EventHubSettings:
        """The hub settings of this read."""
        return self.options.settings

    def ranges_dict(self) -> dict[str, tuple[int, int]]:
        """Partition id -> inclusive ``(start, end)`` of what will be read."""
        return {r.partition_id: (r.start, r.end) for r in self.ranges}

    def intent_ranges(self) -> dict[str, tuple[int, int]]:
        """Partition id -> the requested ``(start, end)``: the batch keys to write under.

        Equal to :meth:`ranges_dict` unless ``on_data_loss='skip'`` cut a lost part off; pass
        this to ``ops.write.write_batch`` so a replay of the same intent replaces the same
        batch even if more (or less) of it has expired since.
        """
        return {r.partition_id: (r.start, r.end) for r in (self.requested or self.ranges)}

    def input_partitions(self) -> list[EventHubsInputPartition]:
        """One input partition per sub-range (``max_readers_per_partition`` per range at most)."""
        return input_partitions(self.ranges, self.options)

    def spark_options(self) -> dict[str, str]:
        """Reader options with the resolved ranges, so ``load()`` reads exactly this plan."""
        if not self.ranges:
            # An empty plan: reading nothing must still be expressible.
            return {**replace(self.options, ranges=None).to_options(), "ranges": "{}"}
        return replace(self.options, ranges=self.ranges, partition_ids=None).to_options()


def plan_read(
    options: ReadOptions,
    *,
    client: EventHubConsumerClient | None = None,
) -> ReadPlan:
    """Resolve ``options`` to exact inclusive ranges and check them against the service.

    Runs on the driver. Positions become sequence numbers (``earliest`` -> the first retained,
    ``latest`` -> the last enqueued; a starting position is inclusive, an ending sequence number
    or offset is inclusive, an ending enqueued time is exclusive so consecutive windows never
    overlap). Explicit ranges must name existing partitions and end at or before the last
    enqueued sequence number.

    Raises:
        RangeError: unknown partition (the message lists the valid ids), range past the end.
        DataLossError: part of a range is no longer retained and ``on_data_loss='fail'``.
        EventHubUnavailableError: the service cannot be reached.
    """
    settings = options.settings
    own = client is None
    cl = client if client is not None else settings.consumer_client()
    try:
        if options.ranges is not None:
            wanted = [r.partition_id for r in options.ranges]
        else:
            wanted = list(options.partition_ids) if options.partition_ids else []
        # One round of concurrent management calls when the partitions are named.
        all_ids, infos = fetch_partition_info(settings, wanted or None, client=cl)
        unknown = [p for p in wanted if p not in all_ids]
        if unknown:
            option = "ranges" if options.ranges is not None else "partition_ids"
            raise RangeError(
                f"{option}: unknown partition {', '.join(repr(p) for p in unknown)} of Event Hub "
                f"{settings.eventhub_name!r}; valid partition ids: {', '.join(all_ids)}"
            )
        if options.ranges is not None:
            requested = list(options.ranges)
        else:
            requested = []
            for pid in wanted or all_ids:
                rng = _resolve_positions(options, infos[pid])
                if rng is not None:
                    requested.append(rng)
        ranges: list[PartitionRange] = []
        gaps: list[DataGap] = []
        for rng in requested:
            readable, gap = _check_retained(rng, infos[rng.partition_id], options)
            if gap is not None:
                gaps.append(gap)
            if readable is not None:
                ranges.append(readable)
        plan = ReadPlan(
            options=options, ranges=tuple(ranges), gaps=tuple(gaps), requested=tuple(requested)
        )
        logger.info(
            "planned read of Event Hub %s consumer group %s: %s%s",
            settings.eventhub_name,
            settings.consumer_group,
            ", ".join(str(r) for r in plan.ranges) or "nothing to read",
            f"; skipped {len(gaps)} gap(s)" if gaps else "",
        )
        return plan
    finally:
        if own:
            cl.close()


def _check_retained(
    rng: PartitionRange, info: PartitionInfo, options: ReadOptions
) -> tuple[PartitionRange | None, DataGap | None]:
    last = info.last_enqueued_sequence_number
    if rng.end > last:
        raise RangeError(
            f"{rng}: ends after the last enqueued sequence number {last} of partition "
            f"{rng.partition_id}; events past it do not exist yet (end at most {last})"
        )
    first = info.first_available
    if rng.start >= first:
        return rng, None
    lost_end = min(rng.end, first - 1)
    reason = (
        f"sequence numbers [{rng.start}, {lost_end}] of {rng} are no longer available: the "
        f"partition's first retained sequence number is {first} (expired by retention)"
    )
    if options.on_data_loss == "fail":
        raise DataLossError(
            f"{reason}; read from {first} instead, or set on_data_loss='skip' to read what is "
            "left and report the gap"
        )
    logger.warning(
        "Event Hub %s consumer group %s partition %s: skipping lost range: %s",
        options.settings.eventhub_name,
        options.settings.consumer_group,
        rng.partition_id,
        reason,
    )
    gap = DataGap(rng.partition_id, rng.start, lost_end, reason)
    if lost_end >= rng.end:
        return None, gap
    return PartitionRange(rng.partition_id, first, rng.end), gap


def _resolve_positions(options: ReadOptions, info: PartitionInfo) -> PartitionRange | None:
    start = _resolve_one(options, info, options.starting_position, ending=False)
    end = _resolve_one(options, info, options.ending_position, ending=True)
    end = min(end, info.last_enqueued_sequence_number)
    if end < start:
        return None
    return PartitionRange(info.partition_id, start, end)


def _resolve_one(
    options: ReadOptions,
    info: PartitionInfo,
    pos: EventPosition,
    *,
    ending: bool,
) -> int:
    last = info.last_enqueued_sequence_number
    if pos.kind == "earliest":
        return info.first_available if not ending else info.first_available - 1
    if pos.kind == "latest":
        return last if ending else last + 1
    if pos.kind == "sequence_number":
        assert isinstance(pos.value, int)
        return pos.value
    if info.is_empty:
        return last if ending else last + 1
    if pos.kind == "enqueued_time":
        assert isinstance(pos.value, datetime)
        if info.last_enqueued_time is not None and pos.value > info.last_enqueued_time:
            return last if ending else last + 1
        probe = _probe(options, info.partition_id, pos.value)
        if probe is None:
            return last if ending else last + 1
        # Starting: the first event at or after the time. Ending (exclusive): the one before it.
        return probe[0] - 1 if ending else probe[0]
    assert isinstance(pos.value, str)
    if pos.value == info.last_enqueued_offset:
        return last
    numeric = pos.value.isdigit() and info.last_enqueued_offset.isdigit()
    if numeric and int(pos.value) > int(info.last_enqueued_offset):
        return last if ending else last + 1
    probe = _probe(options, info.partition_id, pos.value)
    if probe is None:
        return last if ending else last + 1
    seq, offset = probe
    if ending:
        # Inclusive: the event at this offset, or the last one before it if the offset lies
        # between events.
        return seq if offset == pos.value else seq - 1
    return seq


def _probe(
    options: ReadOptions,
    partition_id: str,
    position: str | datetime,
) -> tuple[int, str] | None:
    """Sequence number and offset of the first event at or after ``position``, or None."""
    # A receiver has its own client (connection); the planning client keeps serving management.
    receiver = _BatchReceiver(
        options.settings,
        partition_id,
        starting_position=position,
        prefetch=1,
        max_batch_size=1,
        wait_seconds=min(options.receive_timeout, 10.0),
    )
    with receiver:
        for events in receiver:
            if not events:
                return None
            ann = events[0].raw_amqp_message.annotations or {}
            return int(ann[_SEQ]), _text(ann.get(_OFFSET)) or ""
    return None


# --------------------------------------------------------------------------------------------
# Executor side: bounded receive into Arrow batches
# --------------------------------------------------------------------------------------------


class _Done:
    """Sentinel: the receive thread ended."""


class _BatchReceiver:
    """Runs ``receive_batch`` in a thread and hands event lists over through a bounded queue.

    The SDK's receive is callback-driven and never returns on its own; a bounded read needs to
    stop at an exact sequence number and to yield from a generator, so the callback feeds a queue
    (a few batches deep: backpressure keeps a slow consumer from buffering the partition) and
    ``close()`` stops the client. An empty list means nothing arrived for ``wait_seconds``
    (measured here, between batches, including connection set-up).
    """

    def __init__(
        self,
        settings: EventHubSettings,
        partition_id: str,
        *,
        starting_position: int | str | datetime,
        prefetch: int,
        max_batch_size: int,
        wait_seconds: float,
    ) -> None:
        self._settings = settings
        self._partition_id = partition_id
        self._wait = wait_seconds
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=4)
        self._stop = threading.Event()
        self._closing = False
        self._client = settings.consumer_client()
        self._thread = threading.Thread(
            target=self._run,
            kwargs={
                "starting_position": starting_position,
                "prefetch": prefetch,
                "max_batch_size": max_batch_size,
            },
            name=f"eventhubs-receive-{partition_id}",
            daemon=True,
        )

    def __enter__(self) -> _BatchReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _run(self, **kwargs: Any) -> None:
        def on_batch(_ctx: Any, events: list[EventData]) -> None:
            if not self._stop.is_set():
                self._put(list(events))

        def on_error(_ctx: Any, exc: Exception) -> None:
            self._put(exc)
            self._stop.set()

        try:
            self._client.receive_batch(
                on_batch,
                partition_id=self._partition_id,
                starting_position=kwargs["starting_position"],
                starting_position_inclusive=True,
                max_batch_size=kwargs["max_batch_size"],
                # No SDK wait: with one it holds a partial batch back until the wait is over
                # (the tail of every range would cost a full receive_timeout). The queue's
                # timeout in __iter__ detects silence instead.
                max_wait_time=None,
                prefetch=kwargs["prefetch"],
                on_error=on_error,
            )
        except Exception as exc:
            self._put(exc)
        finally:
            self._put(_Done())

    def __iter__(self) -> Iterator[list[EventData]]:
        while True:
            try:
                item = self._queue.get(timeout=self._wait)
            except queue.Empty:
                item = []
            if isinstance(item, _Done):
                if self._stop.is_set():
                    return
                raise EventHubUnavailableError(
                    f"Event Hub {self._settings.eventhub_name!r} partition "
                    f"{self._partition_id}: the receiver stopped unexpectedly"
                )
            if isinstance(item, BaseException):
                raise _unavailable(
                    self._settings, f"receiving from partition {self._partition_id}", item
                ) from item
            yield item

    def close(self, *, wait: bool = True) -> None:
        """Stop receiving and close the client (idempotent).

        ``wait=False`` closes in a daemon thread: detaching the link and the receive thread's
        exit take 0.3-1 s that a reader which already has its whole range need not wait for
        (it is a task's tail, paid once per task otherwise).
        """
        if self._closing:
            return
        self._closing = True
        self._stop.set()
        if wait:
            self._close_client()
        else:
            threading.Thread(
                target=self._close_client,
                name=f"eventhubs-close-{self._partition_id}",
                daemon=True,
            ).start()

    def _close_client(self) -> None:
        try:
            self._client.close()
        except Exception:  # closing a half-open AMQP link must not mask the real error
            logger.debug("closing the consumer of partition %s failed", self._partition_id)
        # The receive thread leaves its blocking read within one AMQP poll (<1 s).
        if self._thread.is_alive():
            self._thread.join(timeout=5)


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
        self._reset()

    def _reset(self) -> None:
        self.body: list[bytes] = []
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
        msg = event.raw_amqp_message
        ann = msg.annotations or {}
        self.body.append(_body_bytes(msg.body))
        self.seq.append(seq)
        self.offset.append(_text(ann.get(_OFFSET)))
        ms = _to_ms(ann.get(_TIME))
        self.time_us.append(None if ms is None else ms * 1000)
        self.publisher.append(_text(ann.get(_PUBLISHER)))
        self.pkey.append(_text(ann.get(_PKEY)))
        app = msg.application_properties
        self.props.append([(_text(k) or "", _text(v)) for k, v in app.items()] if app else [])
        sysprops = [
            (_text(k) or "", _text(v)) for k, v in ann.items() if k not in _COLUMN_ANNOTATIONS
        ]
        mprops = msg.properties
        if mprops is not None:
            for name in _MESSAGE_PROPERTIES:
                value = getattr(mprops, name, None)
                if value is not None:
                    sysprops.append((name.replace("_", "-"), _text(value)))
        self.sysprops.append(sysprops)

    def flush(self) -> pa.RecordBatch:
        import pyarrow as pa

        n = len(self.seq)
        fields = self.schema
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(self.body, type=fields.field("body").type),
                pa.array([self.partition_id] * n, type=pa.string()),
                pa.array(self.offset, type=pa.string()),
                pa.array(self.seq, type=pa.int64()),
                pa.array(self.time_us, type=pa.int64()).cast(fields.field("enqueuedTime").type),
                pa.array(self.publisher, type=pa.string()),
                pa.array(self.pkey, type=pa.string()),
                pa.array(self.props, type=fields.field("properties").type),
                pa.array(self.sysprops, type=fields.field("systemProperties").type),
            ],
            schema=fields,
        )
        self._reset()
        return batch


def _arrow_schema() -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    # Exactly what Spark's data source worker checks batches against.
    return to_arrow_schema(eventhubs_schema(), timezone="UTC")


def read_range(
    settings: EventHubSettings,
    rng: PartitionRange,
    *,
    receive_timeout: float = 30.0,
    prefetch: int = 300,
    on_data_loss: OnDataLoss = "fail",
    batch_rows: int = _BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Receive exactly the events of ``rng`` and yield them as Arrow record batches.

    Runs wherever it is called (a Spark task, a benchmark); creates and closes its own client.

    Raises:
        DataLossError: a sequence number of the range is missing and ``on_data_loss='fail'``.
        EventHubUnavailableError: nothing arrived for ``receive_timeout`` seconds, or the
            service failed after the SDK's retries.
    """
    builder = _ArrowBuilder(rng.partition_id, _arrow_schema())
    expected = rng.start
    # Never ask for more credit than the range holds: events past the end would be wasted.
    credit = max(1, min(prefetch, rng.count))
    receiver = _BatchReceiver(
        settings,
        rng.partition_id,
        starting_position=rng.start,
        prefetch=credit,
        max_batch_size=credit,
        wait_seconds=receive_timeout,
    )
    where = f"Event Hub {settings.eventhub_name!r} consumer group {settings.consumer_group!r} {rng}"

    def lost(first: int, last: int) -> None:
        """A hole [first, last] in the range: fail, or log it and go on (skip)."""
        missing = f"sequence numbers [{first}, {last}] of {rng} are missing"
        if on_data_loss == "fail":
            raise DataLossError(
                f"{where}: {missing} (expired by retention or a gap in the partition); "
                "set on_data_loss='skip' to read what is left"
            )
        logger.warning(
            "Event Hub %s consumer group %s partition %s: skipping: %s",
            settings.eventhub_name,
            settings.consumer_group,
            rng.partition_id,
            missing,
        )

    with receiver:
        for events in receiver:
            if not events:
                # Silence: either the rest of the range expired meanwhile (data loss) or the
                # service is not delivering (retryable). The partition properties tell which.
                first_available = _first_available(settings, rng.partition_id)
                if first_available is not None and first_available > expected:
                    lost(expected, rng.end)
                    expected = rng.end + 1
                    break
                raise EventHubUnavailableError(
                    f"{where}: no event received for {receive_timeout:g}s while waiting for "
                    f"sequence number {expected} (receive_timeout); the hub may be unreachable "
                    "or overloaded"
                )
            for event in events:
                seq = event.sequence_number
                if seq is None or seq < expected:
                    continue  # a redelivery after a reconnect: already read
                if seq > rng.end:
                    break
                if seq > expected:
                    lost(expected, seq - 1)
                builder.add(event, seq)
                expected = seq + 1
                if len(builder) >= batch_rows:
                    yield builder.flush()
            last_seen = events[-1].sequence_number
            if expected > rng.end or (last_seen is not None and last_seen > rng.end):
                break
        if expected > rng.end:
            # Complete: hand the last rows to Spark now; the client closes behind them.
            receiver.close(wait=False)
    if expected <= rng.end:
        # The partition moved past the range's end without delivering its tail.
        lost(expected, rng.end)
    if len(builder):
        yield builder.flush()


def _first_available(settings: EventHubSettings, partition_id: str) -> int | None:
    try:
        _, infos = fetch_partition_info(settings, [partition_id])
    except EventHubIngestError:
        return None
    info = infos.get(partition_id)
    return None if info is None else info.first_available


# --------------------------------------------------------------------------------------------
# The PySpark data source
# --------------------------------------------------------------------------------------------


class EventHubsInputPartition(InputPartition):
    """One sub-range read by one Spark task; holds settings and range only (picklable)."""

    def __init__(
        self,
        settings: EventHubSettings,
        rng: PartitionRange,
        receive_timeout: float,
        prefetch: int,
        on_data_loss: OnDataLoss,
    ) -> None:
        super().__init__(rng)
        self.settings = settings
        self.range = rng
        self.receive_timeout = receive_timeout
        self.prefetch = prefetch
        self.on_data_loss = on_data_loss

    def __repr__(self) -> str:
        # The settings hold a secret; the repr shows where, never how to authenticate.
        return f"EventHubsInputPartition({self.settings.eventhub_name}, {self.range})"


class EventHubsReader(DataSourceReader):
    """Batch reader over a resolved :class:`ReadPlan`."""

    def __init__(self, plan: ReadPlan) -> None:
        self.plan = plan

    def partitions(self) -> list[InputPartition]:
        """One input partition per sub-range."""
        return list(self.plan.input_partitions())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Receive one sub-range on an executor (the client is created here, never pickled)."""
        if not isinstance(partition, EventHubsInputPartition):
            return iter(())
        return read_range(
            partition.settings,
            partition.range,
            receive_timeout=partition.receive_timeout,
            prefetch=partition.prefetch,
            on_data_loss=partition.on_data_loss,
        )


class EventHubsDataSource(DataSource):
    """``spark.read.format("eventhubs")``: bounded reads of Event Hub sequence-number ranges.

    The options are validated and the ranges resolved when the DataFrame is created; see the
    module docstring and docs/spark_source.md for the options.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # The connector's and Kafka's options are mapped (or refused) there; see the module.
        from resources.eventhubs_options import parse_source_options
        from resources.eventhubs_positions import plan_source_read

        self.source = parse_source_options(options)
        parsed = self.source.read
        # Spark builds the source the same way for spark.read and spark.readStream. A stream
        # starts from its checkpoint, not from these positions, so unless the options are
        # batch-only (ranges, an end), what the batch plan finds (an expired start, an
        # unreachable hub) is raised when a batch reader is asked for (the first action),
        # never by readStream...load().
        self.plan_error: EventHubIngestError | None = None
        self.plan = ReadPlan(options=parsed, ranges=())
        if parsed.ranges is None or parsed.ranges:
            try:
                self.plan = plan_source_read(self.source)
            except (RangeError, DataLossError, EventHubUnavailableError) as exc:
                if self.source.batch_only:
                    raise
                self.plan_error = exc
        # Drop the raw options: the plan holds everything, and they hold the secret twice.
        self.options = {}

    @classmethod
    def name(cls) -> str:
        """The format name: ``eventhubs``."""
        return SOURCE_NAME

    def schema(self) -> StructType:
        """The fixed event schema (azure-event-hubs-spark column names)."""
        return eventhubs_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader over the ranges resolved at creation."""
        if self.plan_error is not None:
            raise self.plan_error
        return EventHubsReader(self.plan)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("eventhubs")``: see :mod:`resources.eventhubs_stream`."""
        from resources.eventhubs_stream import EventHubsStreamReader

        return EventHubsStreamReader(self.source)


_REGISTERED: set[tuple[int, str]] = set()


def register_python_source(spark: SparkSession, source: type[DataSource]) -> None:
    """Register ``source`` on ``spark`` once (Spark warns on every re-registration).

    On a non-local session this first ships the project's code to the executors
    (:func:`resources.code_shipping.ship_code`), which unpickle ``source`` by reference.
    """
    key = (id(spark), source.name())
    if key not in _REGISTERED:
        from resources.code_shipping import ship_code

        ship_code(spark)
        spark.dataSource.register(source)
        _REGISTERED.add(key)


def register_eventhubs_source(spark: SparkSession) -> None:
    """Register the ``eventhubs`` format on ``spark`` (idempotent)."""
    register_python_source(spark, EventHubsDataSource)


def read_eventhubs(
    spark: SparkSession,
    source: ReadPlan | ReadOptions | EventHubSettings,
    **options: Any,
) -> DataFrame:
    """The ``eventhubs`` DataFrame of a plan, validated options, or settings plus options.

    With a :class:`ReadPlan` the DataFrame reads exactly ``plan.ranges``; otherwise the source
    resolves the options itself. Extra keyword ``options`` use the reader option names
    (``ranges`` may be a dict ``{"0": (start, end)}``).
    """
    register_eventhubs_source(spark)
    if isinstance(source, ReadPlan):
        opts = source.spark_options()
    else:
        base = source if isinstance(source, ReadOptions) else ReadOptions(settings=source)
        opts = base.to_options()
        extra = {k: v for k, v in options.items() if v is not None}
        if "ranges" in extra:
            for key in ("starting_position", "ending_position", "partition_ids"):
                opts.pop(key, None)
            if not isinstance(extra["ranges"], str):
                extra["ranges"] = json.dumps(
                    {str(k): [int(v[0]), int(v[1])] for k, v in extra["ranges"].items()}
                )
        elif "starting_position" in extra or "ending_position" in extra:
            opts.pop("ranges", None)
        opts.update({k: str(v) for k, v in extra.items()})
    return spark.read.format(SOURCE_NAME).options(**opts).load()
