"""Inclusive sequence-number ranges of one partition: parsing, splitting, skipped gaps."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from dagster_eventhub_ingest.resources.azure.hub_client import partition_id_key
from dagster_eventhub_ingest.resources.errors import ConfigurationError, RangeError
from dagster_eventhub_ingest.resources.ranges import SeqRange


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
    def range(self) -> SeqRange:
        """The sequence numbers, without the partition."""
        return SeqRange(self.start, self.end)

    @property
    def count(self) -> int:
        """Number of sequence numbers in the range."""
        return self.range.size

    def __str__(self) -> str:
        return f"partition {self.partition_id} [{self.start}, {self.end}]"


@dataclass(frozen=True)
class DataGap:
    """Sequence numbers of a requested range that could not be read (``on_data_loss=skip``)."""

    partition_id: str
    start: int
    end: int
    reason: str


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
    return tuple(sorted(out, key=lambda r: partition_id_key(r.partition_id)))


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
