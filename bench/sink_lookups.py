"""Benchmark: what a run's looks at the sink cost, as the sink grows.

Before its first claim a run reads the sink's record of its source (``check_sink_source``);
before recording intents, once per claim cycle, it lists the batch keys the sink holds (the
checkpoint of last resort, ``sink_place(...).batch_keys()``). Both grow with nothing but the
sink: this builds a Parquet path sink and a ``deltalake`` table holding N batches of one
partition (N empty batch directories / N add actions of one tiny file each, what the looks
read) and prints the median and best of each look over the samples, without Spark.

Usage::

    uv run --frozen python bench/sink_lookups.py [--batches 2000 8000] [--samples 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dagster_eventhub_ingest.ops.sinks.batch import batch_key  # noqa: E402
from dagster_eventhub_ingest.ops.sinks.place import sink_place  # noqa: E402
from dagster_eventhub_ingest.ops.sinks.source import check_sink_source  # noqa: E402
from dagster_eventhub_ingest.resources.sink import SinkSettings  # noqa: E402
from dagster_eventhub_ingest.resources.store.records import HubRef  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from _report import add_json_flag, report  # noqa: E402

HUB = HubRef("myns.servicebus.windows.net", "telemetry", "$Default")


def _no_session():  # the looks measured here need none
    raise AssertionError("no Spark session in this benchmark")


def _time(samples: int, look: Callable[[], object]) -> tuple[float, float]:
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        look()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), min(times)


def _parquet_sink(root: Path, batches: int) -> SinkSettings:
    for i in range(batches):
        (root / f"eh_batch={batch_key('0', i * 100, i * 100 + 99)}").mkdir(parents=True)
    return SinkSettings(path=str(root))


def _delta_sink(root: Path, batches: int) -> SinkSettings:
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, RemoveAction

    from dagster_eventhub_ingest.ops.sinks.read import delta_output_schema

    sink = SinkSettings(format="deltalake", path=str(root))
    schema = delta_output_schema(sink.sources)
    DeltaTable.create(str(root), schema=schema, partition_by=["eh_batch"])
    pq.write_table(pa.table({"sequenceNumber": [0]}), root / "part.parquet")
    size = os.path.getsize(root / "part.parquet")
    actions: list[AddAction | RemoveAction] = [
        AddAction(
            path=f"eh_batch={key}/part.parquet",
            size=size,
            partition_values={"eh_batch": key},
            modification_time=int(time.time() * 1000),
            data_change=True,
            stats='{"numRecords": 1}',
        )
        for key in (batch_key("0", i * 100, i * 100 + 99) for i in range(batches))
    ]
    DeltaTable(str(root)).create_write_transaction(
        actions, mode="append", schema=schema, partition_by=["eh_batch"]
    )
    return sink


def _looks(sink: SinkSettings) -> dict[str, Callable[[], object]]:
    def record() -> object:
        return check_sink_source(sink, HUB, _no_session)

    def keys() -> object:
        return sink_place(sink, _no_session).batch_keys()

    return {"source record (per run)": record, "batch keys (per cycle)": keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[2000, 8000])
    parser.add_argument("--samples", type=int, default=20)
    add_json_flag(parser)
    args = parser.parse_args()
    with report("sink_lookups.py", args.json) as rep:
        print(f"{'sink':<10} {'batches':>8} {'look':<28} {'median ms':>10} {'best ms':>8}")
        for batches in args.batches:
            for kind, build in (("parquet", _parquet_sink), ("deltalake", _delta_sink)):
                with tempfile.TemporaryDirectory(prefix="ehingest-bench-") as tmp:
                    sink = build(Path(tmp) / "out", batches)
                    check_sink_source(sink, HUB, _no_session)  # records it (adopts the sink)
                    looks = _looks(sink)
                    for name, look in looks.items():
                        median, best = _time(args.samples, look)
                        print(f"{kind:<10} {batches:>8} {name:<28} {median:>10.2f} {best:>8.2f}")
                        rep.add(
                            f"{kind} {batches} batches: {name}",
                            {"median_ms": round(median, 2), "best_ms": round(best, 2)},
                        )


if __name__ == "__main__":
    main()
