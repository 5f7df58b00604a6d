"""Ingest throughput, fixed cost and driver memory: raw SDK loop vs driver loop vs this pipeline.

For each size N (default 100k and 1M events of 1 KB, spread over 4 partitions), the same
emulator data is read by:

(a1) (``--modes s``) the raw azure-eventhub receive loop in one process: one client's
    ``receive_batch`` without ``partition_id`` (the SDK's own event processor reads every
    partition), count events and bytes, keep nothing. The fastest one-process loop measured
    (partitions one after another, or a thread and a client per partition, are slower), and
    the baseline of targets 1 and 2 ("the single-process raw SDK receive loop");
(a) the same loop in P processes (``--parallelism``), each reading its share of the
    partitions one after another (``receive_batch`` with ``partition_id``): the multi-core
    ceiling; the targets' ratios against it are printed too, as information;
(e) ``ehingest run`` as a scheduler starts it, cold: process start to exit (interpreter,
    imports, Spark start, claims, read/write, verify, checkpoints, report);
(n) ``ehingest run`` again right after (e): nothing to read (must not start Spark, < 1.5 s);
(d) (e) into a ``deltalake`` sink (delta-rs: Spark's tasks write the Parquet files);
(w) ``run_ingestion`` in a session that already ran once (a Dagster code server's reuse);
(c) ``run_ingestion`` in-process with the JVM up (session start not timed);
(b) the hand-written driver loop: receive every event on the driver into a Python list,
    ``spark.createDataFrame(rows)``, write Parquet (runs the JVM out of heap at 1M).

Then one hot partition (``--hot``, default 500k events): one SDK receiver ((a) with P=1: on one
partition, exactly one receiver) vs the pipeline with ``--hot-readers`` sub-range readers on
``local[P]``.

Every local Spark JVM starts from the driver's class-data archive (resources/spark/jvm_archive.py),
as every run on a machine does once it is written; ``--jvm-archive write`` (the default) writes it
first and prints what that costs once, ``off`` measures without it (a fresh host's first run).
bench/fresh_host.py measures runs on an empty cache.

Every variant runs in its own process. Each figure carries the CPU seconds of its whole process
tree (the JVM and Spark's Python workers included) and the load average when it ran: on a shared,
loaded machine wall times are inflated, CPU seconds and the side-by-side ratios much less. For
(e), (d), (w), (c) and (b) that CPU is also split by process (the driver, the JVM, Spark's Python
processes) and the JVM's by thread role (Spark's task threads, the JIT compilers, the garbage
collector, the rest; from ``/proc``, Linux), with the peak RSS of the largest executor Python
worker (what each executor core adds to the memory of a cluster's node), and the emulator's own
CPU while serving it (it shares the cores with every variant). The run's own phase
timings (``RunReport.phases``) are printed for (e), (d), (n), (w), (c). The targets
(docs/benchmarks.md) are checked at the end; ``--json`` prints every figure, ratio and target as
one JSON document on stdout (the commentary goes to stderr). No timed tests: the targets live
here.

    source scripts/_bootstrap.sh
    uv run --frozen python bench/ingest_throughput.py --json              # 100k, 1M, hot 500k
    uv run --frozen python bench/ingest_throughput.py --events 20000 100000 --hot 50000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import multiprocessing as mp
import os
import queue
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dagster_eventhub_ingest.emulator.testing import emulator_subprocess  # noqa: E402

HUB = "bench"


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _tree_cpu(pid: int | None = None) -> float:
    """User+system CPU seconds of a process and its live descendants (the JVM, Spark's Python
    workers); the figure that survives a loaded machine, unlike wall time."""
    sampler = _TreeCpuSampler(os.getpid() if pid is None else pid)
    sampler.sample()
    return sampler.cpu_seconds


#: A JVM thread's role by the start of its name (``/proc/<pid>/task/<tid>/comm``).
_JVM_THREAD_ROLES = (
    ("tasks", ("Executor task",)),
    ("compiler", ("C1 Compiler", "C2 Compiler")),
    ("gc", ("VM Thread", "GC Thread", "G1 ")),
)


def _maps_own_archive(pid: int) -> bool | None:
    """Whether a JVM maps a class-data archive besides the JDK's default one (``lib/server/``):
    the driver's archive (resources/spark/jvm_archive.py); None where ``/proc`` can't tell."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    return any(line.endswith(".jsa") and "/lib/server/" not in line for line in maps.splitlines())


def _process_kind(proc: Any) -> str | None:
    """The part of a run a process is: ``jvm``, ``python_workers`` (every Python process Spark
    starts: executor workers, data source planners) or ``driver`` (the run's own process); None
    for a process that has exited (a zombie has no command line)."""
    if "java" in proc.name():
        return "jvm"
    command = proc.cmdline()
    if not command:
        return None
    return "python_workers" if "pyspark" in " ".join(command[:4]) else "driver"


def _jvm_threads(pid: int) -> dict[int, tuple[str, float]]:
    """CPU seconds of each thread of a JVM, with its role (Linux ``/proc``; {} elsewhere)."""
    out: dict[int, tuple[str, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            comm = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        role = next((r for r, starts in _JVM_THREAD_ROLES if comm.startswith(starts)), "other")
        out[int(task.name)] = (role, (int(fields[11]) + int(fields[12])) / tick)
    return out


class _TreeCpuSampler(threading.Thread):
    """Samples the CPU seconds of every process of a tree (by pid, the last value seen), so
    processes that exit before the end (Python workers, the JVM at shutdown) still count; and
    of every JVM thread, by role (its compilers, garbage collector, Spark's task threads).

    ``baseline()`` first (an in-process run's tree is already running): only what each process
    and thread spends after it counts."""

    def __init__(self, pid: int, period: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.period = period
        self.seen: dict[int, tuple[str, float]] = {}
        self.threads: dict[int, tuple[str, float]] = {}
        self._base: dict[int, float] = {}
        self._base_threads: dict[int, float] = {}
        self.worker_peak_rss_mb = 0.0
        #: Whether the JVM mapped the driver's class-data archive (None: no JVM seen).
        self.jvm_archive_mapped: bool | None = None
        self.stop = threading.Event()

    def sample(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for proc in procs:
            try:
                t = proc.cpu_times()
                # A process that has exited keeps the kind it was last seen as.
                kind = _process_kind(proc) or self.seen.get(proc.pid, ("driver", 0.0))[0]
            except psutil.Error:
                continue
            self.seen[proc.pid] = (kind, t.user + t.system)
            if kind == "jvm":
                self.threads.update(_jvm_threads(proc.pid))
                mapped = _maps_own_archive(proc.pid)
                if mapped is not None:
                    self.jvm_archive_mapped = bool(self.jvm_archive_mapped) or mapped
            elif kind == "python_workers":
                with contextlib.suppress(psutil.Error):
                    # An executor's Python worker (or its daemon), not a data source planner.
                    if proc.cmdline()[-1:] == ["pyspark.worker"]:
                        rss = proc.memory_info().rss / 2**20
                        self.worker_peak_rss_mb = max(self.worker_peak_rss_mb, rss)

    def baseline(self) -> None:
        self.sample()
        self._base = {pid: cpu for pid, (_, cpu) in self.seen.items()}
        self._base_threads = {tid: cpu for tid, (_, cpu) in self.threads.items()}

    def run(self) -> None:
        while not self.stop.wait(self.period):
            self.sample()

    def finish(self) -> None:
        """Stop sampling, after one last sample."""
        self.stop.set()
        self.sample()

    @staticmethod
    def _since(
        seen: dict[int, tuple[str, float]], base: dict[int, float], labels: tuple[str, ...]
    ) -> dict[str, float]:
        """CPU seconds per label spent after ``base`` (per pid or tid)."""
        out = dict.fromkeys(labels, 0.0)
        for key, (label, cpu) in seen.items():
            out[label] += cpu - base.get(key, 0.0)
        return {k: round(v, 2) for k, v in out.items()}

    @property
    def by_kind(self) -> dict[str, float]:
        return self._since(self.seen, self._base, ("driver", "jvm", "python_workers"))

    @property
    def jvm_threads(self) -> dict[str, float]:
        labels = (*(role for role, _ in _JVM_THREAD_ROLES), "other")
        return self._since(self.threads, self._base_threads, labels)

    @property
    def cpu_seconds(self) -> float:
        return sum(self.by_kind.values())

    def figures(self) -> dict[str, Any]:
        """The run's CPU figures: in total, by process kind, and the JVM's by thread role; and
        the peak RSS of the largest executor Python worker (sampled; 0 when none ran)."""
        return {
            "cpu_seconds": round(self.cpu_seconds, 2),
            "cpu_by_process": self.by_kind,
            "jvm_cpu_by_thread": self.jvm_threads,
            "python_worker_peak_rss_mb": round(self.worker_peak_rss_mb),
            "jvm_archive_mapped": self.jvm_archive_mapped,
        }


def _in_process_cpu() -> _TreeCpuSampler:
    """A started sampler of this process's tree from now on (an in-process run: (b), (c), (w));
    every 0.5 s, as this process's own CPU is part of what it measures."""
    sampler = _TreeCpuSampler(os.getpid(), period=0.5)
    sampler.baseline()
    sampler.start()
    return sampler


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (``uptime``), recorded with every figure."""
    return [round(x, 2) for x in os.getloadavg()]


@contextmanager
def emulator_process(partitions: int) -> Iterator[str]:
    """The emulator in its own process with one hub; yields its connection string."""
    with emulator_subprocess({HUB: partitions}) as (conn, _proc):
        yield conn


def _own_cpu(pid: int) -> float:
    """User+system CPU seconds of one process, without its children (0 once it is gone)."""
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system


def _settings(conn: str) -> Any:
    from dagster_eventhub_ingest.resources.settings import EventHubSettings

    return EventHubSettings(eventhub_name=HUB, connection_string=conn)


def send(conn: str, partitions: int, events: int, size: int) -> float:
    """Fill every partition evenly with ``events`` bodies of ``size`` bytes; seconds taken."""
    from azure.eventhub import EventData

    producer = _settings(conn).producer_client()
    per = events // partitions
    t0 = time.perf_counter()
    try:
        for p in range(partitions):
            batch = producer.create_batch(partition_id=str(p))
            for i in range(per):
                body = (f"{p}:{i}:".encode() + os.urandom(size // 2).hex().encode())[:size]
                try:
                    batch.add(EventData(body))
                except ValueError:
                    producer.send_batch(batch)
                    batch = producer.create_batch(partition_id=str(p))
                    batch.add(EventData(body))
            if len(batch):
                producer.send_batch(batch)
    finally:
        producer.close()
    return time.perf_counter() - t0


#: Seconds a raw loop may take to get its share; past it, it raises naming what each partition gave.
RECEIVE_TIMEOUT = 1800.0


def _receive(
    conn: str,
    count: int,
    *,
    partition: str | None = None,
    partitions: int = 1,
    keep: list | None = None,
) -> int:
    """SDK ``receive_batch`` from the start until ``count`` events of each partition; body bytes.

    One client. With ``partition``, that partition's receiver (``partition_id=``); without, the
    client's own event processor (no ``partition_id``), which reads every partition of the hub
    (``partitions`` of them) in one thread: the idiomatic one-process loop. Events past a
    partition's ``count`` are not counted or kept. Raises ``TimeoutError`` naming what each
    partition delivered if not every partition has delivered ``count`` within
    ``RECEIVE_TIMEOUT``.
    """
    from azure.eventhub._transport._pyamqp_transport import PyamqpTransport

    pids = [partition] if partition is not None else [str(p) for p in range(partitions)]
    # The stock SDK: the project's own transport
    # (dagster_eventhub_ingest.resources.azure.transport) is not the raw loop's to have.
    client = _settings(conn).consumer_client(amqp_transport=PyamqpTransport)
    got = dict.fromkeys(pids, 0)
    nbytes = dict.fromkeys(pids, 0)
    errors: list[str] = []
    done = threading.Event()

    def on_batch(ctx: Any, events: list) -> None:
        pid = ctx.partition_id
        for ev in events:
            if got[pid] >= count:
                break
            body = b"".join(ev.body)
            nbytes[pid] += len(body)
            got[pid] += 1
            if keep is not None:
                keep.append(
                    (body, pid, ev.offset, ev.sequence_number, ev.enqueued_time, ev.partition_key)
                )
        if all(n >= count for n in got.values()):
            done.set()

    def on_error(ctx: Any, exc: Exception) -> None:
        errors.append(f"partition {getattr(ctx, 'partition_id', '-')}: {exc!r}")

    kwargs: dict[str, Any] = {
        "starting_position": "-1",
        "max_batch_size": 300,
        "prefetch": 300,
        "on_error": on_error,
    }
    if partition is not None:
        kwargs["partition_id"] = partition
    thread = threading.Thread(
        target=client.receive_batch, args=(on_batch,), kwargs=kwargs, daemon=True
    )
    thread.start()
    try:
        if not done.wait(RECEIVE_TIMEOUT):
            raise TimeoutError(
                f"after {RECEIVE_TIMEOUT:.0f} s, events received per partition {got}, "
                f"expected {count} each; SDK errors: {errors[-3:] or 'none'}"
            )
    finally:
        client.close()
        thread.join(10)
    return sum(nbytes.values())


def _receive_in_turn(conn: str, pids: list[str], count: int) -> int:
    """``count`` events of each of ``pids``, one partition after another; body bytes."""
    return sum(_receive(conn, count, partition=pid) for pid in pids)


def _raw_worker(receive: Callable[[], int], ready: Any, go: Any, out: Any) -> None:
    """One raw-loop process: SDK imported, ready, then on ``go`` ``receive()``; puts (body
    bytes, peak RSS MB, CPU seconds), or the error as a string."""
    import azure.eventhub  # noqa: F401  (imported before the clock starts, as in (b) and (c))

    ready.put(True)
    go.wait()
    cpu0 = _tree_cpu()
    try:
        nbytes = receive()
    except Exception as exc:  # shipped to the parent, which raises it with the variant's name
        out.put(f"{type(exc).__name__}: {exc}")
        return
    out.put((nbytes, _peak_rss_mb(), _tree_cpu() - cpu0))


def _get(q: Any, procs: list, timeout: float, what: str) -> Any:
    """``q.get()``; a raw-loop process that died, or ``timeout`` seconds, raise naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return q.get(timeout=1)
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"{what}: a process died (exit codes {dead})") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: nothing after {timeout:.0f} s") from None


def _run_raw(label: str, receivers: Sequence[Callable[[], int]], events: int) -> dict:
    """Each receiver in its own spawned process; the clock starts once all have imported the SDK
    (the other variants have their interpreter and Spark session up before theirs) and stops
    when the last has its share. SDK client start-up is timed, as in every variant."""
    ctx = mp.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_raw_worker, args=(r, ready, go, out), daemon=True) for r in receivers
    ]
    for proc in procs:
        proc.start()
    for _worker in procs:
        _get(ready, procs, 120, f"{label}: SDK import")
    t0 = time.perf_counter()
    go.set()
    results = [_get(out, procs, RECEIVE_TIMEOUT + 120, label) for _ in procs]
    elapsed = time.perf_counter() - t0
    for proc in procs:
        proc.join(30)
    failures = [r for r in results if isinstance(r, str)]
    if failures:
        raise RuntimeError(f"{label}: {'; '.join(failures)}")
    return {
        "seconds": elapsed,
        "events": events,
        "bytes": sum(r[0] for r in results),
        "driver_peak_rss_mb": max(r[1] for r in results),
        "cpu_seconds": round(sum(r[2] for r in results), 2),
    }


def mode_raw(conn: str, partitions: int, events: int, parallelism: int, **_: Any) -> dict:
    """(a) P processes, each receiving its share of the partitions in turn; nothing kept.

    With one partition (the hot partition, P=1) this is exactly one SDK receiver.
    """
    per = events // partitions
    shares = [
        [str(p) for p in range(partitions) if p % parallelism == i] for i in range(parallelism)
    ]
    receivers = [partial(_receive_in_turn, conn, s, per) for s in shares if s]
    return _run_raw(LABELS["a"], receivers, per * partitions)


def mode_raw_one_process(conn: str, partitions: int, events: int, **_: Any) -> dict:
    """(a1) one process, one client: the SDK's event processor reads every partition; nothing
    kept. The strongest one-process loop measured (one partition after another, or a thread and
    client per partition, were slower): the targets' "single-process raw SDK receive loop"."""
    per = events // partitions
    receiver = partial(_receive, conn, per, partitions=partitions)
    return _run_raw(LABELS["s"], [receiver], per * partitions)


class _JvmSampler(threading.Thread):
    """Samples the RSS of this process's child processes (the Spark JVM and Python workers)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_mb = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self.stop.wait(0.2):
            total = 0
            for child in me.children(recursive=True):
                try:
                    if "java" in child.name():
                        total += child.memory_info().rss
                except psutil.Error:
                    continue
            self.peak_mb = max(self.peak_mb, total / 2**20)


def _spark(parallelism: int) -> Any:
    from dagster_eventhub_ingest.resources.spark.session import local_spark_session

    return local_spark_session(
        "bench-ingest", master=f"local[{parallelism}]", shuffle_partitions=parallelism
    )


def mode_driver_loop(
    conn: str, partitions: int, events: int, parallelism: int, workdir: str, **_: Any
) -> dict:
    """(b) receive everything on the driver into a list, createDataFrame, write Parquet."""
    from dagster_eventhub_ingest.resources.eventhubs_source import eventhubs_schema

    spark = _spark(parallelism)
    spark.range(1).count()  # JVM warm, as for (c)
    # createDataFrame imports pandas (0.3-0.4 s of CPU). A hand-written loop's session
    # (SparkSession.builder) has imported it at its start, in pyspark's py4j converters; this
    # session's do not
    # (dagster_eventhub_ingest.resources.spark.gateway's converter view): before the
    # clock.
    import pandas  # noqa: F401

    schema = eventhubs_schema()
    per = events // partitions
    sampler = _JvmSampler()
    sampler.start()
    cpu = _in_process_cpu()
    t0 = time.perf_counter()
    rows: list = []
    nbytes = 0
    for p in range(partitions):
        keep: list = []
        nbytes += _receive(conn, per, partition=str(p), keep=keep)
        rows.extend(
            (body, pid, str(off), seq, t, None, pk, {}, {}) for body, pid, off, seq, t, pk in keep
        )
    df = spark.createDataFrame(rows, schema=schema)
    df.write.mode("overwrite").parquet(os.path.join(workdir, "driver-loop"))
    elapsed = time.perf_counter() - t0
    cpu.finish()
    sampler.stop.set()
    written = spark.read.parquet(os.path.join(workdir, "driver-loop")).count()
    spark.stop()
    return {
        "seconds": elapsed,
        "events": written,
        "bytes": nbytes,
        "driver_peak_rss_mb": _peak_rss_mb(),
        "jvm_peak_rss_mb": sampler.peak_mb,
        **cpu.figures(),
    }


def mode_pipeline(
    conn: str,
    partitions: int,
    events: int,
    parallelism: int,
    workdir: str,
    store: str,
    join_grace: float | None = None,
    warm: bool = False,
    max_readers: int = 1,
    cycle: str = "default",
    **_: Any,
) -> dict:
    """(c) run_ingestion: claim, intent, one eventhubs DataFrame, idempotent write, checkpoint.

    The run's defaults (one reader per partition: P task slots read P partitions at a time,
    as (a)'s P processes do), except ``join_grace_seconds`` when ``--join-grace`` is given.

    ``warm``: first an untimed run of 10 events per partition (own container and sink) in the
    same session, as a long-lived process (a Dagster code server reusing its session) would
    have done: Spark's Python workers are started and have imported the source, the JVM has
    compiled the write. The cold run pays that in its timed Spark job.
    """
    from dagster_eventhub_ingest.ops.run.entry import run_ingestion
    from dagster_eventhub_ingest.ops.run.settings import IngestSettings
    from dagster_eventhub_ingest.resources.sink import SinkSettings
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings

    spark = _spark(parallelism)
    spark.range(1).count()  # JVM warm, as for (b)
    extra: dict[str, Any] = {"max_readers_per_partition": max_readers, **_cycle_option(cycle)}
    if join_grace is not None:
        extra["join_grace_seconds"] = join_grace
    if warm:
        warmup = IngestSettings(
            eventhub=_settings(conn),
            store=StoreSettings(container=f"warm-{uuid.uuid4().hex[:12]}", connection_string=store),
            sink=SinkSettings(format="parquet", path=os.path.join(workdir, "warm-up")),
            strategy="greedy",
            max_events_per_partition=10,
            **extra,
        )
        assert run_ingestion(warmup, spark, owner_id="bench-warm-up").complete
    cfg = IngestSettings(
        eventhub=_settings(conn),
        store=StoreSettings(container=f"bench-{uuid.uuid4().hex[:12]}", connection_string=store),
        sink=SinkSettings(format="parquet", path=os.path.join(workdir, "pipeline")),
        strategy="greedy",
        max_events_per_partition=10**9,
        **extra,
    )
    sampler = _JvmSampler()
    sampler.start()
    cpu = _in_process_cpu()
    t0 = time.perf_counter()
    report = run_ingestion(cfg, spark, owner_id="bench")
    elapsed = time.perf_counter() - t0
    cpu.finish()
    sampler.stop.set()
    assert report.complete, report
    spark.stop()
    return {
        "seconds": elapsed,
        "events": report.events,
        "bytes": report.bytes,
        "driver_peak_rss_mb": _peak_rss_mb(),
        "jvm_peak_rss_mb": sampler.peak_mb,
        **cpu.figures(),
        "phases": {k: v["seconds"] for k, v in report.phases.items()},
    }


def mode_pipeline_warm(**kwargs: Any) -> dict:
    """(c) in a session that already ran once (see ``mode_pipeline``)."""
    return mode_pipeline(**kwargs, warm=True)


def run_cli(
    conn: str,
    store: str,
    workdir: str,
    parallelism: int,
    max_readers: int,
    container: str,
    *,
    spark: dict[str, Any] | None = None,
    sink: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    max_events_per_partition: int = 1_000_000_000,
    extra_options: dict[str, Any] | None = None,
) -> dict:
    """``ehingest run`` as a scheduler starts it: process start to exit, nothing warm.

    ``spark`` is the config's ``spark:`` section (default ``local[parallelism]``), ``sink``
    extra sink keys (``shared: true`` for a cluster), ``env`` the process environment
    (default this one). CPU seconds are those of the whole process tree (the CLI, its JVM,
    Spark's Python workers), each process's own, sampled every 0.1 s (the last 0.1 s of each is
    missed). ``wait4``'s figure for the CLI adds the CPU of every descendant reaped below it
    (the JVM with the workers it reaped): it is kept apart as ``reaped_cpu_seconds``, never
    added to the samples, which would count the JVM twice. Driver peak RSS is the CLI's.
    """
    config = os.path.join(workdir, f"{container}.yaml")
    doc = {
        "eventhub": {
            "eventhub_name": HUB,
            "credential": {"connection_string_env": "BENCH_EH_CONN"},
        },
        "store": {"container": container, "credential": {"connection_string_env": "BENCH_ST_CONN"}},
        "sink": {
            "format": "parquet",
            "path": os.path.join(workdir, "cli-" + container),
            **(sink or {}),
        },
        "strategy": "greedy",
        "max_events_per_partition": max_events_per_partition,
        "max_readers_per_partition": max_readers,
        "spark": spark or {"master": f"local[{parallelism}]"},
        **(extra_options or {}),
    }
    with open(config, "w") as f:
        json.dump(doc, f)  # JSON is YAML
    exe = str(Path(sys.executable).with_name("ehingest"))
    env = {
        **(env if env is not None else os.environ),
        "BENCH_EH_CONN": conn,
        "BENCH_ST_CONN": store,
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed CLI has its bytecode cached
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [exe, "run", "--config", config, "--json", "--no-progress"],
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=err,
        )
        sampler = _TreeCpuSampler(proc.pid)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - t0
        sampler.stop.set()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"ehingest run exited {proc.returncode}: {stderr[-3000:]}")
    report = json.loads(stdout)
    return {
        "seconds": elapsed,
        "events": report["events"],
        "bytes": report["bytes"],
        "driver_peak_rss_mb": usage.ru_maxrss / 1024,
        **sampler.figures(),
        "reaped_cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "phases": {k: v["seconds"] for k, v in report["phases"].items()},
        "complete": report["complete"],
    }


def prepare_jvm_archive(mode: str) -> dict[str, Any]:
    """The class-data archive every variant's local JVM starts from (as every run on a host
    once it is written, or in an image that has it baked in), per ``--jvm-archive``: with
    ``write``, ``ehingest spark-archive --rebuild`` first, its time printed (what writing it
    costs once: an image build step, or the background writer after a host's first run)."""
    from dagster_eventhub_ingest.resources.spark.jvm_archive import ARCHIVE_ENV

    if mode == "off":
        os.environ[ARCHIVE_ENV] = "off"
        _say("JVM class-data archive: off (every JVM loads its classes from the jars)")
        return {"mode": mode}
    os.environ.pop(ARCHIVE_ENV, None)
    if mode == "keep":
        return {"mode": mode}
    exe = str(Path(sys.executable).with_name("ehingest"))
    load = load_average()
    t0 = time.perf_counter()
    done = subprocess.run(
        [exe, "spark-archive", "--rebuild"], capture_output=True, text=True, timeout=900
    )
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"ehingest spark-archive failed: {done.stderr[-2000:]}")
    _say(
        f"JVM class-data archive written in {seconds:.1f} s (once per machine, Spark and Java "
        f"version; load {load}): {done.stdout.strip()}"
    )
    return {"mode": mode, "seconds": round(seconds, 2), "load": load}


def _cycle_option(cycle: str) -> dict[str, Any]:
    """``--max-events-per-cycle`` as a run option (nothing for 'default')."""
    if cycle == "default":
        return {}
    return {"max_events_per_cycle": None if cycle == "none" else int(cycle)}


MODES: dict[str, Callable[..., dict]] = {
    "s": mode_raw_one_process,
    "a": mode_raw,
    "b": mode_driver_loop,
    "c": mode_pipeline,
    "w": mode_pipeline_warm,
}
LABELS = {
    "s": "(a1) raw SDK loop, one process",
    "a": "(a) raw SDK loop, P processes",
    "b": "(b) driver loop -> createDataFrame",
    "c": "(c) pipeline in-process, JVM up",
    "w": "(w) pipeline, warm session",
    "e": "(e) ehingest run, cold, end to end",
    "d": "(d) the same, into a deltalake sink",
    "n": "(n) ehingest run, nothing to read",
}


def child_main(args: argparse.Namespace) -> None:
    """Run one variant and print its figures as one JSON line."""
    logging.basicConfig(level=logging.WARNING)
    result = MODES[args.child](
        conn=os.environ["BENCH_EH_CONN"],
        store=os.environ.get("BENCH_ST_CONN", ""),
        partitions=args.partitions,
        events=args.n,
        parallelism=args.parallelism,
        workdir=args.workdir,
        join_grace=args.join_grace,
        max_readers=args.max_readers,
        cycle=args.max_events_per_cycle,
    )
    print("RESULT " + json.dumps(result), flush=True)


def run_child(
    mode: str,
    n: int,
    args: argparse.Namespace,
    env: dict[str, str],
    workdir: str,
    *,
    partitions: int,
    parallelism: int,
    max_readers: int = 1,
    rep: int = 0,
) -> dict:
    if mode in ("e", "n", "d"):
        # (n) runs right after (e) on the same container: nothing left to read. Each repeat
        # of (e) reads everything again, into a container of its own; (d) too, into a Delta
        # table.
        return run_cli(
            env["BENCH_EH_CONN"],
            env["BENCH_ST_CONN"],
            os.path.dirname(workdir),
            parallelism,
            max_readers,
            container=f"cli-{'d-' if mode == 'd' else ''}{n}-{partitions}-{rep}",
            sink={"format": "deltalake"} if mode == "d" else None,
            extra_options=_cycle_option(args.max_events_per_cycle),
        )
    cmd = [
        sys.executable,
        __file__,
        *("--child", mode, "--n", str(n), "--partitions", str(partitions)),
        *("--parallelism", str(parallelism), "--workdir", workdir),
        *("--max-readers", str(max_readers)),
        *("--max-events-per-cycle", args.max_events_per_cycle),
        *([] if args.join_grace is None else ["--join-grace", str(args.join_grace)]),
    ]
    done = subprocess.run(
        cmd, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=7200
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT ") :]))
    raise RuntimeError(f"{LABELS[mode]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")


def _say(text: str) -> None:
    # With --json the JSON document is stdout; the running commentary goes to stderr.
    print(text, file=_OUT, flush=True)


_OUT = sys.stdout


def _print_run(label: str, r: dict) -> None:
    rate = r["events"] / r["seconds"] if r["seconds"] else 0.0
    jvm = f", JVM peak {r['jvm_peak_rss_mb']:.0f} MB" if "jvm_peak_rss_mb" in r else ""
    if r.get("python_worker_peak_rss_mb"):
        jvm += f", Python worker peak {r['python_worker_peak_rss_mb']:.0f} MB"
    _say(
        f"  {label:<38} {r['events']:>9,} events in {r['seconds']:7.1f} s "
        f"= {rate:>9,.0f} events/s; CPU {r.get('cpu_seconds', 0):6.1f} s; "
        f"driver peak RSS {r['driver_peak_rss_mb']:.0f} MB{jvm}; load {r['load']}"
    )
    if r.get("jvm_archive_mapped") is not None:
        _say(
            "      JVM class-data archive: "
            + ("mapped" if r["jvm_archive_mapped"] else "NOT mapped (classes loaded from the jars)")
        )
    if "cpu_by_process" in r:
        kinds = ", ".join(f"{k} {v:.1f}" for k, v in r["cpu_by_process"].items())
        roles = ", ".join(f"{k} {v:.1f}" for k, v in r.get("jvm_cpu_by_thread", {}).items())
        _say(f"      CPU (s): {kinds}; JVM threads: {roles}")
    if "emulator_cpu_seconds" in r:
        _say(f"      the emulator's CPU serving it: {r['emulator_cpu_seconds']:.1f} s")
    if "phases" in r:
        _say("      phases (s): " + ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items()))


def _measure(
    modes: str,
    n: int,
    args: argparse.Namespace,
    env: dict[str, str],
    tmp: str,
    *,
    partitions: int,
    parallelism: dict[str, int],
    max_readers: int = 1,
    tag: str = "",
    emulator: int | None = None,
) -> dict[str, dict]:
    """Each mode ``args.repeat`` times, alternating; the best run of each (by events/s).

    ``emulator``: the emulator's pid; the CPU it spends serving each run is recorded with the
    run (``emulator_cpu_seconds``): it shares the cores with every variant."""
    runs: dict[str, list[dict]] = {}
    failed: dict[str, str] = {}
    for rep in range(args.repeat):
        for mode in modes:
            workdir = os.path.join(tmp, f"{tag}{n}-{mode}-{rep}")
            os.makedirs(workdir)
            load = load_average()
            served = _own_cpu(emulator) if emulator else 0.0
            try:
                r = run_child(
                    mode,
                    n,
                    args,
                    env,
                    workdir,
                    partitions=partitions,
                    parallelism=parallelism.get(mode, args.parallelism),
                    max_readers=max_readers,
                    rep=rep,
                )
            except RuntimeError as exc:
                # e.g. (b) at 1M: the driver loop runs the JVM out of heap.
                reasons = [ln for ln in str(exc).splitlines() if "Error" in ln]
                failed[mode] = (reasons or ["?"])[-1].strip()[:300]
                _say(f"  {LABELS[mode]:<38} FAILED: {failed[mode]}")
                continue
            r["load"] = load
            if emulator:
                r["emulator_cpu_seconds"] = round(_own_cpu(emulator) - served, 2)
            runs.setdefault(mode, []).append(r)
            _print_run(LABELS[mode], r)
            want = 0 if mode == "n" else (n // partitions) * partitions
            if r["events"] != want:
                _say(f"  !! {LABELS[mode]} landed {r['events']} events, expected {want}")
    best: dict[str, dict] = {}
    for mode, rs in runs.items():
        if mode == "n":
            best[mode] = min(rs, key=lambda r: r["seconds"])
            continue
        best[mode] = max(rs, key=lambda r: r["events"] / r["seconds"])
        best[mode]["events_per_second"] = round(best[mode]["events"] / best[mode]["seconds"])
        if len(rs) > 1:
            best[mode]["spread_events_per_second"] = [
                round(min(r["events"] / r["seconds"] for r in rs)),
                round(max(r["events"] / r["seconds"] for r in rs)),
            ]
    for mode, why in failed.items():
        best.setdefault(mode, {"failed": why})
    return best


def _ratio(x: float | None, y: float | None) -> float | None:
    return None if x is None or y is None or not y else round(x / y, 2)


def _rate(res: dict[str, dict], mode: str) -> float | None:
    r = res.get(mode)
    return None if r is None or "seconds" not in r else r["events"] / r["seconds"]


def _at_least(value: float | None, goal: float) -> bool | None:
    return None if value is None else value >= goal


def _targets(
    table: dict[int, dict[str, dict]], hot: dict[str, dict] | None, parallelism: int
) -> list[dict]:
    """The targets (docs/benchmarks.md), each with the measured value and whether it is met.

    Targets 1 and 2 are against (a1), the one-process SDK loop; the same
    ratios against (a), the loop in ``parallelism`` processes, follow as information.
    """
    out: list[dict] = []

    def target(name: str, value: float | None, goal: str, met: bool | None) -> None:
        out.append({"target": name, "value": value, "goal": goal, "met": met})
        shown = "-" if value is None else value
        verdict = "n/a" if met is None else ("met" if met else "NOT MET")
        _say(f"  {name:<70} {shown!s:>8}  (goal {goal}): {verdict}")

    sizes = sorted(table)
    big, small = sizes[-1], sizes[0]
    one, procs = "(a1: one-process SDK loop)", f"vs {parallelism}-process loop (info)"
    e_big = _ratio(_rate(table[big], "e"), _rate(table[big], "s"))
    met = None if e_big is None else e_big >= 3
    target(f"1. e/a1 events/s at {big:,} {one}", e_big, ">= 3", met)
    d_big = _ratio(_rate(table[big], "d"), _rate(table[big], "s"))
    target(f"1. d/a1 events/s at {big:,}, deltalake sink {one}", d_big, ">= 3", _at_least(d_big, 3))
    e_a = _ratio(_rate(table[big], "e"), _rate(table[big], "a"))
    target(f"1. e/a events/s at {big:,} {procs}", e_a, ">= 3 (info)", None)
    s_s, a_s, e_s = (table[small].get(mode, {}) for mode in "sae")
    t_ratio = _ratio(e_s.get("seconds"), s_s.get("seconds"))
    met = None if t_ratio is None else t_ratio <= 1.3
    target(f"2. e/a1 time at {small:,}, cold, end to end {one}", t_ratio, "<= 1.3", met)
    d_ratio = _ratio(table[small].get("d", {}).get("seconds"), s_s.get("seconds"))
    met = None if d_ratio is None else d_ratio <= 1.3
    target(f"2. d/a1 time at {small:,}, deltalake sink {one}", d_ratio, "<= 1.3", met)
    t_a = _ratio(e_s.get("seconds"), a_s.get("seconds"))
    target(f"2. e/a time at {small:,} {procs}", t_a, "<= 1.3 (info)", None)
    noop = [table[n]["n"]["seconds"] for n in sizes if "seconds" in table[n].get("n", {})]
    best_noop = round(min(noop), 2) if noop else None
    target("2. no-op run, cold, s", best_noop, "< 1.5", None if not noop else min(noop) < 1.5)
    w_ratio = _ratio(table[small].get("w", {}).get("seconds"), s_s.get("seconds"))
    target(f"2. warm session w/a1 time at {small:,} (measured)", w_ratio, "-", None)
    if hot:
        h = _ratio(_rate(hot, "e"), _rate(hot, "a"))
        target("3. hot partition e/a(1 receiver)", h, ">= 1.6", None if h is None else h >= 1.6)
        hc = _ratio(_rate(hot, "c"), _rate(hot, "a"))
        target("3. hot partition c/a(1 receiver), JVM up", hc, ">= 1.6 (info)", None)
    cb = _ratio(_rate(table[small], "c"), _rate(table[small], "b"))
    target(f"4. c/b events/s at {small:,}", cb, ">= 3", None if cb is None else cb >= 3)
    eb = _ratio(_rate(table[small], "e"), _rate(table[small], "b"))
    target(f"4. e/b events/s at {small:,} (e cold incl. JVM)", eb, "-", None)
    b_big = table[big].get("b", {})
    target(
        f"4. driver loop at {big:,} fails (OOM) and is reported",
        None,
        "reported",
        "failed" in b_big if b_big else None,
    )
    if len(sizes) >= 2 and all("c" in table[n] and "seconds" in table[n]["c"] for n in sizes):
        g = _ratio(table[big]["c"]["driver_peak_rss_mb"], table[small]["c"]["driver_peak_rss_mb"])
        met = None if g is None else g < 1.2
        target(f"5. c driver peak RSS {big:,}/{small:,}", g, "< 1.2", met)
    if len(sizes) >= 2 and all("e" in table[n] and "seconds" in table[n]["e"] for n in sizes):
        g = _ratio(table[big]["e"]["driver_peak_rss_mb"], table[small]["e"]["driver_peak_rss_mb"])
        met = None if g is None else g < 1.2
        target(f"5. e driver peak RSS {big:,}/{small:,}", g, "< 1.2", met)
    return out


def main() -> None:
    global _OUT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--size", type=int, default=1024, help="event body bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--parallelism", type=int, default=2, help="P: processes / local[P]")
    parser.add_argument(
        "--modes",
        default="saendwcb",
        help="which variants, e.g. 'sae': s (a1) raw SDK loop in one process, a raw SDK loop in "
        "P processes, e ehingest run cold (parquet sink), n no-op run (after e), d ehingest run "
        "cold into a deltalake sink, w warm session, c in-process with the JVM up, b driver loop",
    )
    parser.add_argument(
        "--hot",
        type=int,
        default=500_000,
        help="events in one hot partition: one SDK receiver vs sub-range readers (0: skip)",
    )
    parser.add_argument("--hot-readers", type=int, default=2, help="readers of the hot partition")
    parser.add_argument(
        "--join-grace",
        type=float,
        help="(c)'s join_grace_seconds (default: the run's default, 1 s; 0 = single owner)",
    )
    parser.add_argument(
        "--max-events-per-cycle",
        default="default",
        help="max_events_per_cycle of (e), (c), (w): 'default' (the run's), 'none' (one cycle "
        "per run) or a number",
    )
    parser.add_argument(
        "--jvm-archive",
        choices=("write", "keep", "off"),
        default="write",
        help="the local driver JVM's class-data archive (resources/spark/jvm_archive.py): "
        "'write' it first with ehingest spark-archive and print what that costs once (default); "
        "'keep' whatever the cache has (each run prints whether its JVM mapped an archive: "
        "the key covers the Java options and the install, so a cache written by another "
        "command may hold none for this one); 'off' for every variant",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of each variant per size")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON")
    parser.add_argument("--child", choices=sorted(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--max-readers", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args)
        return
    if args.json:
        _OUT = sys.stderr

    from dagster_eventhub_ingest.emulator.azurite import azurite

    started = load_average()
    _say(
        f"ingest throughput: {args.size}-byte events over {args.partitions} partitions, "
        f"parallelism P={args.parallelism} (cores: {os.cpu_count()}), load {started}"
    )
    table: dict[int, dict[str, dict]] = {}
    hot: dict[str, dict] | None = None
    sent_rates: dict[str, float] = {}
    archive = prepare_jvm_archive(args.jvm_archive)
    with azurite() as store_conn, tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        for n in args.events:
            with emulator_subprocess({HUB: args.partitions}) as (conn, served_by):
                emulator = served_by.pid
                sent = send(conn, args.partitions, n, args.size)
                sent_rates[str(n)] = round(n / sent)
                _say(f"\nN={n:,}: sent in {sent:.1f} s ({n / sent:,.0f} events/s)")
                env = {"BENCH_EH_CONN": conn, "BENCH_ST_CONN": store_conn}
                table[n] = _measure(
                    args.modes,
                    n,
                    args,
                    env,
                    tmp,
                    partitions=args.partitions,
                    parallelism={},
                    emulator=emulator,
                )
        if args.hot:
            with emulator_subprocess({HUB: 1}) as (conn, served_by):
                emulator = served_by.pid
                sent = send(conn, 1, args.hot, args.size)
                _say(
                    f"\nhot partition: {args.hot:,} events in 1 partition, sent in {sent:.1f} s; "
                    f"one SDK receiver vs {args.hot_readers} sub-range readers on "
                    f"local[{args.parallelism}]"
                )
                env = {"BENCH_EH_CONN": conn, "BENCH_ST_CONN": store_conn}
                hot_modes = "".join(m for m in "aec" if m in args.modes)
                hot = _measure(
                    hot_modes,
                    args.hot,
                    args,
                    env,
                    tmp,
                    partitions=1,
                    parallelism={"a": 1},
                    max_readers=args.hot_readers,
                    tag="hot-",
                    emulator=emulator,
                )
    _say("\ntargets (docs/benchmarks.md; ratios side by side in this run):")
    targets = _targets(table, hot, args.parallelism)
    finished = load_average()
    _say(f"load average at the start {started}, at the end {finished}")
    if args.json:
        doc = {
            "command": " ".join(["python", "bench/ingest_throughput.py", *sys.argv[1:]]),
            "cores": os.cpu_count(),
            "event_bytes": args.size,
            "partitions": args.partitions,
            "parallelism": args.parallelism,
            "load_average_start": started,
            "load_average_end": finished,
            "send_events_per_second": sent_rates,
            "labels": LABELS,
            "sizes": {str(n): res for n, res in table.items()},
            "jvm_archive": archive,
            "hot_partition": None
            if hot is None
            else {"events": args.hot, "readers": args.hot_readers, "runs": hot},
            "targets": targets,
        }
        print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
