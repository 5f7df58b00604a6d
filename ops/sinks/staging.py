"""The staging directories of a batch, removed when an attempt left them behind.

A dynamic-overwrite write stages its files under ``<path>/.spark-staging-<job uuid>/`` (Spark's)
or ``<path>/.ehingest-staging-<attempt>/`` (:mod:`.parquet_writer`'s); a driver killed
mid-write, or a failed commit whose abort could not delete, leaves it behind. Only a staging
directory holding nothing but this batch's keys is removed (no other live owner writes those
keys).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from dagster_eventhub_ingest.ops.sinks.batch import BATCH_COLUMN
from dagster_eventhub_ingest.ops.sinks.checks import sink_location
from dagster_eventhub_ingest.ops.sinks.failures import failure_cause
from dagster_eventhub_ingest.ops.sinks.storage import delta_uri
from dagster_eventhub_ingest.resources.sink import DELTALAKE_FORMAT, SinkSettings

logger = logging.getLogger(__name__)

__all__ = [
    "STAGING_PREFIX",
    "STAGING_PREFIXES",
    "WRITER_STAGING_PREFIX",
    "clean_batch_staging",
    "remove_batch_staging",
    "wait_for_running_tasks",
]


#: Spark's staging directory of a dynamic partition overwrite (it appends the job's uuid).
STAGING_PREFIX = ".spark-staging-"
#: :class:`~dagster_eventhub_ingest.ops.sinks.parquet_writer.ParquetBatchWriter`'s (it appends
#: its attempt's id). Hidden (a leading ``.``): Spark's and other readers skip it.
WRITER_STAGING_PREFIX = ".ehingest-staging-"
#: Every staging directory name a batch's attempt may leave at a sink path.
STAGING_PREFIXES = (STAGING_PREFIX, WRITER_STAGING_PREFIX)


def clean_batch_staging(
    sink: SinkSettings, keys: list[str], *, settle_seconds: float = 0.0
) -> list[str]:
    """Remove staging directories at the sink path that hold only these batch keys.

    A dynamic-overwrite write stages its files under ``<path>/.spark-staging-<job uuid>/``
    (Spark picks the uuid) or ``<path>/.ehingest-staging-<attempt>/``; a driver killed
    mid-write, or a failed commit whose abort could not delete, leaves it behind. A staging
    directory is this batch's when every ``eh_batch=`` directory in it is one of ``keys``: the
    keys are the batch's intents, which only their current owner writes, so a concurrent run's
    staging (other keys) is never touched, nor one too new to hold any batch directory yet.
    Best effort: never raises (a leftover is only litter, nobody reads it). Returns the removed
    paths.

    ``settle_seconds``: after a failed write, tasks of the failed job may still be finishing
    and write into a staging directory Spark's abort already removed; look again every 0.5 s
    until a look finds nothing of this batch's, at most this long.
    """
    removed = _clean_batch_staging_once(sink, keys)
    deadline = time.monotonic() + settle_seconds
    quiet = 0
    while settle_seconds > 0 and quiet < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
        again = _clean_batch_staging_once(sink, keys)
        quiet = 0 if again else quiet + 1
        removed += again
    return removed


def wait_for_running_tasks(spark: Any, timeout: float) -> None:
    """Until a classic session has no active stage (the failed job's tasks were stopped), at
    most ``timeout`` seconds; Spark Connect cannot tell, so this returns at once there."""
    from dagster_eventhub_ingest.resources.spark.kind import is_connect_session

    if is_connect_session(spark):
        return
    try:
        tracker = spark.sparkContext.statusTracker()
        deadline = time.monotonic() + timeout
        while tracker.getActiveStageIds() and time.monotonic() < deadline:
            time.sleep(0.2)
    except Exception:  # best effort, as the cleanup itself
        logger.debug("could not wait for the failed job's tasks", exc_info=True)


def _clean_batch_staging_once(sink: SinkSettings, keys: list[str]) -> list[str]:
    if sink.path is None or sink.format == DELTALAKE_FORMAT:
        return []
    return remove_batch_staging(
        delta_uri(sink.path), sink.storage_options, keys, sink_location(sink)
    )


def remove_batch_staging(
    uri: str, storage_options: Mapping[str, str], keys: list[str], location: str | None = None
) -> list[str]:
    """Remove the staging directories at ``uri`` that hold only these batch keys (the rule of
    :func:`clean_batch_staging`, one look). Never raises; returns the removed paths."""
    from pyarrow import fs as pafs

    from dagster_eventhub_ingest.ops.sinks.parquet_files import spark_directory_value
    from dagster_eventhub_ingest.ops.sinks.storage import arrow_filesystem

    wanted = {f"{BATCH_COLUMN}={spark_directory_value(k)}" for k in keys}
    removed: list[str] = []
    try:
        filesystem, root = arrow_filesystem(uri, storage_options)
        entries = filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        for entry in entries:
            if entry.type != pafs.FileType.Directory or not entry.base_name.startswith(
                STAGING_PREFIXES
            ):
                continue
            inside = filesystem.get_file_info(pafs.FileSelector(entry.path, recursive=True))
            batches = {
                e.base_name
                for e in inside
                if e.type == pafs.FileType.Directory and e.base_name.startswith(f"{BATCH_COLUMN}=")
            }
            if batches and batches <= wanted:
                filesystem.delete_dir(entry.path)
                removed.append(entry.path)
                logger.info(
                    "removed staging %s left by an earlier attempt of batch(es) %s",
                    entry.path,
                    sorted(b.split("=", 1)[1] for b in batches),
                )
    except Exception as exc:  # cannot list or delete: leave it, nobody reads staging
        logger.warning("could not clean staging under %s: %s", location or uri, failure_cause(exc))
    return removed
