"""The sink knows who writes it: the source it holds the events of, recorded at its first write.

A source is a namespace, hub and consumer group. Batch keys (``<partition>-<start>-<end>``) name
partitions and sequence numbers, not the hub: a second hub's batches would replace the first
hub's in the sink, and a second consumer group would land the same events again. So before
anything is claimed, a run reads the sink's record (:mod:`dagster_eventhub_ingest.ops.sinks.place`
says where each kind of sink keeps it) and refuses a sink recorded for another source, naming
both; a sink without a record gets this run's, atomically (one of two racing writers wins, the
other reads the winner's record). A sink written before records existed is adopted by the
first run that finds it.

``sources: many`` (a sink setting) lets several sources share one sink on purpose: the record
says so, every batch key ends with the source's tag (``-s<tag>``, :attr:`SinkSource.tag`) and
every row carries the source in the ``eh_source`` column, so no source's batch ever replaces
another's.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster_eventhub_ingest.ops.sinks.batch import SOURCE_COLUMN
from dagster_eventhub_ingest.ops.sinks.checks import sink_location
from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.sink import SinkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dagster_eventhub_ingest.ops.sinks.place import SinkPlace
    from dagster_eventhub_ingest.resources.store.records import HubRef

__all__ = ["SOURCE_COLUMN", "SinkRecord", "SinkSource", "check_sink_source"]

logger = logging.getLogger(__name__)

#: The record's version; a record of a later version is refused (the run is older than it).
RECORD_VERSION = "1"
_PREFIX = "ehingest."
_KEYS = {
    "version": f"{_PREFIX}version",
    "sources": f"{_PREFIX}sources",
    "namespace": f"{_PREFIX}source.namespace",
    "eventhub": f"{_PREFIX}source.eventhub",
    "consumer_group": f"{_PREFIX}source.consumergroup",
    "format": f"{_PREFIX}format",
    "partition_by": f"{_PREFIX}partitionby",
    "batch_key": f"{_PREFIX}batchkey",
}


@dataclass(frozen=True)
class SinkSource:
    """Where a sink's events come from: a namespace, a hub and a consumer group (lower-cased,
    as Event Hubs and the checkpoint store compare them)."""

    namespace: str
    eventhub: str
    consumer_group: str

    @classmethod
    def of(cls, hub: HubRef) -> SinkSource:
        """The source a run of ``hub`` writes."""
        return cls(
            hub.fully_qualified_namespace.lower(),
            hub.eventhub_name.lower(),
            hub.consumer_group.lower(),
        )

    @property
    def name(self) -> str:
        """``namespace/hub/consumer group``: the ``eh_source`` column's value."""
        return f"{self.namespace}/{self.eventhub}/{self.consumer_group}"

    @property
    def tag(self) -> str:
        """A short hash of :attr:`name` that ends this source's batch keys in a shared sink
        (plain characters: batch keys are directory names and glob patterns)."""
        return hashlib.sha256(self.name.encode()).hexdigest()[:12]

    def describe(self) -> str:
        """For messages: every part named."""
        return (
            f"namespace {self.namespace!r}, hub {self.eventhub!r}, consumer group "
            f"{self.consumer_group!r}"
        )


@dataclass(frozen=True)
class SinkRecord:
    """What a sink records about itself: its (first) source, whether several sources share it,
    and the layout its batches are written in."""

    source: SinkSource
    sources: str
    format: str
    partition_by: tuple[str, ...]

    @classmethod
    def for_run(cls, sink: SinkSettings, hub: HubRef) -> SinkRecord:
        """The record a run of ``hub`` writing ``sink`` makes."""
        return cls(SinkSource.of(hub), sink.sources, sink.format, tuple(sink.partition_by))

    @property
    def batch_key(self) -> str:
        """How batch keys are made in this sink (recorded for people and tools reading it)."""
        key = "<partition>-<start>-<end>[-g<generation>]"
        return f"{key}-s<source>" if self.sources == "many" else key

    def properties(self) -> dict[str, str]:
        """The record as string properties (a file's JSON, table properties)."""
        return {
            _KEYS["version"]: RECORD_VERSION,
            _KEYS["sources"]: self.sources,
            _KEYS["namespace"]: self.source.namespace,
            _KEYS["eventhub"]: self.source.eventhub,
            _KEYS["consumer_group"]: self.source.consumer_group,
            _KEYS["format"]: self.format,
            _KEYS["partition_by"]: ",".join(self.partition_by),
            _KEYS["batch_key"]: self.batch_key,
        }

    @classmethod
    def from_properties(cls, found: Mapping[str, str], where: str) -> SinkRecord:
        """The record ``found`` in ``where``; ConfigurationError when it is not one this
        version reads."""
        missing = [k for k in _KEYS.values() if k not in found]
        if missing or found[_KEYS["version"]] != RECORD_VERSION:
            raise ConfigurationError(
                f"{where}: the record of the sink's source is incomplete or of another version "
                f"({'missing ' + ', '.join(missing) if missing else found[_KEYS['version']]}); "
                "nothing was claimed. Restore it, or, if this version of the package wrote the "
                "sink, delete it to let the next run record its own source."
            )
        partition_by = found[_KEYS["partition_by"]]
        return cls(
            SinkSource(
                found[_KEYS["namespace"]], found[_KEYS["eventhub"]], found[_KEYS["consumer_group"]]
            ),
            found[_KEYS["sources"]],
            found[_KEYS["format"]],
            tuple(c for c in partition_by.split(",") if c),
        )

    def problem(self, recorded: SinkRecord, location: str, where: str) -> str | None:
        """Why this run may not write a sink that recorded ``recorded``, or None."""
        if recorded.sources == "many" and self.sources == "many":
            pass  # any source, its batches under its own keys
        elif recorded.sources == "many":
            return (
                f"sink {location} is shared by several sources (sources: many, recorded in "
                f"{where}), but this run writes it as its only source's (sources: one) and would "
                "key its batches without its source. Set the sink's sources: many for this run "
                "too (its batch keys and rows then name its source), or write to another sink; "
                "nothing was claimed."
            )
        elif self.sources == "many":
            return (
                f"sink {location} holds the events of one source ({recorded.source.describe()}; "
                f"sources: one, recorded in {where}), and its batches name no source. A sink "
                "several sources share (sources: many) must be new: write them to a new path or "
                "table, or set sources: one; nothing was claimed."
            )
        elif recorded.source != self.source:
            return (
                f"sink {location} holds the events of {recorded.source.describe()} (recorded in "
                f"{where} at its first write), but this run reads {self.source.describe()}. Its "
                "batches would replace or duplicate the ones there (batch keys name partitions "
                "and sequence numbers, not the source), so nothing was claimed or written. Give "
                "this source its own sink path or table; or, to keep several sources in one "
                "sink, write them all to a new sink with sources: many (every batch key and row "
                f"then names its source, column {SOURCE_COLUMN!r})."
            )
        if (recorded.format, recorded.partition_by) != (self.format, self.partition_by):
            return (
                f"sink {location} was recorded with format {recorded.format!r} partitioned by "
                f"{list(recorded.partition_by)} ({where}), but this run writes format "
                f"{self.format!r} partitioned by {list(self.partition_by)}: two layouts in one "
                "sink cannot be read together, and a replayed batch would land twice. Set them "
                "back, or write to a new path or table; nothing was claimed."
            )
        return None


def check_sink_source(
    sink: SinkSettings, hub: HubRef, spark: Callable[[], SparkSession]
) -> SinkRecord:
    """Refuse a sink recorded for another source; record this run's source on a new one.

    Called before anything is claimed. ``spark`` returns the session (started if need be):
    only tables and paths outside this machine need it.

    Returns:
        The sink's record as it stands (this run's, or the one it was checked against).

    Raises:
        ConfigurationError: the sink belongs to another source, or is shared and this run
            does not say so (or the reverse), or was written in another layout; names both
            and what to do.
    """
    from dagster_eventhub_ingest.ops.sinks.place import sink_place
    from dagster_eventhub_ingest.resources.errors import SinkError

    mine = SinkRecord.for_run(sink, hub)
    place = sink_place(sink, spark)
    location = repr(sink_location(sink))
    try:
        return _check(mine, place, location)
    except (ConfigurationError, SinkError):
        raise
    except Exception as exc:
        from dagster_eventhub_ingest.ops.sinks.failures import failure_cause, sink_error

        raise sink_error(
            f"sink {sink.format} {location}: cannot read or record the source it holds the "
            f"events of ({place.where}): {failure_cause(exc)}; nothing was claimed. Check that the "
            "location exists and is writable",
            exc,
        ) from exc


def _check(mine: SinkRecord, place: SinkPlace, location: str) -> SinkRecord:
    """:func:`check_sink_source` once the place is known."""
    for _ in range(5):
        found = place.read_record()
        if found is not None:
            recorded = SinkRecord.from_properties(found, place.where)
            problem = mine.problem(recorded, location, place.where)
            if problem is not None:
                raise ConfigurationError(problem)
            return recorded
        if mine.sources == "many" and place.holds_data():
            raise ConfigurationError(
                f"sink {location} holds batches written before sinks recorded their source, "
                "which name no source; a sink several sources share (sources: many) must be "
                "new. Write them to a new path or table (or let its own source adopt it with "
                "sources: one); nothing was claimed."
            )
        if place.holds_data():
            logger.warning(
                "sink %s has no record of its source (written by an earlier version): adopting "
                "it for %s",
                location,
                mine.source.describe(),
            )
        place.create_record(mine.properties())
    raise ConfigurationError(
        f"sink {location}: could not record its source in {place.where} (another writer kept "
        "changing it); nothing was claimed. Run again."
    )
