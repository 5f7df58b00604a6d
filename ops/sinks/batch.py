"""What one written range amounts to: the one per-partition statistics type.

The writer (:mod:`dagster_eventhub_ingest.ops.sinks.write`) aggregates it in the same Spark job that
writes; the run (:mod:`dagster_eventhub_ingest.ops.run.processor`) folds it into its report. Plain
values, no Spark import, so the run's pure logic and its tests use it without a session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

__all__ = ["BatchKey", "PartitionWriteStats", "batch_key", "parse_batch_key"]


#: The column holding each row's batch key; the output is partitioned by it.
BATCH_COLUMN = "eh_batch"
#: The column naming each row's source in a sink several sources share (``sources: many``).
SOURCE_COLUMN = "eh_source"


def batch_key(
    partition_id: str,
    start: int,
    end: int,
    generation: int | None = None,
    source: str | None = None,
) -> str:
    """The batch key of one intent: ``"<partition>-<start>-<end>"`` (inclusive sequence numbers).

    ``generation`` (``dagster_eventhub_ingest.resources.store.records.generation_of``: set once a
    hub deleted and re-created under its name was reset, its sequence numbers restarting at 0) makes
    it ``"<partition>-<start>-<end>-g<generation>"``, so the new hub's batches never replace the old
    hub's batches of the same range. None (a hub never re-created) keeps the plain key. ``source``
    (``dagster_eventhub_ingest.ops.sinks.source.SinkSource.tag``, only in a sink several sources
    share, ``sources: many``) ends it with ``-s<source>``, so one source's batches never replace
    another's.
    """
    key = f"{partition_id}-{start}-{end}"
    if generation is not None:
        key += f"-g{generation}"
    if source is not None:
        key += f"-s{source}"
    return key


_KEY = re.compile(
    r"(?P<pid>.+)-(?P<start>\d+)-(?P<end>\d+)(?:-g(?P<gen>\d+))?(?:-s(?P<src>[0-9a-f]+))?"
)


@dataclass(frozen=True)
class BatchKey:
    """A batch key read back from the sink (:func:`parse_batch_key`)."""

    partition_id: str
    start: int
    end: int
    generation: int | None = None
    source: str | None = None

    @property
    def key(self) -> str:
        """The key as written (:func:`batch_key`)."""
        return batch_key(self.partition_id, self.start, self.end, self.generation, self.source)


def parse_batch_key(key: str) -> BatchKey | None:
    """The parts of a key :func:`batch_key` made, or None for anything else."""
    match = _KEY.fullmatch(key)
    if match is None or int(match["end"]) < int(match["start"]):
        return None
    parsed = BatchKey(
        match["pid"],
        int(match["start"]),
        int(match["end"]),
        None if match["gen"] is None else int(match["gen"]),
        match["src"],
    )
    return parsed if parsed.key == key else None  # e.g. a leading zero: not ours


@dataclass(frozen=True)
class PartitionWriteStats:
    """What was written for one Event Hub partition; what the checkpoint and Dagster need.

    ``expected_events`` is the size of the intent's range; fewer ``events`` means a part of the
    range was skipped (``on_data_loss=skip``), see :attr:`missing_events`.
    """

    partition_id: str
    start: int
    end: int
    batch_key: str
    events: int = 0
    bytes: int = 0
    first_sequence_number: int | None = None
    last_sequence_number: int | None = None
    last_offset: str | None = None
    first_enqueued_time: datetime | None = None
    last_enqueued_time: datetime | None = None

    @property
    def expected_events(self) -> int:
        """Number of sequence numbers in the intent's range."""
        return self.end - self.start + 1

    @property
    def missing_events(self) -> int:
        """Sequence numbers of the range not in the output (0 unless data was skipped)."""
        return self.expected_events - self.events
