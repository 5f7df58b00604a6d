"""Options of azure-event-hubs-spark and Kafka habits, mapped onto the ``eventhubs`` source.

The azure-event-hubs-spark connector has no Spark 4 build; this module lets its reader code
(``spark.read.format("eventhubs").options(**ehConf)``) run unchanged on the project's Python data
source, and lets Kafka users keep ``startingOffsets`` / ``endingOffsets`` / ``failOnDataLoss``.
Everything here is parsing and planning on the driver; nothing runs on executors.

* :func:`parse_source_options` turns the raw reader options (ours, the connector's, Kafka's)
  into :class:`SourceOptions` without any I/O; an option that cannot be honoured is refused
  with a message naming what to use instead (:data:`CONNECTOR_OPTIONS` is the full table).
* :mod:`dagster_eventhub_ingest.resources.eventhubs_positions` resolves the positions on the driver
  (batch plan, a stream's initial offsets).

Semantics follow the originals exactly: a connector or Kafka *start* is inclusive, an *end* is
exclusive (the first sequence number not read). See docs/spark_source.md.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from dagster_eventhub_ingest.resources.errors import ConfigurationError, did_you_mean
from dagster_eventhub_ingest.resources.limits import MAX_READERS_PER_PARTITION
from dagster_eventhub_ingest.resources.settings import entity_path
from dagster_eventhub_ingest.resources.spark_source._options import (
    _OPTION_NAMES,
    ReadOptions,
    _canonical_option,
    camel_case,
    own_spellings,
)
from dagster_eventhub_ingest.resources.spark_source._position import EventPosition, parse_utc

if TYPE_CHECKING:
    pass

__all__ = [
    "CONNECTOR_OPTIONS",
    "Bound",
    "PositionSpec",
    "SourceOptions",
    "decrypt_connection_string",
    "encrypt_connection_string",
    "own_to_bound",
    "parse_iso_duration",
    "parse_source_options",
]

logger = logging.getLogger(__name__)

BoundKind = Literal["earliest", "latest", "sequence_number", "offset", "enqueued_time"]

# --------------------------------------------------------------------------------------------
# The connector's options: what each one becomes here
# --------------------------------------------------------------------------------------------

#: Every azure-event-hubs-spark (2.3.22) reader option, as its docs spell it -> how it is
#: handled here (keys are matched case-insensitively).
#: ``mapped``: honoured (the text says as what); ``refused``: an error whose message is the text.
CONNECTOR_OPTIONS: dict[str, tuple[Literal["mapped", "refused"], str]] = {
    "eventhubs.connectionString": (
        "mapped",
        "connection_string; plain or encrypted by the connector's EventHubsUtils.encrypt; the hub "
        "name is taken from EntityPath when eventhub_name is not given",
    ),
    "eventhubs.consumerGroup": ("mapped", "consumer_group"),
    "eventhubs.startingPosition": (
        "mapped",
        "EventPosition JSON (offset/seqNo/enqueuedTime/isInclusive), start inclusive",
    ),
    "eventhubs.startingPositions": (
        "mapped",
        'per-partition EventPosition JSON keyed by {"ehName": ..., "partitionId": n}',
    ),
    "eventhubs.endingPosition": ("mapped", "EventPosition JSON, end exclusive (batch only)"),
    "eventhubs.endingPositions": ("mapped", "per-partition EventPosition JSON, end exclusive"),
    "eventhubs.prefetchCount": ("mapped", "prefetch"),
    "eventhubs.receiverTimeout": ("mapped", "receive_timeout (ISO-8601 duration, e.g. PT60S)"),
    "eventhubs.operationTimeout": (
        "mapped",
        "deadline of the driver's management calls at load() and per micro-batch",
    ),
    "maxEventsPerTrigger": ("mapped", "streaming admission control (ReadMaxRows)"),
    "eventhubs.maxEventsPerTrigger": ("mapped", "alias of maxEventsPerTrigger"),
    "eventhubs.DynamicPartitionDiscovery": (
        "mapped",
        "always on: a stream reads the partition ids at every micro-batch",
    ),
    "eventhubs.useExclusiveReceiver": (
        "refused",
        "this source uses non-exclusive (non-epoch) readers only, up to "
        f"{MAX_READERS_PER_PARTITION} per partition and consumer group; remove the option or set "
        "it to false",
    ),
    "eventhubs.maxRatePerPartition": (
        "refused",
        "a DStream option; use maxEventsPerTrigger to bound a micro-batch",
    ),
    "eventhubs.maxRatesPerPartition": (
        "refused",
        "a DStream option; use maxEventsPerTrigger to bound a micro-batch",
    ),
    "eventhubs.threadPoolSize": (
        "refused",
        "a JVM client setting with no counterpart (each Spark task runs its own Python client); "
        "remove it",
    ),
    "eventhubs.maxSilentTime": (
        "refused",
        "a JVM receiver setting with no counterpart; remove it (receive_timeout bounds silence)",
    ),
    "eventhubs.slowPartitionAdjustment": (
        "refused",
        "not supported; remove it (use maxEventsPerTrigger, and max_readers_per_partition for "
        "large partitions)",
    ),
    "eventhubs.maxAcceptableBatchReceiveTime": (
        "refused",
        "belongs to slowPartitionAdjustment, which is not supported; remove it",
    ),
    "eventhubs.throttlingStatusPlugin": (
        "refused",
        "a JVM plugin class; not supported; remove it (Spark's StreamingQueryProgress reports "
        "rows per batch)",
    ),
    "eventhubs.metricPlugin": (
        "refused",
        "a JVM plugin class; not supported; remove it (the source logs each planned range)",
    ),
    "eventhubs.useAadAuth": (
        "refused",
        "use fully_qualified_namespace='<ns>.servicebus.windows.net' with "
        "credential_type='default_azure_credential' (azure-identity on every executor)",
    ),
    "eventhubs.aadAuthCallback": (
        "refused",
        "JVM callback classes cannot run here; use fully_qualified_namespace with "
        "credential_type='default_azure_credential'",
    ),
    "eventhubs.AadAuthCallbackParams": (
        "refused",
        "JVM callback classes cannot run here; use fully_qualified_namespace with "
        "credential_type='default_azure_credential'",
    ),
    "partitionPreferredLocationStrategy": (
        "refused",
        "executor placement of the JVM connector; remove it (Spark schedules the tasks)",
    ),
    "useSimulatedClient": ("refused", "the connector's test client; remove it"),
}

#: Kafka source options users bring along, as Spark's docs spell them -> handling (same shape
#: as above).
KAFKA_OPTIONS: dict[str, tuple[Literal["mapped", "refused"], str]] = {
    "startingOffsets": (
        "mapped",
        'earliest | latest | {"<hub>": {"<partition>": n}} (-2 earliest, -1 latest), inclusive',
    ),
    "endingOffsets": (
        "mapped",
        'latest | {"<hub>": {"<partition>": n}} (-1 latest), exclusive; batch only',
    ),
    "failOnDataLoss": ("mapped", "on_data_loss: true -> fail, false -> skip"),
    "maxOffsetsPerTrigger": ("mapped", "alias of maxEventsPerTrigger"),
    "startingOffsetsByTimestamp": (
        "refused",
        'use eventhubs.startingPosition {"enqueuedTime": ...} or '
        "starting_position='enqueued:<ISO time>'",
    ),
    "endingOffsetsByTimestamp": (
        "refused",
        'use eventhubs.endingPosition {"enqueuedTime": ...} or ending_position='
        "'enqueued:<ISO time>'",
    ),
    "minOffsetsPerTrigger": ("refused", "not supported; use maxEventsPerTrigger only"),
    "maxTriggerDelay": ("refused", "not supported (it goes with minOffsetsPerTrigger)"),
    "subscribe": ("refused", "this is the Event Hubs source: give eventhub_name"),
    "subscribePattern": ("refused", "this is the Event Hubs source: give eventhub_name"),
    "assign": (
        "refused",
        "this is the Event Hubs source: give eventhub_name (and partition_ids to restrict)",
    ),
    "kafka.bootstrap.servers": (
        "refused",
        "this is the Event Hubs source: give a connection string or fully_qualified_namespace",
    ),
}

_FOREIGN_OPTIONS = {k.lower(): v for k, v in {**CONNECTOR_OPTIONS, **KAFKA_OPTIONS}.items()}
# Keys of ours that the connector spells differently but means the same (no translation).
_RENAMES = {
    "eventhubs.connectionstring": "connection_string",
    "eventhubs.consumergroup": "consumer_group",
    "eventhubs.prefetchcount": "prefetch",
}


# --------------------------------------------------------------------------------------------
# Small parsers: ISO-8601 durations, the connector's encrypted connection strings
# --------------------------------------------------------------------------------------------

_DURATION = re.compile(
    r"^(?P<sign>[-+]?)P(?:(?P<d>[-+]?\d+)D)?"
    r"(?:T(?:(?P<h>[-+]?\d+)H)?(?:(?P<m>[-+]?\d+)M)?(?:(?P<s>[-+]?\d+(?:[.,]\d{0,9})?)S)?)?$",
    re.IGNORECASE,
)


def parse_iso_duration(text: str, option: str) -> float:
    """Seconds of an ISO-8601 duration as ``java.time.Duration.parse`` reads it (``PT1M30S``).

    A plain number is taken as seconds. The error names ``option``, the value and the format.
    """
    raw = text.strip()
    try:
        return float(raw)
    except ValueError:
        pass
    match = _DURATION.match(raw)
    if match is None or raw.upper().endswith("T") or raw.upper() in ("P", "-P", "+P"):
        raise ConfigurationError(
            f"{option}: {text!r} is not an ISO-8601 duration; expected e.g. 'PT60S', 'PT1M30S' "
            "or 'PT00H03M20S' (java.time.Duration format), or a number of seconds"
        )
    days = int(match["d"] or 0)
    hours = int(match["h"] or 0)
    minutes = int(match["m"] or 0)
    seconds = float((match["s"] or "0").replace(",", "."))
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return -total if match["sign"] == "-" else total


#: Connector versions whose EventHubsUtils.encrypt keys are tried (the key is the version).
_CONNECTOR_VERSIONS = tuple(f"2.3.{n}" for n in range(22, 14, -1))


def _cipher_key(version: str) -> bytes:
    from hashlib import pbkdf2_hmac

    # EventHubsUtils.getSecretKeySpec: PBKDF2WithHmacSHA256(password=version, salt=version,
    # 1000 iterations, 256 bits) used as an AES key.
    return pbkdf2_hmac("sha256", version.encode(), version.encode(), 1000, 32)


def encrypt_connection_string(connection_string: str, version: str = "2.3.22") -> str:
    """What the connector's ``EventHubsUtils.encrypt`` returns, without its jar.

    For code that wrapped its connection string with
    ``sc._jvm.org.apache.spark.eventhubs.EventHubsUtils.encrypt(...)``: the jar is not on a
    Spark 4 cluster, this function is its replacement. It is obfuscation (AES/ECB with a key
    derived from the connector version), not protection; a plain string works just as well.
    """
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    padder = padding.PKCS7(128).padder()
    data = padder.update(connection_string.encode("utf-8")) + padder.finalize()
    enc = Cipher(algorithms.AES(_cipher_key(version)), modes.ECB()).encryptor()
    return base64.b64encode(enc.update(data) + enc.finalize()).decode("ascii")


def decrypt_connection_string(text: str) -> str | None:
    """The plain connection string of a connector-encrypted one, or None if it is not one."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except ValueError:
        return None
    if not raw or len(raw) % 16:
        return None
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    for version in _CONNECTOR_VERSIONS:
        dec = Cipher(algorithms.AES(_cipher_key(version)), modes.ECB()).decryptor()
        unpadder = padding.PKCS7(128).unpadder()
        try:
            plain = unpadder.update(dec.update(raw) + dec.finalize()) + unpadder.finalize()
            value = plain.decode("utf-8")
        except ValueError:
            continue
        if "endpoint=" in value.lower():
            return value
    return None


def _connection_string(value: str, option: str) -> str:
    if "endpoint=" in value.lower():
        return value
    plain = decrypt_connection_string(value)
    if plain is None:
        # The value is not shown: it is a secret either way.
        raise ConfigurationError(
            f"{option}: neither a connection string ('Endpoint=sb://...;SharedAccessKeyName=...;"
            "SharedAccessKey=...[;EntityPath=<hub>]') nor one encrypted by the connector's "
            "EventHubsUtils.encrypt (versions 2.3.15-2.3.22); the value is not shown"
        )
    return plain


# --------------------------------------------------------------------------------------------
# Positions: the connector's EventPosition JSON and Kafka offsets, as one "bound"
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bound:
    """A position resolved the way the connector does: to the sequence number of the first
    event at (or, not inclusive, after) it. As a start that event is read; as an end it is
    the first one not read (exclusive)."""

    kind: BoundKind
    value: int | str | datetime | None = None
    inclusive: bool = True

    def __str__(self) -> str:
        if self.kind in ("earliest", "latest"):
            return self.kind
        text = self.value.isoformat() if isinstance(self.value, datetime) else str(self.value)
        return f"{self.kind} {text}{'' if self.inclusive else ' (exclusive)'}"


_POSITION_EXAMPLE = '{"offset": "-1", "seqNo": -1, "enqueuedTime": null, "isInclusive": true}'


def _parse_time(text: str, option: str) -> datetime:
    raw = text.strip()
    try:
        # "%Y-%m-%dT%H:%M:%S.%fZ" as in the connector's docs; fractions up to microseconds.
        return parse_utc(raw)
    except ValueError as exc:
        raise ConfigurationError(
            f"{option}: enqueuedTime {text!r} is not a time; expected 'YYYY-MM-DDTHH:MM:SS.ssssZ' "
            "(UTC)"
        ) from exc


def parse_event_position(data: Any, option: str) -> Bound:
    """One connector EventPosition (a JSON object or its text) as a :class:`Bound`.

    As in the connector's ``EventHubsClient.translate``: a ``seqNo`` >= 0 wins, used as is;
    then ``offset`` (``"-1"`` start of stream, ``"@latest"`` end of stream, else a byte
    offset), then ``enqueuedTime``. ``isInclusive`` applies to offsets (an enqueued time
    always means "enqueued after").
    """
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f"{option}: {data!r} is not JSON ({exc.msg}); expected an EventPosition such as "
                f"{_POSITION_EXAMPLE}"
            ) from exc
    if not isinstance(data, dict):
        raise ConfigurationError(
            f"{option}: {data!r} is not an EventPosition object; expected e.g. {_POSITION_EXAMPLE}"
        )
    unknown = sorted(set(data) - {"offset", "seqNo", "enqueuedTime", "isInclusive"})
    if unknown:
        raise ConfigurationError(
            f"{option}: unknown EventPosition field(s) {', '.join(unknown)}; valid: offset, "
            "seqNo, enqueuedTime, isInclusive"
        )
    inclusive = data.get("isInclusive", True)
    if not isinstance(inclusive, bool):
        raise ConfigurationError(f"{option}: isInclusive {inclusive!r} must be true or false")
    offset = data.get("offset")
    seq = data.get("seqNo", -1)
    when = data.get("enqueuedTime")
    if seq is None:
        seq = -1
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise ConfigurationError(f"{option}: seqNo {seq!r} must be an integer (-1: not in use)")
    if seq < -1:
        raise ConfigurationError(f"{option}: seqNo {seq} is negative; use -1 for 'not in use'")
    if seq >= 0:
        return Bound("sequence_number", seq)
    if offset is not None:
        text = str(offset).strip()
        if text == "-1":
            return Bound("earliest")
        if text.lower() == "@latest":
            return Bound("latest")
        if not text.isdigit():
            raise ConfigurationError(
                f"{option}: offset {offset!r} is not valid; expected a number as a string, "
                "'-1' (start of stream) or '@latest' (end of stream)"
            )
        return Bound("offset", text, inclusive)
    if when is not None:
        # Java's EventPosition.fromEnqueuedTime filters "enqueued after" (strictly).
        return Bound("enqueued_time", _parse_time(str(when), option), False)
    raise ConfigurationError(
        f"{option}: no position is set (offset and enqueuedTime are null, seqNo is -1); set one, "
        f"e.g. {_POSITION_EXAMPLE}"
    )


def _parse_position_map(text: str, option: str, hub: str | None) -> dict[str, Bound]:
    """``eventhubs.startingPositions``: JSON ``{"{\\"ehName\\":..,\\"partitionId\\":n}": pos}``."""
    example = '{"{\\"ehName\\": \\"hub\\", \\"partitionId\\": 0}": ' + _POSITION_EXAMPLE + "}"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"{option}: {text!r} is not JSON ({exc.msg}); expected e.g. {example}"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigurationError(f"{option}: must be a JSON object, e.g. {example}")
    out: dict[str, Bound] = {}
    for key, pos in data.items():
        try:
            name_and_partition = json.loads(key)
            pid = name_and_partition["partitionId"]
            name = name_and_partition.get("ehName")
        except (json.JSONDecodeError, TypeError, KeyError) as exc:
            raise ConfigurationError(
                f"{option}: key {key!r} is not a NameAndPartition JSON such as "
                '{"ehName": "hub", "partitionId": 0}'
            ) from exc
        if hub is not None and name is not None and name != hub:
            raise ConfigurationError(
                f"{option}: key {key!r} names Event Hub {name!r}, but this read is of {hub!r}"
            )
        out[str(pid)] = parse_event_position(pos, f"{option}[{pid}]")
    return out


def _parse_kafka_offsets(
    text: str, option: str, hub: str | None, *, ending: bool
) -> tuple[Bound | None, dict[str, Bound]]:
    """Kafka's ``startingOffsets`` / ``endingOffsets``: ``earliest``, ``latest`` or JSON."""
    raw = text.strip()
    low = raw.lower()
    if low == "earliest":
        if ending:
            raise ConfigurationError(
                f"{option}: 'earliest' is not a valid end (as in Kafka); use 'latest' or "
                "per-partition offsets"
            )
        return Bound("earliest"), {}
    if low == "latest":
        return Bound("latest"), {}
    example = '{"%s": {"0": 23, "1": -2}}' % (hub or "<hub>")
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"{option}: {text!r} is neither 'earliest', 'latest' nor JSON ({exc.msg}); expected "
            f"e.g. {example}"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigurationError(f"{option}: must be a JSON object, e.g. {example}")
    if data and all(isinstance(v, dict) for v in data.values()):
        # Kafka's {"topic": {"partition": offset}}; the topic is the Event Hub.
        names = [k for k in data if hub is None or k != hub]
        if names:
            raise ConfigurationError(
                f"{option}: names Event Hub(s) {', '.join(map(repr, names))}; this read is of "
                f"{hub!r} (Kafka's topic is the Event Hub name)"
            )
        flat: dict[str, Any] = {}
        for parts in data.values():
            flat.update(parts)
    else:
        flat = data
    out: dict[str, Bound] = {}
    for pid, value in flat.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigurationError(
                f"{option}: partition {pid!r} has {value!r}; expected an integer (a sequence "
                f"number, -2 earliest, -1 latest), e.g. {example}"
            )
        if value == -2:
            if ending:
                raise ConfigurationError(
                    f"{option}: partition {pid!r}: -2 (earliest) is not a valid end, as in Kafka"
                )
            out[str(pid)] = Bound("earliest")
        elif value == -1:
            out[str(pid)] = Bound("latest")
        elif value >= 0:
            out[str(pid)] = Bound("sequence_number", value)
        else:
            raise ConfigurationError(
                f"{option}: partition {pid!r} has {value}; valid: a sequence number >= 0, -2 "
                "(earliest) or -1 (latest)"
            )
    return None, out


PositionForm = Literal["connector", "kafka"]


@dataclass(frozen=True)
class PositionSpec:
    """Start or end positions: a default for every partition plus per-partition overrides,
    given in the connector's or Kafka's form under ``option`` (the key or keys as written)."""

    default: Bound | None = None
    per_partition: tuple[tuple[str, Bound], ...] = ()
    option: str = ""
    form: PositionForm = "connector"

    def for_partition(self, pid: str, fallback: Bound) -> Bound:
        """The position of ``pid``: its own, else the default, else ``fallback``."""
        return dict(self.per_partition).get(pid, self.default or fallback)

    @property
    def partitions(self) -> tuple[str, ...]:
        """The partition ids that have their own position."""
        return tuple(pid for pid, _ in self.per_partition)


# --------------------------------------------------------------------------------------------
# All options together
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of one ``eventhubs`` read or stream; small, frozen and picklable.

    ``read`` carries the project's own options (hub, credentials, timeouts, data-loss policy and
    our own positions). ``starts`` / ``ends`` are set when positions came in the connector's or
    Kafka's form; they are resolved per partition with the connector's semantics.
    """

    read: ReadOptions
    starts: PositionSpec | None = None
    ends: PositionSpec | None = None
    has_own_start: bool = False
    max_events_per_trigger: int | None = None
    operation_timeout: float | None = None
    #: Options given that only a batch read can use (ends, ranges), as the user spelled them.
    batch_only: tuple[str, ...] = ()
    #: Options given that only a stream can use (maxEventsPerTrigger and its aliases), as spelled.
    stream_only: tuple[str, ...] = ()

    def batch_only_error(self) -> ConfigurationError | None:
        """The error a stream gives with batch-only options (an end, ranges), or None."""
        if not self.batch_only:
            return None
        return ConfigurationError(
            f"{', '.join(self.batch_only)}: a stream has no end; these options apply to "
            "spark.read only (use .trigger(availableNow=True) to stop at the events there "
            "are when the query starts)"
        )

    def stream_only_error(self) -> ConfigurationError | None:
        """The error a batch read gives with stream-only options, or None."""
        if not self.stream_only:
            return None
        return ConfigurationError(
            f"{', '.join(self.stream_only)}: bounds a stream's micro-batches; a batch read "
            "(spark.read) reads its whole range at once: remove it, or bound the read with an "
            "end position (or ranges)"
        )

    def stream_start(self) -> PositionSpec:
        """Where a new stream starts: the given positions, else the end of the stream.

        Both the connector and Kafka start a new stream at the end (new events only).
        """
        if self.starts is not None:
            return self.starts
        if self.has_own_start:
            return PositionSpec(own_to_bound(self.read.starting_position))
        return PositionSpec(Bound("latest"))


def own_to_bound(pos: EventPosition) -> Bound:
    """The project's own starting position as a :class:`Bound` (an enqueued time: at or after)."""
    if pos.kind in ("earliest", "latest"):
        return Bound(pos.kind)
    if pos.kind == "sequence_number":
        return Bound("sequence_number", pos.value)
    if pos.kind == "offset":
        return Bound("offset", pos.value, True)
    # Our enqueued start is "at or after" the time.
    return Bound("enqueued_time", pos.value, True)


def _accepted(table: dict[str, tuple[Literal["mapped", "refused"], str]]) -> list[str]:
    return [key for key, (status, _) in table.items() if status == "mapped"]


def accepted_options() -> tuple[str, ...]:
    """Every option key the source accepts: ours (also in camelCase), the connector's and
    Kafka's (what a did-you-mean may offer; keys match without case)."""
    return own_spellings() + tuple(_accepted(CONNECTOR_OPTIONS)) + tuple(_accepted(KAFKA_OPTIONS))


_DOCUMENTED = {k.lower(): k for k in (*CONNECTOR_OPTIONS, *KAFKA_OPTIONS)}


def documented(key: str) -> str:
    """An option key as the user wrote it, or as its docs spell it when Spark lower-cased it
    (Spark hands a data source its options lower-cased): ``failondataloss`` ->
    ``failOnDataLoss``, ``consumergroup`` -> ``consumerGroup``."""
    low = key.strip().lower()
    if key.strip() != low:
        return key.strip()  # the user's own casing survived
    if low in _DOCUMENTED:
        return _DOCUMENTED[low]
    name = _canonical_option(low)
    bare = low.removeprefix("eventhubs.")
    if name is not None and "_" not in bare and bare != name:
        return low[: len(low) - len(bare)] + camel_case(name)
    return key.strip()


def _bool(text: str, option: str) -> bool:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    raise ConfigurationError(f"{option}: {text!r} must be 'true' or 'false'")


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate reader options in any of the three dialects; no I/O.

    The project's own keys pass through to :meth:`ReadOptions.from_options`; the connector's
    and Kafka's keys are translated or refused (:data:`CONNECTOR_OPTIONS`, :data:`KAFKA_OPTIONS`).
    Secrets never appear in an error.
    """
    own: dict[str, str] = {}  # canonical name -> value
    given: dict[str, str] = {}  # canonical name -> the key as the user spelled it
    foreign: dict[str, tuple[str, str]] = {}  # lower-cased key -> (key as given, value)
    for key, value in options.items():
        low = key.strip().lower()
        if low in _FOREIGN_OPTIONS:
            status, text = _FOREIGN_OPTIONS[low]
            if status == "refused":
                raise ConfigurationError(
                    f"eventhubs source: option {key!r} is not supported: {text}"
                )
            foreign[low] = (key, value)
            continue
        name = _canonical_option(key)
        if name is None:
            raise ConfigurationError(
                f"eventhubs source: unknown option {key!r}; {did_you_mean(key, accepted_options())}"
                f"valid options: {', '.join(_OPTION_NAMES)}; the "
                f"connector's: {', '.join(_accepted(CONNECTOR_OPTIONS))}; Kafka's: "
                f"{', '.join(_accepted(KAFKA_OPTIONS))} (keys are case-insensitive)"
            )
        if name in own:
            raise ConfigurationError(f"{key}: also given as {given[name]!r}; give one of them")
        own[name] = value
        given[name] = key

    given_foreign = {low: key for low, (key, _) in foreign.items()}

    def put(name: str, key: str, value: str) -> None:
        if name in own:
            raise ConfigurationError(f"{key}: also given as {given[name]!r}; give one of them")
        own[name] = value
        given[name] = key

    for low, ours in _RENAMES.items():
        got = foreign.pop(low, None)
        if got is not None:
            put(ours, *got)
    if "connection_string" in own:
        own["connection_string"] = _connection_string(
            own["connection_string"], given["connection_string"]
        )

    got = foreign.pop("eventhubs.receivertimeout", None)
    if got is not None:
        put("receive_timeout", got[0], repr(parse_iso_duration(got[1], got[0])))
    operation_timeout = None
    got = foreign.pop("eventhubs.operationtimeout", None)
    if got is not None:
        operation_timeout = parse_iso_duration(got[1], got[0])
        if operation_timeout <= 0:
            raise ConfigurationError(f"{got[0]}: {got[1]!r} must be a positive duration")
    got = foreign.pop("failondataloss", None)
    if got is not None:
        put("on_data_loss", got[0], "fail" if _bool(got[1], got[0]) else "skip")
        given.pop("on_data_loss")  # its spelling is Kafka's: the hint says failOnDataLoss
    limits = [
        foreign.pop(k)
        for k in ("maxeventspertrigger", "eventhubs.maxeventspertrigger", "maxoffsetspertrigger")
        if k in foreign
    ]
    stream_only = tuple(documented(key) for key, _ in limits)
    if len(limits) > 1:
        raise ConfigurationError(
            f"{', '.join(g[0] for g in limits)}: the same limit given twice; give one of them"
        )
    max_events = None
    if limits:
        key, text = limits[0]
        try:
            max_events = int(text.strip())
        except ValueError as exc:
            raise ConfigurationError(f"{key}: {text!r} is not an integer") from exc
        if max_events < 1:
            raise ConfigurationError(f"{key}: {max_events} must be >= 1 (events per micro-batch)")
    foreign.pop("eventhubs.dynamicpartitiondiscovery", None)  # always on (see the table)

    # Positions: ours (strings), the connector's (EventPosition JSON) or Kafka's.
    hub = own.get("eventhub_name")
    if hub is None and "connection_string" in own:
        # EntityPath names the hub (the SDK's parser; ReadOptions resolves it the same way).
        hub = entity_path(own["connection_string"])
    specs: dict[str, PositionSpec] = {}
    batch_only: list[str] = []
    dialect: set[PositionForm] = set()
    for side in ("starting", "ending"):
        own_name = f"{side}_position"
        forms: list[tuple[str, PositionSpec]] = []
        got = foreign.pop(f"eventhubs.{side}position", None)
        if got is not None:
            # The connector's key: its EventPosition JSON, or one of our own position strings.
            put(own_name, *got)
        if own_name in own and own[own_name].strip().startswith("{"):
            # eventhubs.startingPosition with the connector's JSON value.
            key = given.pop(own_name)
            forms.append((key, PositionSpec(default=parse_event_position(own.pop(own_name), key))))
        got = foreign.pop(f"eventhubs.{side}positions", None)
        if got is not None:
            per = _parse_position_map(got[1], got[0], hub)
            forms.append((got[0], PositionSpec(per_partition=tuple(sorted(per.items())))))
        kafka = foreign.pop(f"{side}offsets", None)
        if kafka is not None:
            default, per = _parse_kafka_offsets(kafka[1], kafka[0], hub, ending=side == "ending")
            if forms:
                raise ConfigurationError(
                    f"{kafka[0]} and {', '.join(k for k, _ in forms)}: give the {side} "
                    "positions in one form, Kafka's or the connector's"
                )
            forms.append((kafka[0], PositionSpec(default, tuple(sorted(per.items())))))
        if not forms:
            continue
        if side == "ending":
            batch_only.extend(documented(k) for k, _ in forms)
        clash = [given[n] for n in (own_name, "ranges", "partition_ids") if n in own]
        if clash:
            raise ConfigurationError(
                f"{', '.join(k for k, _ in forms)} and {', '.join(clash)}: give the {side} "
                "positions in one form (ranges and partition_ids go with the project's own "
                "positions only)"
            )
        default = next((s.default for _, s in forms if s.default is not None), None)
        per_partition: dict[str, Bound] = {}
        for _, s in forms:
            per_partition.update(dict(s.per_partition))
        form: PositionForm = "kafka" if kafka is not None else "connector"
        dialect.add(form)
        specs[side] = PositionSpec(
            default,
            tuple(sorted(per_partition.items())),
            option=", ".join(documented(k) for k, _ in forms),
            form=form,
        )
    assert not foreign, sorted(foreign)  # every accepted foreign key is consumed above
    batch_only += [documented(given[n]) for n in ("ranges", "ending_position") if n in own]
    if specs and ("ranges" in own or "partition_ids" in own):
        names = ", ".join(given[n] for n in ("ranges", "partition_ids") if n in own)
        raise ConfigurationError(
            f"{names}: not allowed together with the connector's or Kafka's positions"
        )
    has_own_start = "starting_position" in own
    read = ReadOptions.from_options(own)
    if "failondataloss" in given_foreign:
        hint = f"{documented(given_foreign['failondataloss'])}=false"
    elif "on_data_loss" in given:
        hint = f"{documented(given['on_data_loss'])}='skip'"
    elif dialect or any(k.startswith("eventhubs.") for k in given_foreign):
        hint = "failOnDataLoss=false"  # the connector's readers skip lost events; Kafka's way
    else:
        hint = read.data_loss_hint
    spellings = tuple((name, documented(key)) for name, key in given.items())
    read = replace(read, spellings=spellings, data_loss_hint=hint)
    return SourceOptions(
        read=read,
        starts=specs.get("starting"),
        ends=specs.get("ending"),
        has_own_start=has_own_start,
        max_events_per_trigger=max_events,
        operation_timeout=operation_timeout,
        batch_only=tuple(batch_only),
        stream_only=stream_only,
    )
