"""Positions as the connector and Kafka write them, parsed into one :class:`Bound`.

The connector's ``EventPosition`` JSON (``eventhubs.startingPosition(s)``), Kafka's
``startingOffsets`` / ``endingOffsets``, and the project's own :class:`EventPosition`: each is
parsed here without I/O; :mod:`.resolve` turns a bound into a sequence number on the driver.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.eventhubs_source.position import EventPosition, parse_utc

__all__ = [
    "Bound",
    "BoundKind",
    "PositionForm",
    "PositionSpec",
    "own_to_bound",
    "parse_event_position",
    "parse_kafka_offsets",
    "parse_position_map",
]

BoundKind = Literal["earliest", "latest", "sequence_number", "offset", "enqueued_time"]


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


def parse_position_map(text: str, option: str, hub: str | None) -> dict[str, Bound]:
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


def parse_kafka_offsets(
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
