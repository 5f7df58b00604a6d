"""Where events land: the sink's frozen, picklable settings and the rules they are held to.

The rules are written once: :class:`SinkSettings` (built in Python) and the configuration model's
``SinkConfig`` (YAML, defs.yaml, resources) ask the same ``*_problem`` functions, each of which
returns what is wrong, or None.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from dagster_eventhub_ingest.resources.errors import ConfigurationError, did_you_mean, redact
from dagster_eventhub_ingest.resources.settings import EVENT_COLUMNS

__all__ = [
    "BUILTIN_FORMATS",
    "DELTALAKE_FORMAT",
    "GLOB_CHARACTERS",
    "PARTITION_COLUMNS",
    "SINK_SOURCES",
    "SPARK_FORMATS",
    "SinkSettings",
    "SinkSources",
    "partition_by_problem",
    "sink_format_problem",
    "sink_path_problem",
    "sink_place_problem",
]

#: Sink format for Delta tables written by delta-rs (``deltalake``), without Spark jars.
DELTALAKE_FORMAT = "deltalake"
#: Spark formats that can hold the event schema (binary body, map columns). Other data sources
#: are named by their fully qualified class name (anything with a dot).
SPARK_FORMATS: tuple[str, ...] = ("parquet", "delta", "orc", "avro", "json", "iceberg", "hudi")
#: The Spark formats every session has without a package (the others need their jars).
BUILTIN_FORMATS: tuple[str, ...] = ("parquet", "orc", "json")
#: Whose events a sink holds: one source's (a namespace, hub and consumer group), refusing any
#: other, or several sources', each batch key and row naming its own (``SinkConfig.sources``).
SinkSources = Literal["one", "many"]
SINK_SOURCES: tuple[str, ...] = get_args(SinkSources)
#: The output columns a sink may be partitioned by (scalars; not the body or the maps).
PARTITION_COLUMNS: tuple[str, ...] = tuple(
    c for c in EVENT_COLUMNS if c not in ("body", "properties", "systemProperties", "amqpBody")
)


def sink_format_problem(fmt: str) -> str | None:
    """Unless ``fmt`` is a known format or a data source class name: what is wrong."""
    valid = (*SPARK_FORMATS, DELTALAKE_FORMAT)
    if fmt in valid or ("." in fmt and fmt.strip(".") == fmt and " " not in fmt):
        return None
    return (
        f"{redact(repr(fmt))} is not a known format; {did_you_mean(fmt, valid)}valid: "
        f"{', '.join(valid)}, or a data source's fully qualified class name"
    )


def partition_by_problem(columns: Sequence[str]) -> str | None:
    """Unless every one of ``columns`` is an output column a sink can be partitioned by."""
    for column in columns:
        if column not in PARTITION_COLUMNS:
            return (
                f"{column!r} is not a column of the output; "
                f"{did_you_mean(column, PARTITION_COLUMNS)}valid: {', '.join(PARTITION_COLUMNS)}"
            )
    if len(set(columns)) != len(columns):
        return f"{list(columns)} names a column twice"
    return None


#: Characters Spark and Hadoop read as a glob pattern in a path (``*``, ``?``, ``[...]``,
#: ``{a,b}``, ``\`` escapes): the batch would be written under the literal name, then never
#: found when the run reads it back to verify it.
GLOB_CHARACTERS = "*?[]{}\\"


def sink_path_problem(path: str) -> str | None:
    """What is wrong with a sink path on its own (empty, the file system's root, a glob), or
    None. Paths are refused rather than escaped: Spark's writers and readers do not agree on
    escapes, and a folder name needs none of these characters."""
    if not path.strip():
        return f"{path!r} is empty; give the folder or URI events land in"
    bare = path.strip().rstrip("/")
    if bare in ("", "file:", "file://") or re.fullmatch(r"[A-Za-z]:\\?", bare):
        return (
            f"{path!r} is the root of the file system; give a folder of its own (was it "
            "built from an empty variable?)"
        )
    found = sorted({c for c in path if c in GLOB_CHARACTERS})
    if found:
        return (
            f"{path!r} holds {' '.join(repr(c) for c in found)}, which Spark reads as a glob "
            "pattern: the batch would be written, then never found when verified. Name the "
            "folder without " + ", ".join(repr(c) for c in GLOB_CHARACTERS)
        )
    return None


def sink_place_problem(
    fmt: str, path: str | None, table: str | None, storage_options: Mapping[str, str]
) -> str | None:
    """What is wrong with where a sink writes (``key: what`` names the key), or None."""
    if (path is None) == (table is None):
        return f"give exactly one of path or table (got path={path!r}, table={table!r})"
    if path is not None:
        problem = sink_path_problem(path)
        if problem:
            return f"path: {problem}"
    if fmt == DELTALAKE_FORMAT and path is None:
        return (
            f"format {DELTALAKE_FORMAT!r} needs a path (a Delta table location), not "
            f"table={table!r}; or use format 'delta' with a Spark catalog that has Delta"
        )
    if storage_options and fmt != DELTALAKE_FORMAT:
        return (
            f"storage_options: only for format {DELTALAKE_FORMAT!r} (got {fmt!r}); Spark "
            "formats reach abfss:// through the cluster's hadoop-azure settings (fs.azure.*)"
        )
    return None


@dataclass(frozen=True)
class SinkSettings:
    """Where events land: a Spark format and a path or table, or a Delta table via delta-rs.

    ``format``: any format the Spark session can write (``parquet`` by default, ``delta`` on a
    cluster with Delta) or ``deltalake`` for Delta written from Arrow without Spark jars.
    ``shared``: declare a local ``path`` shared by every node (a mount); a local path is
    otherwise refused when Spark is not local, since executors on other machines would write to
    their own disks.
    """

    format: str = "parquet"
    path: str | None = None
    table: str | None = None
    partition_by: tuple[str, ...] = ()
    #: The local ``path`` is a volume every executor and the driver see at the same place (an
    #: NFS or DBFS-style mount). Without it a local path is refused on a non-local Spark.
    shared: bool = False
    #: ``deltalake`` on ``abfss://`` / ``az://``: delta-rs storage options (account, key or SAS
    #: or service principal, endpoint); see ops/sinks/storage.py. Hidden from repr.
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: ``one`` or ``many`` (``dagster_eventhub_ingest.resources.config.SinkConfig.sources``).
    sources: SinkSources = "one"

    def __post_init__(self) -> None:
        format_problem = sink_format_problem(self.format)
        if format_problem:
            raise ConfigurationError(f"sink.format: {format_problem}")
        if self.sources not in SINK_SOURCES:
            raise ConfigurationError(
                f"sink.sources: {self.sources!r} is not valid; valid: {', '.join(SINK_SOURCES)}"
            )
        columns_problem = partition_by_problem(self.partition_by)
        if columns_problem:
            raise ConfigurationError(f"sink.partition_by: {columns_problem}")
        place_problem = sink_place_problem(self.format, self.path, self.table, self.storage_options)
        if place_problem:
            head, sep, rest = place_problem.partition(": ")
            keyed = sep and head.isidentifier()
            raise ConfigurationError(f"sink.{head}: {rest}" if keyed else f"sink: {place_problem}")
