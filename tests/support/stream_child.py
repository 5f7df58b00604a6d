"""A streaming query in its own process, for the kill-and-restart test (not a test module).

``python tests/support/stream_child.py <out> <checkpoint> <marker> <hub> <crash_partition>
<crash_seq>`` with the connection string in ``EHINGEST_TEST_CONN``. The query reads the hub with
``Trigger.AvailableNow`` and ``maxEventsPerTrigger`` into Parquet. While no ``marker`` file exists,
the task that meets ``crash_seq`` of ``crash_partition`` creates it and hangs, so the parent can
SIGKILL the process in the middle of that batch.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main() -> None:
    out, checkpoint, marker, hub, crash_partition, crash_seq = sys.argv[1:7]
    from dagster_eventhub_ingest.resources.spark.session import local_spark_session

    spark = local_spark_session("ehingest-stream-child", master="local[2]", shuffle_partitions=2)
    crash_at = int(crash_seq)

    from pyspark.sql.functions import udf

    @udf("long")
    def hang_once(partition: str, seq: int) -> int:
        # A plain Python UDF (no pandas needed): it runs inside the batch's task.
        if partition == crash_partition and seq == crash_at and not os.path.exists(marker):
            Path(marker).write_text(str(os.getpid()))
            time.sleep(3600)  # killed here
        return seq

    df = (
        spark.readStream.format("eventhubs")
        .option("eventhubs.connectionString", os.environ["EHINGEST_TEST_CONN"])
        .option("eventhub_name", hub)
        .option("startingOffsets", "earliest")
        .option("maxEventsPerTrigger", "150")
        .load()
    )
    query = (
        df.withColumn("sequenceNumber", hang_once("partition", "sequenceNumber"))
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    print(f"done: {len(query.recentProgress)} batches, {rows} rows", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
