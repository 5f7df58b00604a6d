"""The same events through the batch source and through the stream with Trigger.AvailableNow.

Sends N events (default 1M of 200 bytes) over P partitions of an emulated hub (the emulator in
its own process), then, in one Spark session:

* batch: ``spark.read.format("eventhubs")`` earliest -> latest, written to Parquet,
* stream: ``spark.readStream.format("eventhubs")`` from earliest with ``Trigger.AvailableNow``
  into Parquet with a checkpoint, once without a limit (one micro-batch) and once with
  ``maxEventsPerTrigger`` = N/4 (four micro-batches),

and prints events/s of each and the ratio to the batch read. A small warm-up read comes first
so that JVM and Python worker start-up are not counted against the first path. Printed, not
asserted. Run:

    source scripts/_bootstrap.sh && uv run --frozen python bench/stream_vs_batch.py
    uv run --frozen python bench/stream_vs_batch.py --events 200000   # quicker
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

from _report import add_json_flag, report  # noqa: E402
from source_throughput import emulator_process, send  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200, help="body bytes")
    parser.add_argument("--partitions", type=int, default=4)
    add_json_flag(parser)
    args = parser.parse_args()
    with report("stream_vs_batch.py", args.json) as rep:
        _main(args, rep)


def _main(args: argparse.Namespace, rep: Any) -> None:

    from dagster_eventhub_ingest.resources.settings import EventHubSettings
    from dagster_eventhub_ingest.resources.spark.session import local_spark_session

    parts = [str(p) for p in range(args.partitions)]
    with emulator_process({"bench": args.partitions, "warm": 1}) as conn:
        settings = EventHubSettings(eventhub_name="bench", connection_string=conn)
        warm = EventHubSettings(eventhub_name="warm", connection_string=conn)
        sent = send(settings, parts, args.events, args.size)
        send(warm, ["0"], 1000, args.size)
        events = (args.events // args.partitions) * args.partitions
        print(f"sent {events:,} events of {args.size} B in {sent:.1f}s")

        spark = local_spark_session("bench-stream-vs-batch")
        tmp = Path(tempfile.mkdtemp(prefix="ehingest-bench-"))
        try:

            def reader(hub: str) -> dict[str, str]:
                return {"connection_string": conn, "eventhub_name": hub}

            # Warm-up: JVM, Python workers, the source's imports.
            spark.read.format("eventhubs").options(**reader("warm")).load().write.parquet(
                str(tmp / "warm")
            )

            t0 = time.perf_counter()
            spark.read.format("eventhubs").options(**reader("bench")).load().write.parquet(
                str(tmp / "batch")
            )
            batch_s = time.perf_counter() - t0
            assert spark.read.parquet(str(tmp / "batch")).count() == events

            def stream(name: str, limit: int | None) -> tuple[float, int]:
                opts = {**reader("bench"), "startingPosition": "earliest"}
                if limit is not None:
                    opts["maxEventsPerTrigger"] = str(limit)
                t0 = time.perf_counter()
                query = (
                    spark.readStream.format("eventhubs")
                    .options(**opts)
                    .load()
                    .writeStream.format("parquet")
                    .option("path", str(tmp / name))
                    .option("checkpointLocation", str(tmp / f"{name}-chk"))
                    .trigger(availableNow=True)
                    .start()
                )
                query.awaitTermination()
                seconds = time.perf_counter() - t0
                batches = sum(1 for p in query.recentProgress if p["numInputRows"])
                assert spark.read.parquet(str(tmp / name)).count() == events
                return seconds, batches

            one_s, one_n = stream("stream", None)
            four_s, four_n = stream("stream4", max(1, events // 4))
        finally:
            spark.stop()
            shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{'path':<50} {'seconds':>8} {'events/s':>10} {'vs batch':>9}")
    rows = [
        ("batch: spark.read -> Parquet", batch_s),
        (f"stream AvailableNow ({one_n} micro-batch) -> Parquet", one_s),
        (f"stream AvailableNow ({four_n} micro-batches) -> Parquet", four_s),
    ]
    for label, seconds in rows:
        print(f"{label:<50} {seconds:>8.1f} {events / seconds:>10,.0f} {batch_s / seconds:>8.2f}x")
        rep.add(
            label,
            {
                "seconds": round(seconds, 2),
                "events_per_second": round(events / seconds),
                "batch_s / this_s": round(batch_s / seconds, 2),
            },
        )


if __name__ == "__main__":
    main()
