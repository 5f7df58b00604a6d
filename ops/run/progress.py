"""Live progress of a run: what it is reading, what it has landed, at a steady interval.

The run calls a ``ProgressFn`` (the CLI draws a bar, Dagster writes the event log) with a
:class:`RunProgress` when it snapshots, every ``interval`` seconds while Spark reads, and after
each checkpoint. Spark's executors cannot report events mid-task to the driver in a way that
works on every deployment (accumulators do not exist under Spark Connect), so each reader
writes its running count to a small blob in the partition store
(:mod:`dagster_eventhub_ingest.resources.eventhubs_source.progress`) and the driver lists them
(:class:`ReadCounter`): during a read every range in flight shows the events read of it so far, on
every engine, plus Spark's task counts on a classic session (:func:`spark_task_counts`). Events
count as *landed* (the bar's percentage) once their range is checkpointed.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from dagster_eventhub_ingest.resources.eventhubs_source.progress import (
    ProgressTarget,
    delete_progress,
    read_counts,
    totals,
)
from dagster_eventhub_ingest.resources.ranges import SeqRange

if TYPE_CHECKING:
    from dagster_eventhub_ingest.ops.run.log import TeeLog
    from dagster_eventhub_ingest.resources.store.records import BlobBackend, HubRef
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings

__all__ = [
    "PHASES",
    "PartitionProgress",
    "PhaseClock",
    "ProgressFeed",
    "ProgressFn",
    "ReadCounter",
    "ReadStatus",
    "ReadTicker",
    "RunProgress",
    "phase",
    "spark_task_counts",
]

logger = logging.getLogger(__name__)

#: The phases a run reports (``RunReport.phases``), in the order they first happen.
PHASES = (
    "startup",  # CLI: interpreter, imports, config file; Airflow operator: imports, connections
    "management",  # sink layout check, hub properties, consumer group, store client
    "snapshot",  # checkpoints, ownerships and partition bounds before anything is claimed
    "claims",  # claim cycles (incl. the join grace) and the store reads of each loop
    "planning",  # SDK checkpoints, next step per partition, intents written
    "spark_start",  # starting the SparkSession (only when there is something to read)
    "read_write",  # the Spark job: executors read the ranges and write the sink
    "verify",  # reading the batch's row count back from the sink
    "checkpoint",  # checkpoints moved and leases released
    "report",  # the final look at the hub and store for the report (lag)
    "spark_stop",  # CLI, Airflow's operator: the session and JVM the run started, stopped
)


class PhaseClock:
    """Wall and driver-CPU seconds per phase of one run; nested phases are not double counted.

    ``with clock.phase("claims"): ...`` adds to ``claims``; a phase entered inside another
    (``spark_start`` inside ``read_write``) is subtracted from the outer one, so the phases
    add up to the run's time. CPU is this process's (``time.process_time``): a local Spark's
    JVM and Python workers are other processes (bench/ingest_throughput.py counts them).
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self._stack: list[list[float]] = []  # per open phase: [child wall, child cpu]

    def add(self, name: str, seconds: float, cpu_seconds: float = 0.0) -> None:
        """Add time measured elsewhere (e.g. the CLI's start-up) to ``name``."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + cpu_seconds

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as ``name`` (exclusive of phases nested in it)."""
        wall0, cpu0 = time.perf_counter(), time.process_time()
        self._stack.append([0.0, 0.0])
        token = _CLOCK.set(self)
        try:
            yield
        finally:
            _CLOCK.reset(token)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            child_wall, child_cpu = self._stack.pop()
            self.add(name, wall - child_wall, cpu - child_cpu)
            if self._stack:
                self._stack[-1][0] += wall
                self._stack[-1][1] += cpu

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Make this the clock of :func:`phase` in the block, without timing the block itself
        (e.g. the session start, a phase only when the session does start)."""
        token = _CLOCK.set(self)
        try:
            yield
        finally:
            _CLOCK.reset(token)

    def as_dict(self) -> dict[str, dict[str, float]]:
        """``{phase: {"seconds": s, "cpu_seconds": c}}`` in :data:`PHASES` order."""
        names = [p for p in PHASES if p in self.seconds]
        names += [p for p in self.seconds if p not in PHASES]
        return {
            p: {"seconds": round(self.seconds[p], 3), "cpu_seconds": round(self.cpu_seconds[p], 3)}
            for p in names
        }

    def line(self) -> str:
        """``startup 0.9 s, management 0.4 s, ...`` for a log line."""
        return ", ".join(f"{p} {v['seconds']:.2f} s" for p, v in self.as_dict().items())


_CLOCK: contextvars.ContextVar[PhaseClock | None] = contextvars.ContextVar(
    "ehingest_phase_clock", default=None
)


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as ``name`` on the clock of the phase around it; nothing without one.

    For code below the run (the writer's verification, the session start) that has no clock
    passed to it.
    """
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    with clock.phase(name):
        yield


@dataclass
class PartitionProgress:
    """One target partition: what this run is to land, has landed, and reads right now."""

    partition_id: str
    target_events: int = 0
    landed_events: int = 0
    reading: SeqRange | None = None
    done: bool = False
    #: Events of ``reading`` the readers reported so far (live read progress; 0 unknown).
    read_events: int = 0
    #: This run claimed it at least once: it is part of the run's share.
    mine: bool = False

    @property
    def reading_events(self) -> int:
        """Events in the range being read (0 when idle)."""
        return 0 if self.reading is None else self.reading.size


@dataclass
class RunProgress:
    """A snapshot of the whole run, for a progress bar or a log line."""

    owner_id: str
    phase: str
    elapsed_seconds: float
    partitions: dict[str, PartitionProgress] = field(default_factory=dict)
    spark_tasks: tuple[int, int] | None = None
    #: Seconds the Spark session has been starting (phase ``spark starting``) or took to
    #: start (reported once it is up); None when this run started no session.
    spark_start_seconds: float | None = None

    @property
    def share(self) -> list[PartitionProgress]:
        """The partitions this run claimed; before its first claim, every target partition."""
        mine = [p for p in self.partitions.values() if p.mine]
        return mine or list(self.partitions.values())

    @property
    def landed_events(self) -> int:
        """Events checkpointed by this run so far."""
        return sum(p.landed_events for p in self.partitions.values())

    @property
    def target_events(self) -> int:
        """Events of this run's share: what is left to land in the partitions it claimed, plus
        what it landed (peers' partitions do not count, so a run that splits the work with
        others still reaches its total)."""
        return sum(max(p.target_events, p.landed_events) for p in self.share)

    def line(self) -> str:
        """One line per update, e.g. for the event log or a non-terminal CLI.

        ``reading: 30000/40000 events landed of this run's share (partitions 0, 1); partition 0
        read 12000/20000, landed 10000/20000; ...; 2/4 partitions up to date (2, 3 by peers)``.
        """
        if self.phase == "spark starting":
            return (
                f"starting the Spark session: {self.spark_start_seconds or 0:.0f} s so far; "
                f"{self.elapsed_seconds:.0f} s"
            )
        share = self.share
        mine = [p for p in share if p.mine]
        parts = [
            f"{self.phase}: {self.landed_events}/{self.target_events} events landed"
            + (
                f" of this run's share (partitions {', '.join(p.partition_id for p in mine)})"
                if mine
                else ""
            )
        ]
        for p in mine:
            landed = f"landed {p.landed_events}/{max(p.target_events, p.landed_events)}"
            if p.reading is not None:
                read = f"read {min(p.read_events, p.reading_events)}/{p.reading_events}"
                parts.append(f"partition {p.partition_id} {read}, {landed}")
            else:
                parts.append(f"partition {p.partition_id} {landed}")
        done = [p for p in self.partitions.values() if p.done]
        by_peers = [p.partition_id for p in done if not p.mine]
        parts.append(
            f"{len(done)}/{len(self.partitions)} partitions up to date"
            + (f" ({', '.join(by_peers)} by peers)" if by_peers and mine else "")
        )
        if self.spark_start_seconds is not None and self.phase != "finished":
            parts.append(f"Spark started in {self.spark_start_seconds:.1f} s")
        if self.spark_tasks is not None:
            parts.append(f"Spark tasks {self.spark_tasks[0]}/{self.spark_tasks[1]}")
        parts.append(f"{self.elapsed_seconds:.0f} s")
        return "; ".join(parts)


ProgressFn = Callable[[RunProgress], None]


def spark_task_counts(spark: Any) -> tuple[int, int] | None:
    """(completed, total) tasks of the session's active stages, or None where not available.

    Uses the classic ``SparkContext.statusTracker()``; a Spark Connect session has no
    SparkContext on the client, so this returns None there instead of failing.
    """
    try:
        from pyspark.sql.utils import is_remote

        if is_remote():
            return None
    except ImportError:  # older pyspark: no Connect either
        pass
    try:
        tracker = spark.sparkContext.statusTracker()
        done = total = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        return (done, total) if total else None
    except Exception:  # any session without a reachable SparkContext (e.g. a Connect one)
        return None


class ReadTicker:
    """Calls ``tick()`` every ``interval`` seconds on a daemon thread until stopped."""

    def __init__(self, interval: float, tick: Callable[[], None]) -> None:
        self.interval = interval
        self.tick = tick
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ReadTicker:
        if self.interval > 0:
            self._thread = threading.Thread(target=self._loop, name="read-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):  # informational: never break the read
                self.tick()


def progress_targets(
    bounds: Mapping[str, int | None], checkpoints: Mapping[str, int | None]
) -> dict[str, PartitionProgress]:
    """Per-partition progress at the snapshot: events between the checkpoint and the bound."""
    out = {}
    for pid, bound in bounds.items():
        cp = checkpoints.get(pid)
        target = 0 if bound is None else max(0, bound - (-1 if cp is None else cp))
        out[pid] = PartitionProgress(pid, target_events=target, done=target == 0)
    return out


class ReadCounter:
    """The driver's side of live read progress
    (:mod:`dagster_eventhub_ingest.resources.eventhubs_source.progress`).

    One instance per run: :meth:`start` names a new folder for each read (the target goes to
    the readers in the data-source options), :meth:`counts` lists it (one store call), and
    :meth:`finish` deletes what the readers wrote. Nothing here can fail a read.
    """

    def __init__(
        self,
        store: StoreSettings,
        backend: BlobBackend,
        hub: HubRef,
        owner_id: str,
        interval: float,
    ) -> None:
        self.store = store
        self.backend = backend
        self.hub = hub
        self.owner_id = owner_id
        self.interval = interval
        self.target: ProgressTarget | None = None
        self._started = 0.0

    def start(self) -> ProgressTarget:
        """The target of the next read (a fresh folder, so no stale count is ever summed)."""
        import uuid

        # Readers write twice per interval, so every update of the driver sees a fresh count.
        self.target = ProgressTarget.for_read(
            self.store, self.hub, self.owner_id, uuid.uuid4().hex[:12], self.interval / 2
        )
        self._started = time.monotonic()
        return self.target

    def counts(self) -> dict[str, int]:
        """Events read so far per partition of the read in flight ({} when none)."""
        target = self.target
        if target is None:
            return {}
        try:
            found = totals(read_counts(self.backend, target.prefix))
        except Exception:  # informational: a store hiccup only skips one update
            logger.debug("could not list read progress", exc_info=True)
            return {}
        return found

    def finish(self) -> None:
        """Forget the read and delete its blobs. A read shorter than ``interval`` costs no
        store call: its readers wrote nothing (each writes only after ``interval`` seconds)."""
        target, self.target = self.target, None
        if target is not None and time.monotonic() - self._started >= target.interval:
            delete_progress(self.backend, target.prefix)


class ReadStatus(Protocol):
    """What the read step tells about the read in flight (the run's ``Ingestor`` does)."""

    def task_counts(self) -> tuple[int, int] | None: ...

    def read_counts(self) -> dict[str, int]: ...


class ProgressFeed:
    """A run's live progress and where it goes: ``on_progress``, and the log when asked.

    Args:
        progress: the run's progress, updated in place by the run's steps.
        reads: tells the counts of the read in flight.
        log: the run's log. hub_desc / owner_id: named in each progress line.
        on_progress: receives ``progress`` on every :meth:`emit` (None: nobody).
        interval: seconds between updates during a long step (0: none), see :meth:`ticker`.
    """

    def __init__(
        self,
        progress: RunProgress,
        reads: ReadStatus,
        log: TeeLog,
        *,
        hub_desc: str,
        owner_id: str,
        on_progress: ProgressFn | None,
        interval: float,
    ) -> None:
        self.progress = progress
        self.reads = reads
        self.log = log
        self.hub_desc = hub_desc
        self.owner_id = owner_id
        self.on_progress = on_progress
        self.interval = interval
        self._started = time.monotonic()

    def emit(self, phase: str, *, log: bool = False) -> None:
        """Send the current progress to ``on_progress`` (and the log during long reads)."""
        progress = self.progress
        progress.phase = phase
        progress.elapsed_seconds = time.monotonic() - self._started
        progress.spark_tasks = self.reads.task_counts() if phase == "reading" else None
        if phase == "reading":
            # Live counts the readers wrote to the store; never more than the range in flight.
            for pid, n in self.reads.read_counts().items():
                part = progress.partitions.get(pid)
                if part is not None and part.reading is not None:
                    part.read_events = max(part.read_events, n)
        if log:
            self.log.info(f"progress hub={self.hub_desc} owner={self.owner_id}: {progress.line()}")
        if self.on_progress is not None:
            try:
                self.on_progress(progress)
            except Exception:  # a broken progress display must not fail the run
                logger.debug("on_progress failed", exc_info=True)

    def ticker(self, tick: Callable[[], None]) -> ReadTicker:
        """Calls ``tick()`` every :attr:`interval` seconds while the returned context is open."""
        return ReadTicker(self.interval, tick)
