"""CPU per event of writing a ``parquet`` sink's batch: ``ParquetBatchWriter`` from Arrow batches
against Spark's JVM Parquet write of the same rows.

The same events (``--events`` rows of ``--size`` bytes, the output schema with its batch key,
``--partitions`` Event Hub partitions, one batch key each) are written to a ``parquet`` sink
twice per round:

* ``arrow``: :class:`~dagster_eventhub_ingest.ops.sinks.parquet_writer.ParquetBatchWriter` in
  this process, one ``write`` per partition (a task of the fused read-and-write path gets its
  Arrow batches from the reader) and the driver's ``commit``; this process's CPU
  (``time.process_time``, every thread);
* ``spark``: :func:`~dagster_eventhub_ingest.ops.sinks.spark_writer.write_spark` (dynamic
  partition overwrite, the format options) of the same rows cached in the JVM, one task per
  partition; the JVM's CPU (psutil). The rows are already in memory, so this is the write
  alone: in a run the JVM also turns the readers' Arrow batches into rows first;
* ``source``: the same cached rows through Spark's own Python data source write
  (``write_parquet_from_arrow``: the JVM turns its rows into Arrow batches and streams them to
  Python workers, which run ``ParquetBatchWriter``); the JVM's CPU and its Python processes'
  (psutil, reaped workers included), printed apart and summed.

Each figure is the best of ``--repeat`` rounds after a warm-up; it prints both in microseconds
per event and their ratio. local[2].

    source scripts/_bootstrap.sh
    uv run --frozen python bench/parquet_writer.py
    uv run --frozen python bench/parquet_writer.py --events 400000 --repeat 3 --json
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _events import synthetic_events  # noqa: E402
from _report import add_json_flag, report  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024, help="event body bytes")
    parser.add_argument("--partitions", type=int, default=2, help="Event Hub partitions (tasks)")
    parser.add_argument("--repeat", type=int, default=3)
    add_json_flag(parser)
    args = parser.parse_args()
    with report("parquet_writer.py", args.json) as rep:
        _main(args, rep)


def _main(args: argparse.Namespace, rep: Any) -> None:
    import psutil
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from dagster_eventhub_ingest.ops.sinks.batch import BATCH_COLUMN, batch_key
    from dagster_eventhub_ingest.ops.sinks.parquet_writer import (
        ParquetBatchWriter,
        write_parquet_from_arrow,
    )
    from dagster_eventhub_ingest.ops.sinks.read import output_schema
    from dagster_eventhub_ingest.ops.sinks.spark_writer import write_spark
    from dagster_eventhub_ingest.resources.eventhubs_source.schema import arrow_schema
    from dagster_eventhub_ingest.resources.sink import SinkSettings
    from dagster_eventhub_ingest.resources.spark.session import local_spark_session

    spark = local_spark_session("bench-parquet-writer", master="local[2]")
    (java,) = [p for p in psutil.Process().children(recursive=True) if p.name() == "java"]

    def jvm_cpu() -> float:
        t = java.cpu_times()
        return t.user + t.system

    def python_cpu() -> float:
        total = 0.0
        for proc in java.children(recursive=True):
            try:
                t = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += t.user + t.system + t.children_user + t.children_system
        return total

    schema = output_schema()
    p = args.partitions
    per = args.events // p
    keys = [batch_key(str(i), 0, per - 1) for i in range(p)]
    rows = (
        synthetic_events(spark, per, p, args.size, incompressible=True)
        .select(
            "*",
            F.lit(None).cast("binary").alias("amqpBody"),
            F.concat(F.col("partition"), F.lit(f"-0-{per - 1}")).alias(BATCH_COLUMN),
        )
        .cache()
    )
    rows.count()
    # The same rows as Arrow, one table per partition: what a fused task's reader hands over
    # (through a file: collecting them through the JVM would need them twice in its heap).
    tmp = Path(tempfile.mkdtemp(prefix="bench-pqwriter-"))
    rows.write.parquet(str(tmp / "source"))
    table = pq.read_table(tmp / "source").select(schema.names).cast(arrow_schema(schema))
    shutil.rmtree(tmp / "source")
    by_partition = [table.filter(pc.equal(table.column("partition"), str(i))) for i in range(p)]
    n = table.num_rows
    print(
        f"parquet sink write, CPU per event: {n:,} events of {args.size} bytes, {p} partitions, "
        f"local[2], best of {args.repeat}",
        file=sys.stderr,
    )
    print(
        f"{'arrow us/ev':>12} {'spark us/ev':>12} {'arrow/spark':>12} {'arrow s':>8} {'spark s':>8}"
        f" {'source JVM':>11} {'source py':>10} {'source/spark':>13}"
    )
    best: dict[str, float] = {}
    parts = (0.0, 0.0)
    wall: dict[str, float] = {}
    try:
        for round_ in range(args.repeat + 1):  # the first is a warm-up, not counted
            for name in ("arrow", "spark", "source"):
                out = tmp / name
                shutil.rmtree(out, ignore_errors=True)
                sink = SinkSettings(format="parquet", path=str(out))
                t0 = time.perf_counter()
                if name == "arrow":
                    c0 = time.process_time()
                    writer = ParquetBatchWriter.for_sink(sink, keys, schema)
                    messages = [writer.write(iter(part.to_batches())) for part in by_partition]
                    writer.commit(list(messages))
                    used = time.process_time() - c0
                elif name == "spark":
                    c0 = jvm_cpu()
                    write_spark(rows, sink)
                    used = jvm_cpu() - c0
                else:
                    c0, p0 = jvm_cpu(), python_cpu()
                    write_parquet_from_arrow(rows, sink, keys)
                    jvm_part, py_part = jvm_cpu() - c0, python_cpu() - p0
                    used = jvm_part + py_part
                    if round_ and used / n * 1e6 < best.get(name, float("inf")):
                        parts = (jvm_part / n * 1e6, py_part / n * 1e6)
                seconds = time.perf_counter() - t0
                if round_:
                    us = used / n * 1e6
                    if us < best.get(name, float("inf")):
                        best[name], wall[name] = us, seconds
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ratio = best["arrow"] / best["spark"]
    source_ratio = best["source"] / best["spark"]
    rep.add(
        "cpu",
        {
            "events": n,
            "body_bytes": args.size,
            "partitions": p,
            "arrow_us_per_event": round(best["arrow"], 2),
            "spark_us_per_event": round(best["spark"], 2),
            "arrow / spark": round(ratio, 2),
            "arrow_seconds": round(wall["arrow"], 2),
            "spark_seconds": round(wall["spark"], 2),
            "source_us_per_event": round(best["source"], 2),
            "source_jvm_us_per_event": round(parts[0], 2),
            "source_python_us_per_event": round(parts[1], 2),
            "source / spark": round(source_ratio, 2),
        },
    )
    print(
        f"{best['arrow']:>12.2f} {best['spark']:>12.2f} {ratio:>12.2f} "
        f"{wall['arrow']:>8.2f} {wall['spark']:>8.2f} {parts[0]:>11.2f} {parts[1]:>10.2f} "
        f"{source_ratio:>13.2f}",
        flush=True,
    )
    rows.unpersist()
    spark.stop()


if __name__ == "__main__":
    main()
