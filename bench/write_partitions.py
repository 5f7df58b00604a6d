"""JVM CPU per event of ``ops.write.write_batch`` by the number of partitions in a batch.

``write_batch`` observes, while the write consumes the DataFrame, a row count inside and outside
the ranges and seven statistics per partition (events, bytes, first and last sequence number,
last offset, first and last enqueued time): 2 + 7 x P aggregates that Spark updates for every row.
This prints, for the same events (``--events`` rows of ``--size`` bytes, the ``eventhubs``
schema, no Event Hub involved) spread over P partitions, the JVM's CPU microseconds per event of:

* a plain Parquet write of the rows (the floor: Arrow-free, what the format itself costs),
* ``write_batch`` to Parquet (observation, batch-key column, commit, verification),

and the ratio. The JVM's CPU is read from its process (psutil) around each write, best of
``--repeat``; the session is local[2] with the CLI's defaults and warm (one write first).

    source scripts/_bootstrap.sh
    uv run --frozen python bench/write_partitions.py                  # P = 4, 16, 32
    uv run --frozen python bench/write_partitions.py --partitions 4 64 --events 200000
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--size", type=int, default=1024, help="event body bytes")
    parser.add_argument("--partitions", type=int, nargs="+", default=[4, 16, 32])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    import psutil
    from pyspark.sql import functions as F

    from ops.write import write_batch
    from resources.ranges import SeqRange
    from resources.settings import SinkSettings
    from resources.spark_session import local_spark_session
    from resources.spark_source import eventhubs_schema

    spark = local_spark_session("bench-write-partitions", master="local[2]")
    (java,) = [p for p in psutil.Process().children(recursive=True) if p.name() == "java"]

    def jvm_cpu() -> float:
        t = java.cpu_times()
        return t.user + t.system

    schema = eventhubs_schema()
    hexes = max(1, args.size // 32)
    print(
        f"write_batch JVM CPU per event: {args.events:,} events of {args.size} bytes, local[2], "
        f"best of {args.repeat}",
        file=sys.stderr,
    )
    print(f"{'P':>4} {'parquet us/ev':>14} {'write_batch us/ev':>18} {'ratio':>6}")
    with tempfile.TemporaryDirectory(prefix="bench-write-") as tmp:
        for p in args.partitions:
            per = args.events // p
            rows = (
                spark.range(per * p)
                .select(
                    F.expr(f"unhex(repeat(sha2(cast(id as string), 256), {hexes}))").alias("body"),
                    (F.col("id") % p).cast("string").alias("partition"),
                    F.col("id").cast("string").alias("offset"),
                    (F.col("id") / p).cast("long").alias("sequenceNumber"),
                    F.current_timestamp().alias("enqueuedTime"),
                    F.lit(None).cast("string").alias("publisher"),
                    F.lit(None).cast("string").alias("partitionKey"),
                    F.create_map().cast(schema["properties"].dataType).alias("properties"),
                    F.create_map()
                    .cast(schema["systemProperties"].dataType)
                    .alias("systemProperties"),
                )
                .repartition(4)
                .cache()
            )
            rows.count()
            ranges = {str(i): SeqRange(0, per - 1) for i in range(p)}
            best: dict[str, float] = {}
            for rep in range(args.repeat + 1):  # the first is a warm-up, not counted
                for name in ("parquet", "write_batch"):
                    out = Path(tmp) / name
                    shutil.rmtree(out, ignore_errors=True)
                    c0 = jvm_cpu()
                    if name == "parquet":
                        rows.write.mode("overwrite").parquet(str(out))
                    else:
                        write_batch(rows, SinkSettings(format="parquet", path=str(out)), ranges)
                    used = (jvm_cpu() - c0) / (per * p) * 1e6
                    if rep:
                        best[name] = min(best.get(name, used), used)
            rows.unpersist()
            ratio = best["write_batch"] / best["parquet"]
            print(f"{p:>4} {best['parquet']:>14.1f} {best['write_batch']:>18.1f} {ratio:>6.2f}")
    spark.stop()


if __name__ == "__main__":
    main()
