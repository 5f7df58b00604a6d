"""Materialize the project's asset through a non-local Spark session, in its own process.

``python -m tests.cluster.materialize '<json>'`` with keys ``engine`` (``standalone``: the
project's PySpark resource on ``spark://``; ``connect``: a plain ``dagster_pyspark``
``PySparkResource`` with ``spark.remote``), ``url``, ``hub``, ``eventhub_name``, ``store``,
``container``, ``sink``, ``partitions``. Prints one JSON line: success and the partitions
materialized. A process of its own because a Python process holds one kind of Spark session.
"""

from __future__ import annotations

import json
import sys

import dagster as dg


def main(args: dict) -> dict:
    from dagster_pyspark import PySparkResource

    from dagster_eventhub_ingest.dagster_project import IngestAssetConfig
    from dagster_eventhub_ingest.dagster_project.component import build_eventhub_ingest_defs
    from dagster_eventhub_ingest.dagster_project.resources import (
        SinkResource,
        local_pyspark_resource,
    )
    from dagster_eventhub_ingest.emulator.spark_cluster import APP_CONF
    from dagster_eventhub_ingest.resources.settings import EventHubSettings
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings
    from tests.support.fixtures.dagster import eventhub_resource, store_resource

    if args["engine"] == "connect":
        pyspark = PySparkResource(spark_config={"spark.remote": args["url"]})
    else:
        pyspark = local_pyspark_resource({"spark.master": args["url"], **APP_CONF})
    defs = build_eventhub_ingest_defs(
        key="cluster_events",
        eventhub=eventhub_resource(
            EventHubSettings(eventhub_name=args["eventhub_name"], connection_string=args["hub"])
        ),
        partition_store=store_resource(
            StoreSettings(container=args["container"], connection_string=args["store"])
        ),
        sink=SinkResource(path=args["sink"], shared=True),
        pyspark=pyspark,
        partition_ids=args["partitions"],
        options=IngestAssetConfig(lease_expiry_seconds=30),
    )
    job = defs.resolve_implicit_global_asset_job_def()
    tags = {
        "dagster/asset_partition_range_start": args["partitions"][0],
        "dagster/asset_partition_range_end": args["partitions"][-1],
    }
    with dg.instance_for_test(overrides={"telemetry": {"enabled": False}}) as instance:
        result = job.execute_in_process(instance=instance, tags=tags, raise_on_error=False)
        errors = [
            str(e.event_specific_data.error.message)  # type: ignore[union-attr]
            for e in result.all_events
            if e.is_step_failure
        ]
        return {
            "success": result.success,
            "partitions": sorted(
                str(e.materialization.partition) for e in result.get_asset_materialization_events()
            ),
            "errors": errors,
        }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
