"""In-process fakes of the hub and the read+write step for pure run-logic tests, and a run
over them (:func:`make`: the in-memory store, :func:`config`, :func:`greedy_claim`).

They keep the contracts the real parts have: the hub numbers events per partition from 0 and
forgets the oldest ones on ``expire``; the ingestor reads exactly the requested inclusive
ranges (DataLossError on a gap) and its sink is keyed by (partition, start, end), so writing
the same range twice leaves it once, like the real idempotent writer.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from dagster_eventhub_ingest.ops.run.hub import PartitionInfo
from dagster_eventhub_ingest.ops.run.ingestor import Ingestor, SinkEvent
from dagster_eventhub_ingest.ops.run.processor import Processor
from dagster_eventhub_ingest.ops.run.settings import IngestSettings
from dagster_eventhub_ingest.ops.sinks.batch import BatchKey, PartitionWriteStats, batch_key
from dagster_eventhub_ingest.resources.errors import DataLossError, RangeError
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.sink import SinkSettings
from dagster_eventhub_ingest.resources.store.memory import InMemoryBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import HubRef, Ownership
from dagster_eventhub_ingest.resources.store.settings import StoreSettings

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


class FakeHub:
    """Partitions of numbered events ``(seq, body, enqueued_time)``."""

    def __init__(self, partitions: int = 4) -> None:
        self.events: dict[str, list[tuple[int, bytes, datetime]]] = {
            str(p): [] for p in range(partitions)
        }
        self.begin: dict[str, int] = {p: 0 for p in self.events}
        self.created_ms = 1_700_000_000_000
        self._lock = threading.Lock()

    def recreate(self) -> None:
        """Delete and re-create the hub under the same name: no events, numbers restart at 0."""
        with self._lock:
            self.events = {p: [] for p in self.events}
            self.begin = {p: 0 for p in self.events}
            self.created_ms += 60_000

    def hub_created_ms(self) -> int | None:
        return self.created_ms

    def send(self, pid: str, n: int) -> None:
        with self._lock:
            events = self.events[pid]
            for _ in range(n):
                seq = len(events)
                events.append((seq, f"{pid}-{seq}".encode(), T0 + timedelta(seconds=seq)))

    def send_all(self, n: int) -> None:
        for pid in self.events:
            self.send(pid, n)

    def expire(self, pid: str, before: int) -> None:
        self.begin[pid] = before

    def partition_ids(self) -> list[str]:
        return list(self.events)

    def partition_info(self, partition_ids: Sequence[str]) -> dict[str, PartitionInfo]:
        with self._lock:
            out = {}
            for pid in partition_ids:
                if pid not in self.events:
                    raise RangeError(f"unknown partition {pid}")
                last = len(self.events[pid]) - 1
                out[pid] = PartitionInfo(
                    pid,
                    begin_sequence_number=max(self.begin[pid], 0) if last >= 0 else 0,
                    last_enqueued_sequence_number=last,
                    last_enqueued_offset=str(last * 100) if last >= 0 else None,
                    last_enqueued_time=self.events[pid][-1][2] if last >= 0 else None,
                    is_empty=last < 0,
                )
            return out

    def enqueued_time_of(self, partition_id: str, sequence_number: int) -> datetime | None:
        events = self.events[partition_id]
        return events[sequence_number][2] if sequence_number < len(events) else None

    def enqueued_times(self, wanted: dict[str, int]) -> dict[str, datetime | None]:
        return {p: self.enqueued_time_of(p, s) for p, s in wanted.items()}


class FakeIngestor(Ingestor):
    """Reads ranges from a :class:`FakeHub` into a dict keyed like
    ``dagster_eventhub_ingest.ops.sinks.batch.batch_key``.

    The key is (partition, start, end), plus the generation for a re-created hub's batches.
    """

    def __init__(
        self, hub: FakeHub, before_write: Callable[[Mapping[str, Any]], None] | None = None
    ):
        self.hub = hub
        self.sink: dict[tuple[Any, ...], list[tuple[int, bytes]]] = {}
        self.calls: list[dict[str, tuple[int, int]]] = []
        #: The ``partition_infos`` of each call (the run's look the source checks against).
        self.infos_given: list[dict[str, Any]] = []
        self.before_write = before_write
        self.after_write: Callable[[Mapping[str, Any]], None] | None = None
        #: When each landed event was enqueued, by (batch key, sequence number).
        self.enqueued: dict[tuple[str, int], datetime] = {}
        self._lock = threading.Lock()

    @property
    def output_location(self) -> str | None:
        return "memory://sink"

    def batch_written(
        self, partition_id: str, start: int, end: int, generation: int | None = None
    ) -> bool | None:
        with self._lock:
            return _key(partition_id, start, end, generation) in self.sink

    def sink_batches(self) -> dict[str, list[BatchKey]]:
        with self._lock:
            found: dict[str, list[BatchKey]] = {}
            for pid, start, end, *gen in self.sink:
                found.setdefault(pid, []).append(BatchKey(pid, start, end, gen[0] if gen else None))
            return found

    def sink_event(self, batch: BatchKey, sequence_number: int) -> SinkEvent | None:
        with self._lock:
            rows = self.sink.get(_key(batch.partition_id, batch.start, batch.end, batch.generation))
        if rows is None or not any(seq == sequence_number for seq, _ in rows):
            return None
        return SinkEvent(
            str(sequence_number * 100), self.enqueued.get((batch.key, sequence_number))
        )

    def ingest(
        self,
        ranges: Mapping[str, tuple[int, int]],
        *,
        expired_before: Mapping[str, int] | None = None,
        generations: Mapping[str, int] | None = None,
        partition_infos: Mapping[str, Any] | None = None,
    ) -> dict[str, PartitionWriteStats]:
        self.calls.append(dict(ranges))
        self.infos_given.append(dict(partition_infos or {}))
        if self.before_write is not None:
            self.before_write(ranges)
        out = {}
        for pid, (start, end) in ranges.items():
            first = start
            if expired_before and pid in expired_before:
                first = max(start, self.hub.begin[pid])  # read what is left (on_data_loss=skip)
            if first < self.hub.begin[pid]:
                raise DataLossError(f"partition {pid}: events before {self.hub.begin[pid]} gone")
            rows = [(s, b) for s, b, _ in self.hub.events[pid][first : end + 1]]
            gen = (generations or {}).get(pid)
            evs = self.hub.events[pid][first : end + 1]
            with self._lock:
                # Keyed by the whole range (and generation), like eh_batch.
                self.sink[_key(pid, start, end, gen)] = rows
                for seq, _, when in evs:
                    self.enqueued[(batch_key(pid, start, end, gen), seq)] = when
            out[pid] = PartitionWriteStats(
                partition_id=pid,
                start=start,
                end=end,
                batch_key=batch_key(pid, start, end, gen),
                events=len(rows),
                bytes=sum(len(b) for _, b in rows),
                first_sequence_number=rows[0][0] if rows else None,
                last_sequence_number=rows[-1][0] if rows else None,
                first_enqueued_time=evs[0][2] if evs else None,
                last_enqueued_time=evs[-1][2] if evs else None,
                last_offset=str(end * 100),
            )
        if self.after_write is not None:
            self.after_write(ranges)
        return out

    def rows(self) -> list[tuple[str, int, str]]:
        """Every row in the sink as (partition, seq, body hash)."""
        with self._lock:
            return sorted(
                (pid, seq, hashlib.sha256(body).hexdigest())
                for (pid, *_), rows in self.sink.items()
                for seq, body in rows
            )

    def expected(self, upto: Mapping[str, int] | None = None) -> list[tuple[str, int, str]]:
        """Every event the hub holds (up to ``upto[pid]`` inclusive) in the same form."""
        return sorted(
            (pid, seq, hashlib.sha256(body).hexdigest())
            for pid, events in self.hub.events.items()
            for seq, body, _ in events
            if upto is None or seq <= upto.get(pid, -1)
        )


def _key(pid: str, start: int, end: int, generation: int | None) -> tuple[Any, ...]:
    return (pid, start, end) if generation is None else (pid, start, end, generation)


HUB = HubRef("ns.example", "hub", "$Default")
EH_CONN = "Endpoint=sb://ns.example/;SharedAccessKeyName=k;SharedAccessKey=s3cret"
ST_CONN = "DefaultEndpointsProtocol=http;AccountName=a;AccountKey=s3cret"


def config(**kw) -> IngestSettings:
    base = dict(
        eventhub=EventHubSettings(eventhub_name="hub", connection_string=EH_CONN),
        store=StoreSettings(container="c-test", connection_string=ST_CONN),
        sink=SinkSettings(path="/tmp/x"),
        max_events_per_partition=1000,
        lease_expiry_seconds=5.0,
        report_lag_seconds=True,
        poll_initial_seconds=0.001,
        poll_max_seconds=0.01,
    )
    base.update(kw)
    return IngestSettings(**base)  # type: ignore[arg-type]


def greedy_claim(store: PartitionStore, owner: str, expiry: float = 5.0):
    """Claim every free, released or expired target (what a strategy does for one owner)."""

    def claim(targets: Sequence[str]) -> dict[str, Ownership]:
        owned = store.list_ownership()
        now = store.now()
        got = {}
        for pid in targets:
            prev = owned.get(pid)
            live = prev is not None and not prev.is_expired(now, timedelta(seconds=expiry))
            if live and prev is not None and prev.owner_id != owner:
                continue
            own = store.claim(pid, owner, prev)
            if own is not None:
                got[pid] = own
        return got

    return claim


def make(
    hub: FakeHub,
    backend: InMemoryBackend | None = None,
    owner: str = "run-a",
    ingestor: FakeIngestor | None = None,
    **kw,
):
    """A run over ``hub`` and ``backend`` writing to ``ingestor`` (a new sink by default)."""
    backend = backend or InMemoryBackend()
    store = PartitionStore(backend, HUB)
    ingestor = ingestor if ingestor is not None else FakeIngestor(hub)
    cfg = config(**kw)
    proc = Processor(
        cfg,
        store,
        hub,
        ingestor,
        owner_id=owner,
        claim=greedy_claim(store, owner, cfg.lease_expiry_seconds),
    )
    return proc, store, ingestor


def info(pid="0", begin=0, last=99) -> PartitionInfo:
    return PartitionInfo(pid, begin, last)
