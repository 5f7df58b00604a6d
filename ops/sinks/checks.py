"""The sink checks a run makes before anything is claimed.

Kept apart from the writers (which define Spark data sources at import, so they import pyspark):
the CLI's config check and a run's preflight use these, and a run with nothing to read must not
pay for importing pyspark.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from dagster_eventhub_ingest.ops.sinks.batch import BATCH_COLUMN
from dagster_eventhub_ingest.ops.sinks.failures import failure_cause
from dagster_eventhub_ingest.ops.sinks.storage import delta_uri, hidden_name, is_local_path
from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.failures import error_condition
from dagster_eventhub_ingest.resources.sink import BUILTIN_FORMATS, DELTALAKE_FORMAT, SinkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "check_sink_for_session",
    "check_sink_format",
    "check_sink_layout",
    "check_sink_reachable",
    "driver_sees_path",
    "sink_location",
]


def sink_location(sink: SinkSettings, spark: SparkSession | None = None) -> str:
    """Where ``sink`` writes: the absolute path, or the table name (qualified when known)."""
    if sink.path is not None:
        if "://" in sink.path:
            return sink.path
        return os.path.abspath(sink.path)
    assert sink.table is not None
    if spark is not None and sink.table.count(".") == 0:
        return f"{spark.catalog.currentDatabase()}.{sink.table}"
    return sink.table


def check_sink_reachable(sink: SinkSettings, *, local: bool, engine: str) -> None:
    """Refuse a local sink path when executors may run on other machines (before any claim).

    Executors on other hosts would write the batch to their own disks, and the driver would
    commit (or fail to see) files it cannot read: the checkpoint must never move past that.

    Args:
        sink: the sink settings; ``sink.shared`` declares a local path mounted on every node.
        local: True when Spark's executors run on this machine (a ``local`` master).
        engine: how Spark runs, for the message (``master 'spark://h:7077'``).

    Raises:
        ConfigurationError: a local path on a non-local engine, not declared shared.
    """
    if local or sink.shared or sink.path is None or not is_local_path(sink.path):
        return
    raise ConfigurationError(
        f"sink path {sink.path!r} is a local path, but Spark runs on {engine}: executors on other "
        "machines would write the events to their own disks and the checkpoints would move past "
        "files the driver cannot read. Use a location every executor and the driver share "
        "(abfss://..., az://..., a catalog table), or, if this path is a volume mounted at the "
        "same place on every node, declare it with sink shared: true"
    )


def _fs_layout(path: str) -> list[str] | None:
    """The partition columns a Hive-style directory tree at ``path`` has on disk, outermost first.

    None when there is nothing there yet, or no filesystem pyarrow can list (a cloud scheme
    without its libraries): the check is then left to the writer.
    """
    from pyarrow import fs as pafs

    try:
        filesystem, root = pafs.FileSystem.from_uri(
            path if "://" in path else os.path.abspath(path)
        )
        info = filesystem.get_file_info(root)
    except Exception:  # an unsupported scheme or missing credentials: cannot look
        return None
    if info.type != pafs.FileType.Directory:
        return None
    columns: list[str] = []
    current = root
    while True:
        entries = filesystem.get_file_info(pafs.FileSelector(current))
        visible = [e for e in entries if not hidden_name(e.base_name)]
        dirs = [e for e in visible if e.type == pafs.FileType.Directory and "=" in e.base_name]
        if not dirs:
            return columns if visible or columns else None
        names = sorted({e.base_name.split("=", 1)[0] for e in dirs})
        if len(names) > 1:
            columns.append("|".join(names))  # already mixed: shown as is
            return columns
        columns.append(names[0])
        current = dirs[0].path


def check_sink_layout(sink: SinkSettings) -> None:
    """Refuse a sink whose output on disk is partitioned differently from this writer's layout.

    A changed ``partition_by`` would write new batches (and replays of pending ones) into
    another directory layout next to the old one: the events of a replayed batch land twice,
    and neither Spark nor pyarrow can read the folder any more. Checked before anything is
    claimed, for Spark formats on a path (by listing the directory tree) and for ``deltalake``
    (the table's partition columns). Tables are checked by the catalog on insert.

    Raises:
        ConfigurationError: the layout on disk differs; names both and what to do.
    """
    if sink.path is None:
        return
    wanted = [*sink.partition_by, BATCH_COLUMN]
    if sink.format == DELTALAKE_FORMAT:
        try:
            from deltalake import DeltaTable

            found: list[str] | None = list(
                DeltaTable(delta_uri(sink.path), storage_options=dict(sink.storage_options) or None)
                .metadata()
                .partition_columns
            )
        except Exception:  # no table there yet (or not readable: the write will say why)
            return
    else:
        found = _fs_layout(sink.path)
    if found is None or found == wanted:
        return
    raise ConfigurationError(
        f"sink.partition_by: the {sink.format} output at {sink_location(sink)!r} is partitioned "
        f"by {found} on disk, but this writer needs {wanted} (partition_by + {BATCH_COLUMN!r}). "
        "Writing there would mix two layouts (a replayed batch would land twice, and the folder "
        "could no longer be read); nothing was claimed or written. Set partition_by back to "
        f"{[c for c in found if c != BATCH_COLUMN]} or write to a new path."
    )


def check_sink_for_session(sink: SinkSettings, spark: SparkSession) -> None:
    """:func:`check_sink_reachable` for the executors of ``spark`` (classic or Connect)."""
    from dagster_eventhub_ingest.resources.spark.kind import describe_engine, session_is_local

    if sink.path is None or sink.shared or not is_local_path(sink.path):
        return  # no need to ask the session anything
    check_sink_reachable(sink, local=session_is_local(spark), engine=describe_engine(spark))


def driver_sees_path(sink: SinkSettings, spark: SparkSession) -> bool:
    """Whether this process sees the sink's local path where Spark's driver does: a local path
    (or a mount every node shares) and a classic session, whose driver this process is. A Spark
    Connect client is not the server's driver, and need not see a mount the server's executors
    share; its batches are committed and counted on the server."""
    from dagster_eventhub_ingest.resources.spark.kind import is_connect_session

    return sink.path is not None and is_local_path(sink.path) and not is_connect_session(spark)


def check_sink_format(sink: SinkSettings, spark: SparkSession | Callable[[], SparkSession]) -> None:
    """Refuse a Spark format the session has no data source for, before anything is claimed.

    A fully qualified class name (or ``delta``, ``avro``, ... without their package) would
    otherwise fail at the first write, after claims and intents. The probe is engine-neutral
    (classic sessions and Spark Connect alike, no JVM access): reading the format from a path
    that does not exist fails with ``DATA_SOURCE_NOT_FOUND`` only when there is no such source;
    any other failure (the path, a write-only source, missing options) means it exists.
    ``spark``: the session, or a callable starting it (only called when a probe is needed).

    Raises:
        ConfigurationError: no data source of that name; names it and what is valid.
    """
    if sink.format == DELTALAKE_FORMAT or sink.format in BUILTIN_FORMATS:
        return
    session = spark if not callable(spark) else spark()
    probe = f"/ehingest-format-probe-{uuid.uuid4().hex}/does-not-exist"
    try:
        session.read.format(sink.format).load(probe)
    except Exception as exc:
        if not _source_missing(exc):
            return
        raise ConfigurationError(
            f"sink format {sink.format!r}: the Spark session has no data source of that name "
            f"({failure_cause(exc)[:300]}); nothing was claimed or written. Use parquet, orc or "
            "json, "
            "delta/avro/iceberg/hudi with their package in the session (spark.jars.packages), "
            f"{DELTALAKE_FORMAT} (delta-rs, no jars), or the fully qualified class name of a "
            "data source on the session's classpath (spark.jars)."
        ) from None


def _source_missing(exc: BaseException) -> bool:
    return error_condition(exc) == "DATA_SOURCE_NOT_FOUND"
