"""Ingest throughput and driver memory: raw SDK loop vs hand-written driver loop vs this pipeline.

For each size N (default 100k and 1M events of 1 KB, spread over 4 partitions), the same
emulator data is read by:

(a) the raw azure-eventhub receive loop (``receive_batch``, count events and bytes, keep
    nothing) in P processes, each reading its share of the partitions: the ceiling;
(b) the hand-written driver loop people write first: receive every event on the driver into a
    Python list, ``spark.createDataFrame(rows)``, write Parquet;
(c) this pipeline: ``run_ingestion`` (claim, intent, one ``eventhubs`` DataFrame read on P
    executor slots, idempotent Parquet write, checkpoint) on ``local[P]``.

Each variant runs in its own child process, so "driver peak RSS" (``ru_maxrss`` of the process
that drives the work) is its own; for (c) the Spark JVM's peak RSS is sampled too. SparkSession
start-up is not timed. The emulator runs in its own process (no GIL sharing), Azurite holds the
store for (c). Targets (issue #5): (c) >= 0.8 x (a) at equal parallelism, (c) >= 3 x (b), and
(c)'s driver RSS flat as N grows.

    source scripts/_bootstrap.sh
    uv run --frozen python bench/ingest_throughput.py                      # 100k and 1M
    uv run --frozen python bench/ingest_throughput.py --events 20000 50000 # quicker
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from emulator.testing import emulator_subprocess  # noqa: E402

HUB = "bench"


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


@contextmanager
def emulator_process(partitions: int) -> Iterator[str]:
    """The emulator in its own process with one hub; yields its connection string."""
    with emulator_subprocess({HUB: partitions}) as (conn, _proc):
        yield conn


def _settings(conn: str) -> Any:
    from resources.settings import EventHubSettings

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


def _receive_partition(conn: str, pid: str, count: int, keep: list | None) -> int:
    """SDK ``receive_batch`` from the start of ``pid`` until ``count`` events; body bytes."""
    client = _settings(conn).consumer_client()
    got = 0
    nbytes = 0
    done = threading.Event()

    def on_batch(_ctx: object, events: list) -> None:
        nonlocal got, nbytes
        for ev in events:
            if got >= count:
                break
            body = b"".join(ev.body)
            nbytes += len(body)
            got += 1
            if keep is not None:
                keep.append(
                    (body, pid, ev.offset, ev.sequence_number, ev.enqueued_time, ev.partition_key)
                )
        if got >= count:
            done.set()

    thread = threading.Thread(
        target=client.receive_batch,
        args=(on_batch,),
        kwargs={
            "partition_id": pid,
            "starting_position": "-1",
            "max_batch_size": 300,
            "prefetch": 300,
        },
        daemon=True,
    )
    thread.start()
    if not done.wait(1800):
        raise TimeoutError(f"partition {pid}: got {got} of {count} events")
    client.close()
    thread.join(10)
    return nbytes


def _raw_worker(conn: str, pids: list[str], per: int, ready: Any, go: Any, out: Any) -> None:
    import azure.eventhub  # noqa: F401  (imported before the clock starts, as in (b) and (c))

    ready.put(True)
    go.wait()
    nbytes = sum(_receive_partition(conn, pid, per, None) for pid in pids)
    out.put((nbytes, _peak_rss_mb()))


def mode_raw(conn: str, partitions: int, events: int, parallelism: int, **_: Any) -> dict:
    """(a) P processes, each receiving its share of the partitions; nothing kept.

    The processes are spawned and have imported the SDK before the clock starts (the other
    variants have their interpreter and Spark session up before theirs); SDK client start-up is
    timed in all three.
    """
    ctx = mp.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    per = events // partitions
    shares = [
        [str(p) for p in range(partitions) if p % parallelism == i] for i in range(parallelism)
    ]
    procs = [
        ctx.Process(target=_raw_worker, args=(conn, s, per, ready, go, out)) for s in shares if s
    ]
    for proc in procs:
        proc.start()
    for _worker in procs:
        ready.get(timeout=120)
    t0 = time.perf_counter()
    go.set()
    results = [out.get(timeout=1800) for _ in procs]
    elapsed = time.perf_counter() - t0
    for proc in procs:
        proc.join(30)
    return {
        "seconds": elapsed,
        "events": per * partitions,
        "bytes": sum(r[0] for r in results),
        "driver_peak_rss_mb": max(r[1] for r in results),
    }


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
    from resources.spark_session import local_spark_session

    return local_spark_session(
        "bench-ingest", master=f"local[{parallelism}]", shuffle_partitions=parallelism
    )


def mode_driver_loop(
    conn: str, partitions: int, events: int, parallelism: int, workdir: str, **_: Any
) -> dict:
    """(b) receive everything on the driver into a list, createDataFrame, write Parquet."""
    from resources.spark_source import eventhubs_schema

    spark = _spark(parallelism)
    spark.range(1).count()  # JVM warm, as for (c)
    schema = eventhubs_schema()
    per = events // partitions
    sampler = _JvmSampler()
    sampler.start()
    t0 = time.perf_counter()
    rows: list = []
    nbytes = 0
    for p in range(partitions):
        keep: list = []
        nbytes += _receive_partition(conn, str(p), per, keep)
        rows.extend(
            (body, pid, str(off), seq, t, None, pk, {}, {}) for body, pid, off, seq, t, pk in keep
        )
    df = spark.createDataFrame(rows, schema=schema)
    df.write.mode("overwrite").parquet(os.path.join(workdir, "driver-loop"))
    elapsed = time.perf_counter() - t0
    sampler.stop.set()
    written = spark.read.parquet(os.path.join(workdir, "driver-loop")).count()
    spark.stop()
    return {
        "seconds": elapsed,
        "events": written,
        "bytes": nbytes,
        "driver_peak_rss_mb": _peak_rss_mb(),
        "jvm_peak_rss_mb": sampler.peak_mb,
    }


class _PhaseLog(logging.Handler):
    """Times the run's phases from its own progress lines (no instrumentation in the code)."""

    MARKS = (
        ("snapshot", "snapshot hub="),
        ("intents", "intent hub="),
        ("spark job", "wrote "),
        ("checkpoints", "ingested hub="),
        ("final report", "run finished"),
    )

    def __init__(self, t0: float) -> None:
        super().__init__(logging.INFO)
        self.t0 = t0
        self.seen: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        for name, prefix in self.MARKS:
            if msg.startswith(prefix):
                # The last line of each kind ends that phase (one line per partition).
                self.seen[name] = time.perf_counter() - self.t0

    def phases(self) -> dict[str, float]:
        out, last = {}, 0.0
        for name, _ in self.MARKS:
            if name in self.seen:
                out[name] = round(self.seen[name] - last, 2)
                last = self.seen[name]
        return out


def mode_pipeline(
    conn: str,
    partitions: int,
    events: int,
    parallelism: int,
    workdir: str,
    store: str,
    join_grace: float | None = None,
    warm: bool = False,
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
    from ops.run import IngestConfig, run_ingestion
    from resources.settings import SinkSettings, StoreSettings

    spark = _spark(parallelism)
    spark.range(1).count()  # JVM warm, as for (b)
    extra = {} if join_grace is None else {"join_grace_seconds": join_grace}
    if warm:
        warmup = IngestConfig(
            eventhub=_settings(conn),
            store=StoreSettings(container=f"warm-{uuid.uuid4().hex[:12]}", connection_string=store),
            sink=SinkSettings(format="parquet", path=os.path.join(workdir, "warm-up")),
            strategy="greedy",
            max_events_per_partition=10,
            **extra,
        )
        assert run_ingestion(warmup, spark, owner_id="bench-warm-up").complete
    cfg = IngestConfig(
        eventhub=_settings(conn),
        store=StoreSettings(container=f"bench-{uuid.uuid4().hex[:12]}", connection_string=store),
        sink=SinkSettings(format="parquet", path=os.path.join(workdir, "pipeline")),
        strategy="greedy",
        max_events_per_partition=10**9,
        **extra,
    )
    sampler = _JvmSampler()
    sampler.start()
    t0 = time.perf_counter()
    phases = _PhaseLog(t0)
    for name in ("ops.run", "ops.write"):
        logging.getLogger(name).addHandler(phases)
        logging.getLogger(name).setLevel(logging.INFO)
    report = run_ingestion(cfg, spark, owner_id="bench")
    elapsed = time.perf_counter() - t0
    sampler.stop.set()
    assert report.complete, report
    spark.stop()
    return {
        "seconds": elapsed,
        "events": report.events,
        "bytes": report.bytes,
        "driver_peak_rss_mb": _peak_rss_mb(),
        "jvm_peak_rss_mb": sampler.peak_mb,
        "phases": phases.phases(),
    }


def mode_pipeline_warm(**kwargs: Any) -> dict:
    """(c) in a session that already ran once (see ``mode_pipeline``)."""
    return mode_pipeline(**kwargs, warm=True)


MODES: dict[str, Callable[..., dict]] = {
    "a": mode_raw,
    "b": mode_driver_loop,
    "c": mode_pipeline,
    "w": mode_pipeline_warm,
}
LABELS = {
    "a": "(a) raw SDK receive loop",
    "b": "(b) driver loop -> createDataFrame",
    "c": "(c) this pipeline",
    "w": "(c) this pipeline, warm session",
}


def child_main(args: argparse.Namespace) -> None:
    """Run one variant and print its figures as one JSON line."""
    import logging

    logging.basicConfig(level=logging.WARNING)
    result = MODES[args.child](
        conn=os.environ["BENCH_EH_CONN"],
        store=os.environ.get("BENCH_ST_CONN", ""),
        partitions=args.partitions,
        events=args.n,
        parallelism=args.parallelism,
        workdir=args.workdir,
        join_grace=args.join_grace,
    )
    print("RESULT " + json.dumps(result), flush=True)


def run_child(
    mode: str, n: int, args: argparse.Namespace, env: dict[str, str], workdir: str
) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--n",
        str(n),
        "--partitions",
        str(args.partitions),
        "--parallelism",
        str(args.parallelism),
        "--workdir",
        workdir,
        *([] if args.join_grace is None else ["--join-grace", str(args.join_grace)]),
    ]
    done = subprocess.run(
        cmd, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=7200
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"{LABELS[mode]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")


def _print_run(mode: str, r: dict) -> None:
    rate = r["events"] / r["seconds"]
    jvm = f", JVM peak {r['jvm_peak_rss_mb']:.0f} MB" if "jvm_peak_rss_mb" in r else ""
    print(
        f"  {LABELS[mode]:<36} {r['events']:>9,} events in {r['seconds']:7.1f} s "
        f"= {rate:>9,.0f} events/s, {r['bytes'] / r['seconds'] / 2**20:6.1f} MB/s; "
        f"driver peak RSS {r['driver_peak_rss_mb']:.0f} MB{jvm}",
        flush=True,
    )
    if "phases" in r:
        print("      phases (s): " + ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--size", type=int, default=1024, help="event body bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--parallelism", type=int, default=2, help="P: processes / local[P]")
    parser.add_argument(
        "--modes", default="acwb", help="which variants, e.g. 'ac' ('w': (c) in a warm session)"
    )
    parser.add_argument(
        "--join-grace",
        type=float,
        help="(c)'s join_grace_seconds (default: the run's default, 1 s; 0 = single owner)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of each variant per size")
    parser.add_argument("--child", choices=sorted(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args)
        return

    from tests.services import azurite

    print(
        f"ingest throughput: {args.size}-byte events over {args.partitions} partitions, "
        f"parallelism P={args.parallelism} (cores: {os.cpu_count()})"
    )
    table: dict[int, dict[str, dict]] = {}
    with azurite() as store_conn, tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        for n in args.events:
            with emulator_process(args.partitions) as conn:
                sent = send(conn, args.partitions, n, args.size)
                print(f"\nN={n:,}: sent in {sent:.1f} s ({n / sent:,.0f} events/s)")
                env = {"BENCH_EH_CONN": conn, "BENCH_ST_CONN": store_conn}
                table[n] = {}
                runs: dict[str, list[dict]] = {}
                # Variants alternate (a c b a c b ...) so a burst of load from other work on
                # the machine hits them alike; the best run of each counts, the spread is shown.
                for rep in range(args.repeat):
                    for mode in args.modes:
                        workdir = os.path.join(tmp, f"{n}-{mode}-{rep}")
                        os.makedirs(workdir)
                        try:
                            r = run_child(mode, n, args, env, workdir)
                        except RuntimeError as exc:
                            # e.g. (b) at 1M: the driver loop runs the JVM out of heap.
                            reasons = [ln for ln in str(exc).splitlines() if "Error" in ln]
                            print(f"  {LABELS[mode]:<36} FAILED: {(reasons or ['?'])[-1].strip()}")
                            continue
                        runs.setdefault(mode, []).append(r)
                        _print_run(mode, r)
                        if r["events"] != (n // args.partitions) * args.partitions:
                            print(f"  !! {LABELS[mode]} landed {r['events']} events, expected {n}")
                for mode, rs in runs.items():
                    rates = [r["events"] / r["seconds"] for r in rs]
                    best = max(range(len(rs)), key=lambda i: rates[i])
                    table[n][mode] = rs[best]
                    if len(rs) > 1:
                        print(
                            f"  {LABELS[mode]:<36} best {rates[best]:,.0f} events/s of "
                            f"{len(rs)} runs (spread {min(rates):,.0f}..{max(rates):,.0f})"
                        )
    print("\ncomparison (targets: c/a >= 0.8 at equal parallelism, c/b >= 3, c's RSS flat):")
    for n, res in table.items():
        rate = {m: r["events"] / r["seconds"] for m, r in res.items()}
        parts = []
        for c in ("c", "w"):
            tag = "c" if c == "c" else "c(warm)"
            if "a" in rate and c in rate:
                ok = "ok" if rate[c] >= 0.8 * rate["a"] else "MISS"
                parts.append(f"{tag}/a = {rate[c] / rate['a']:.2f} ({ok})")
            if "b" in rate and c in rate:
                ok = "ok" if rate[c] >= 3 * rate["b"] else "MISS"
                parts.append(f"{tag}/b = {rate[c] / rate['b']:.2f} ({ok})")
        print(f"  N={n:,}: " + ", ".join(parts))
    sizes = sorted(table)
    if len(sizes) >= 2 and all("c" in table[n] for n in sizes):
        lo, hi = table[sizes[0]]["c"], table[sizes[-1]]["c"]
        growth = hi["driver_peak_rss_mb"] / lo["driver_peak_rss_mb"]
        print(
            f"  (c) driver peak RSS {lo['driver_peak_rss_mb']:.0f} MB at {sizes[0]:,} -> "
            f"{hi['driver_peak_rss_mb']:.0f} MB at {sizes[-1]:,} events (x{growth:.2f}; "
            f"{'flat' if growth < 1.25 else 'NOT flat'})"
        )
        if all("b" in table[n] for n in sizes):
            lo_b, hi_b = table[sizes[0]]["b"], table[sizes[-1]]["b"]
            print(
                f"  (b) driver peak RSS {lo_b['driver_peak_rss_mb']:.0f} MB -> "
                f"{hi_b['driver_peak_rss_mb']:.0f} MB"
            )


if __name__ == "__main__":
    main()
