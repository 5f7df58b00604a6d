"""JVM CPU per event of ``dagster_eventhub_ingest.ops.sinks.write.write_batch`` by the number of
partitions in a batch.

With ``stats_method="observe"``, ``write_batch`` observes, while the write consumes the
DataFrame, a row count inside and outside the ranges and seven statistics per partition (events,
bytes, first and last sequence number, last offset, first and last enqueued time): 2 + 7 x P
aggregates that Spark updates for every row. ``split`` (the default for columnar formats)
observes 2 + P (the body bytes per partition) and reads the rest back per batch key in the
verification pass, from the small columns. This prints, for the same events (``--events`` rows
of ``--size`` bytes, the ``eventhubs`` schema, no Event Hub involved) spread over P partitions
and laid out as the source reads them (one task per partition), the JVM's CPU microseconds per
event of:

* a plain Parquet write of the rows (the floor: Arrow-free, what the format itself costs),
* ``write_batch`` to Parquet (observation, batch-key column, commit, verification) with each
  ``--stats`` method (default: ``observe`` and ``split``),

and each one's ratio to the floor. The JVM's CPU is read from its process (psutil) around each
write, best of ``--repeat``; the session is local[2] with the CLI's defaults and warm (one write
first).

    source scripts/_bootstrap.sh
    uv run --frozen python bench/write_partitions.py                  # P = 4, 16, 32
    uv run --frozen python bench/write_partitions.py --partitions 4 64 --events 200000
    uv run --frozen python bench/write_partitions.py --stats observe split readback
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _events import synthetic_events  # noqa: E402
from _report import add_json_flag, report  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--size", type=int, default=1024, help="event body bytes")
    parser.add_argument("--partitions", type=int, nargs="+", default=[4, 16, 32])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--stats",
        nargs="+",
        default=["observe", "split"],
        choices=["observe", "split", "readback"],
        help="write_batch's stats_method(s) to measure",
    )
    add_json_flag(parser)
    args = parser.parse_args()
    with report("write_partitions.py", args.json) as rep:
        _main(args, rep)


def _main(args: argparse.Namespace, rep: Any) -> None:

    import psutil

    from dagster_eventhub_ingest.ops.sinks.write import write_batch
    from dagster_eventhub_ingest.resources.ranges import SeqRange
    from dagster_eventhub_ingest.resources.sink import SinkSettings
    from dagster_eventhub_ingest.resources.spark.session import local_spark_session

    spark = local_spark_session("bench-write-partitions", master="local[2]")
    (java,) = [p for p in psutil.Process().children(recursive=True) if p.name() == "java"]

    def jvm_cpu() -> float:
        t = java.cpu_times()
        return t.user + t.system

    print(
        f"write_batch JVM CPU per event: {args.events:,} events of {args.size} bytes, local[2], "
        f"best of {args.repeat}",
        file=sys.stderr,
    )
    names = ["parquet", *args.stats]
    print(
        f"{'P':>4} {'parquet us/ev':>14}"
        + "".join(f" {m + ' us/ev':>14} {'ratio':>6}" for m in args.stats)
    )
    with tempfile.TemporaryDirectory(prefix="bench-write-") as tmp:
        for p in args.partitions:
            per = args.events // p
            rows = synthetic_events(spark, per, p, args.size).cache()
            rows.count()
            ranges = {str(i): SeqRange(0, per - 1) for i in range(p)}
            best: dict[str, float] = {}
            for round_ in range(args.repeat + 1):  # the first is a warm-up, not counted
                for name in names:
                    out = Path(tmp) / name
                    shutil.rmtree(out, ignore_errors=True)
                    c0 = jvm_cpu()
                    if name == "parquet":
                        rows.write.mode("overwrite").parquet(str(out))
                    else:
                        sink = SinkSettings(format="parquet", path=str(out))
                        write_batch(rows, sink, ranges, stats_method=name)
                    used = (jvm_cpu() - c0) / (per * p) * 1e6
                    if round_:
                        best[name] = min(best.get(name, used), used)
            rows.unpersist()
            floor = best["parquet"]
            rep.add(
                f"P={p}",
                {
                    "parquet_us_per_event": round(floor, 2),
                    **{f"{m}_us_per_event": round(best[m], 2) for m in args.stats},
                    **{f"{m} / parquet": round(best[m] / floor, 2) for m in args.stats},
                },
            )
            print(
                f"{p:>4} {floor:>14.1f}"
                + "".join(f" {best[m]:>14.1f} {best[m] / floor:>6.2f}" for m in args.stats),
                flush=True,
            )
    spark.stop()


if __name__ == "__main__":
    main()
