"""Positions of the connector's and Kafka's forms, resolved on the driver to sequence numbers.

:func:`plan_source_read` is the batch plan of
:class:`~dagster_eventhub_ingest.resources.eventhubs_source.compat.options.SourceOptions`;
:func:`resolve_start_sequence_numbers` gives a new stream its initial offsets. A position becomes
the sequence number of the first event at it (``EventHubsClient.translate`` in
azure-event-hubs-spark): as a start that event is read, as an end it is the first one not read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from dagster_eventhub_ingest.resources.azure.hub_client import EventHubClient, PartitionInfo
from dagster_eventhub_ingest.resources.errors import EventHubUnavailableError, RangeError
from dagster_eventhub_ingest.resources.eventhubs_source.compat.bounds import (
    Bound,
    PositionSpec,
    own_to_bound,
)
from dagster_eventhub_ingest.resources.eventhubs_source.compat.options import SourceOptions
from dagster_eventhub_ingest.resources.eventhubs_source.options import ReadOptions
from dagster_eventhub_ingest.resources.eventhubs_source.partition_range import PartitionRange
from dagster_eventhub_ingest.resources.eventhubs_source.plan import (
    ReadPlan,
    plan_read,
    resolve_position,
)
from dagster_eventhub_ingest.resources.eventhubs_source.receiver import first_event_at

if TYPE_CHECKING:
    from dagster_eventhub_ingest.resources.settings import EventHubSettings

__all__ = [
    "plan_source_read",
    "resolve_bound",
    "resolve_start_sequence_numbers",
    "with_deadline",
]

logger = logging.getLogger(__name__)


T = TypeVar("T")


def with_deadline(seconds: float | None, what: str, fn: Callable[[], T]) -> T:
    """Run ``fn``; past ``seconds`` raise :class:`EventHubUnavailableError` (operationTimeout).

    The azure-eventhub SDK has no deadline for management calls; the call is left to finish in
    a daemon thread.
    """
    if seconds is None:
        return fn()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=run, name="eventhubs-deadline", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise EventHubUnavailableError(
            f"{what} did not finish within eventhubs.operationTimeout ({seconds:g}s)"
        )
    if "error" in box:
        raise box["error"]
    return box["value"]


def _first_sequence_number_at(
    settings: EventHubSettings,
    partition_id: str,
    position: str | datetime,
    inclusive: bool,
    wait_seconds: float,
) -> int:
    """Sequence number of the first event at (or after) ``position``; known to exist."""
    got = first_event_at(
        settings, partition_id, position, inclusive=inclusive, wait_seconds=wait_seconds
    )
    if got is not None:
        return got[0]
    raise EventHubUnavailableError(
        f"Event Hub {settings.eventhub_name!r} partition {partition_id}: no event received at "
        f"position {position!s} within {wait_seconds:g}s (receive_timeout)"
    )


def resolve_bound(read: ReadOptions, info: PartitionInfo, bound: Bound) -> int:
    """The sequence number of the first event at ``bound`` (``last + 1`` if there is none).

    The connector's ``EventHubsClient.translate``: start of stream -> the first retained event,
    end of stream -> ``last + 1``, a sequence number as is, an offset or an enqueued time by
    receiving one event there (skipped when the partition has no such event).
    """
    last = info.last_enqueued_sequence_number
    if bound.kind == "earliest":
        return max(0, info.begin_sequence_number)
    if bound.kind == "latest":
        return last + 1
    if bound.kind == "sequence_number":
        assert isinstance(bound.value, int)
        return bound.value
    if info.is_empty:
        return last + 1
    if bound.kind == "enqueued_time":
        assert isinstance(bound.value, datetime)
        newest = info.last_enqueued_time
        if newest is not None and (
            newest < bound.value or (newest == bound.value and not bound.inclusive)
        ):
            return last + 1
        return _first_sequence_number_at(
            read.settings, info.partition_id, bound.value, bound.inclusive, read.receive_timeout
        )
    assert isinstance(bound.value, str)
    newest_offset = info.last_enqueued_offset or ""
    if newest_offset.isdigit() and bound.value.isdigit():
        after = int(bound.value) > int(newest_offset)
        at_end = int(bound.value) == int(newest_offset)
        if after or (at_end and not bound.inclusive):
            return last + 1
    return _first_sequence_number_at(
        read.settings, info.partition_id, bound.value, bound.inclusive, read.receive_timeout
    )


def _infos(source: SourceOptions) -> tuple[list[str], dict[str, PartitionInfo]]:
    read = source.read
    return with_deadline(
        source.operation_timeout,
        f"reading the partitions of Event Hub {read.settings.eventhub_name!r}",
        lambda: EventHubClient(read.settings, retry_total=None).snapshot(),
    )


def _check_partitions(spec: PositionSpec | None, all_ids: list[str], hub: str) -> None:
    unknown = [p for p in (spec.partitions if spec else ()) if p not in all_ids]
    if unknown:
        raise RangeError(
            f"positions: unknown partition {', '.join(map(repr, unknown))} of Event Hub "
            f"{hub!r}; valid partition ids: {', '.join(all_ids)}"
        )


def resolve_start_sequence_numbers(
    source: SourceOptions, infos: Mapping[str, PartitionInfo] | None = None
) -> dict[str, int]:
    """Partition id -> the first sequence number a new stream reads (its initial offset)."""
    if infos is None:
        all_ids, infos = _infos(source)
    else:
        all_ids = list(infos)
    spec = source.stream_start()
    _check_partitions(spec, all_ids, source.read.settings.eventhub_name)
    return {
        pid: resolve_bound(source.read, infos[pid], spec.for_partition(pid, Bound("latest")))
        for pid in all_ids
    }


def plan_source_read(source: SourceOptions) -> ReadPlan:
    """The batch plan of ``source``: per-partition positions resolved, then checked.

    Without connector or Kafka positions this is
    :func:`~dagster_eventhub_ingest.resources.eventhubs_source.plan_read` of the project's own
    options.
    With them, every partition's ``[start, end)`` is resolved as the connector does (start
    inclusive, end exclusive; defaults: the first retained event and the end of the stream), turned
    into inclusive ranges (empty ones left out) and planned like explicit ``ranges``, so retention
    is checked and ``failOnDataLoss`` applies.
    """
    read = source.read
    if source.starts is None and source.ends is None:
        return with_deadline(
            source.operation_timeout,
            f"planning the read of Event Hub {read.settings.eventhub_name!r}",
            lambda: plan_read(read),
        )

    def plan() -> ReadPlan:
        all_ids, infos = EventHubClient(read.settings, retry_total=None).snapshot()
        hub = read.settings.eventhub_name
        _check_partitions(source.starts, all_ids, hub)
        _check_partitions(source.ends, all_ids, hub)
        own_start = own_to_bound(read.starting_position)
        ranges: list[PartitionRange] = []
        for pid in all_ids:
            info = infos[pid]
            start_bound = (
                source.starts.for_partition(pid, Bound("earliest"))
                if source.starts is not None
                else own_start
            )
            _check_kafka_start(source.starts, pid, start_bound)
            start = resolve_bound(read, info, start_bound)
            if source.ends is not None:
                end_bound = source.ends.for_partition(pid, Bound("latest"))
                end_excl = resolve_bound(read, info, end_bound)
                _check_end(source.ends, info, end_bound, end_excl)
            else:
                end_excl = _own_end_exclusive(read, info)
            _check_order(source, read, info, start, end_excl)
            if end_excl > start:
                ranges.append(PartitionRange(pid, start, end_excl - 1))
        logger.info(
            "Event Hub %s consumer group %s: positions resolved to %s",
            hub,
            read.settings.consumer_group,
            ", ".join(str(r) for r in ranges) or "nothing to read",
        )
        if not ranges:
            return ReadPlan(options=replace(read, ranges=(), partition_ids=None), ranges=())
        return plan_read(replace(read, ranges=tuple(ranges), partition_ids=None))

    return with_deadline(
        source.operation_timeout,
        f"planning the read of Event Hub {read.settings.eventhub_name!r}",
        plan,
    )


def _latest_spelling(form: str) -> str:
    return "-1 (latest)" if form == "kafka" else '{"offset": "@latest"} (the end of the stream)'


def _check_kafka_start(spec: PositionSpec | None, pid: str, bound: Bound) -> None:
    """Kafka refuses ``latest`` as a batch start (it reads nothing); so does this source."""
    if spec is not None and spec.form == "kafka" and bound.kind == "latest":
        raise RangeError(
            f"{spec.option}: partition {pid} starts at 'latest' (-1), which is not a valid start "
            "for a batch read (as in Kafka): it would read nothing; start at 'earliest' (-2) or "
            "at a sequence number"
        )


def _check_end(spec: PositionSpec, info: PartitionInfo, bound: Bound, end_excl: int) -> None:
    """An end past the partition's end is an error, never cut back: a job that takes the end it
    asked for as its next start would skip the events that arrive meanwhile."""
    pid, last = info.partition_id, info.last_enqueued_sequence_number
    next_seq = last + 1
    past = end_excl > next_seq
    if bound.kind == "offset" and isinstance(bound.value, str) and bound.value.isdigit():
        newest = info.last_enqueued_offset or ""
        if newest.isdigit() and int(bound.value) > int(newest):
            past = True  # the connector would wait for an event at that offset and time out
    if past:
        what = "offset" if spec.form == "kafka" else "ending position"
        raise RangeError(
            f"{spec.option}: partition {pid} ends at {bound} (exclusive), past its end: its "
            f"last event is sequence number {last} (offset {info.last_enqueued_offset}); events "
            f"past it do not exist yet. Give an {what} at most at sequence number {next_seq}, "
            f"or {_latest_spelling(spec.form)}"
        )


def _check_order(
    source: SourceOptions, read: ReadOptions, info: PartitionInfo, start: int, end_excl: int
) -> None:
    """A start after the end is an error, as in the connector ("The beginning sequence number
    ... is larger than the ending sequence number") and Kafka ("Beginning offset ... is after the
    ending offset"); a start at the end reads nothing (nothing new)."""
    if start <= end_excl:
        return
    starting = (
        source.starts.option if source.starts is not None else read.spelled("starting_position")
    )
    ending = source.ends.option if source.ends is not None else read.spelled("ending_position")
    kafka = (source.starts or source.ends or PositionSpec()).form == "kafka"
    said = (
        f"beginning offset {start} is after the ending offset {end_excl}"
        if kafka
        else f"the beginning sequence number {start} is larger than the ending sequence number "
        f"{end_excl}"
    )
    raise RangeError(
        f"{starting} and {ending}: partition {info.partition_id}: {said} (its last event is "
        f"sequence number {info.last_enqueued_sequence_number}); give an end at or after the "
        f"start, or start at most at {info.last_enqueued_sequence_number + 1} (nothing new)"
    )


def _own_end_exclusive(read: ReadOptions, info: PartitionInfo) -> int:
    """Our own ``ending_position`` (inclusive forms) as an exclusive sequence number."""
    return resolve_position(read, info, read.ending_position, ending=True) + 1
