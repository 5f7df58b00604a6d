"""Parquet files from Arrow batches, one per partition-value combination: what the Python
writers (:mod:`.delta_writer`, :mod:`.parquet_writer`) share.

A task's rows arrive as Arrow record batches carrying their partition columns; each
combination of those columns' values gets its own file under a ``col=value/...`` directory,
without the partition columns, written with the column choices the Spark formats' Parquet is
written with (:mod:`.parquet_columns`: dictionary and statistics per column; snappy). Only the
directory names differ between the writers (:func:`spark_directory_value` for Spark's layout,
URL quoting for delta-rs's) and are passed in.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dagster_eventhub_ingest.ops.sinks.batch import BATCH_COLUMN
from dagster_eventhub_ingest.ops.sinks.parquet_columns import NO_STATISTICS_COLUMNS, PLAIN_COLUMNS
from dagster_eventhub_ingest.resources.errors import redact

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "NULL_DIRECTORY",
    "PartitionedParquetFiles",
    "keyed_rows",
    "parquet_column_options",
    "partition_values",
    "spark_directory_value",
    "unreadable_file",
]

#: The directory value of a null (and, in Spark's layout, an empty) partition value
#: (Spark's ``ExternalCatalogUtils.DEFAULT_PARTITION_NAME``, Hive's default).
NULL_DIRECTORY = "__HIVE_DEFAULT_PARTITION__"

#: What Spark's ``ExternalCatalogUtils.escapePathName`` escapes (on a non-Windows driver): the
#: ASCII control characters 0x01-0x1F, DEL and ``"#%'*/:=?\{[]^``, each as ``%`` and two
#: upper-case hex digits. Anything else (spaces, non-ASCII) stays as it is.
_SPARK_ESCAPED = frozenset([*map(chr, range(0x01, 0x20)), *"\"#%'*/:=?\\\x7f{[]^"])


def spark_directory_value(value: str | None) -> str:
    """A partition value as Spark names its directory (``getPartitionValueString``): null and
    the empty string are :data:`NULL_DIRECTORY`, the rest escaped as
    ``ExternalCatalogUtils.escapePathName`` escapes it."""
    if value is None or value == "":
        return NULL_DIRECTORY
    if not _SPARK_ESCAPED.intersection(value):
        return value
    return "".join(f"%{ord(c):02X}" if c in _SPARK_ESCAPED else c for c in value)


def keyed_rows(batch: pa.RecordBatch, schema: pa.Schema) -> tuple[pa.Table, int]:
    """``batch`` cast to ``schema`` without its rows outside the batch ranges (no batch key),
    and how many those were: they are counted, never written."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = pa.Table.from_batches([batch]).cast(schema)
    keyed = pc.is_valid(table.column(BATCH_COLUMN))
    outside = table.num_rows - (pc.sum(keyed).as_py() or 0)
    return (table.filter(keyed) if outside else table), outside


def partition_values(keys: list[pa.ChunkedArray]) -> list[tuple[str | None, ...]]:
    """The distinct combinations of the partition columns' values (``keys``), in order of first
    appearance. Through ``pc.unique`` for one column and Python for several: a table's
    ``group_by`` imports pyarrow's query engine and pandas with it, in every Python worker that
    writes."""
    import pyarrow.compute as pc

    if len(keys) == 1:
        return [(value,) for value in pc.unique(keys[0]).to_pylist()]
    return list(dict.fromkeys(zip(*(k.to_pylist() for k in keys), strict=True)))


def _leaf_paths(name: str, type: pa.DataType) -> list[str]:
    """The Parquet column paths pyarrow writes for a field (a map's ``name.key_value.key`` and
    ``.value``, a list's ``name.list.element``, a struct's ``name.child``): what its per-column
    writer options name."""
    import pyarrow as pa

    if pa.types.is_map(type):
        return [
            *_leaf_paths(f"{name}.key_value.key", type.key_type),
            *_leaf_paths(f"{name}.key_value.value", type.item_type),
        ]
    if pa.types.is_struct(type):
        return [p for field in type for p in _leaf_paths(f"{name}.{field.name}", field.type)]
    if pa.types.is_list(type) or pa.types.is_large_list(type):
        return _leaf_paths(f"{name}.list.element", type.value_type)
    return [name]


def parquet_column_options(schema: pa.Schema) -> dict[str, list[str]]:
    """pyarrow's ``ParquetWriter`` options for the columns of ``schema``: a dictionary and
    statistics for every column except those
    :mod:`dagster_eventhub_ingest.ops.sinks.parquet_columns` names (as the Spark formats'
    Parquet is written)."""
    leaves = [(field.name, p) for field in schema for p in _leaf_paths(field.name, field.type)]
    return {
        "use_dictionary": [p for top, p in leaves if top not in PLAIN_COLUMNS],
        "write_statistics": [p for top, p in leaves if top not in NO_STATISTICS_COLUMNS],
    }


def unreadable_file(filesystem: Any, full: str, rel: str, rows: int) -> str | None:
    """Why the file a task reported at ``full`` (``rel`` in messages) is not committable here
    (missing, not Parquet, another row count), or None when it holds its ``rows``."""
    import pyarrow.parquet as pq
    from pyarrow import fs as pafs

    if filesystem.get_file_info(full).type != pafs.FileType.File:
        return f"file {rel!r} written by a task does not exist here"
    try:
        with filesystem.open_input_file(full) as f:
            found = pq.ParquetFile(f).metadata.num_rows
    except Exception as exc:
        return f"file {rel!r} is not readable Parquet: {redact(str(exc))[:200]}"
    if found != rows:
        return f"file {rel!r} holds {found} rows, its task wrote {rows}"
    return None


@dataclass
class _OpenFile:
    rel: str
    full: str
    writer: Any
    rows: int = 0


@dataclass
class PartitionedParquetFiles:
    """One task's Parquet files under ``root`` (a path of ``filesystem``), one per combination
    of the ``partition_cols`` values, in ``<col>=<directory(value)>/...`` directories; files
    are named ``part-<prefix>-<task uuid>-<n>.snappy.parquet``. Use as a context manager: the
    files are closed (complete) when it exits."""

    filesystem: Any
    root: str
    partition_cols: list[str]
    prefix: str
    directory: Callable[[str | None], str]
    task: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    files: dict[tuple[str | None, ...], _OpenFile] = field(default_factory=dict)

    def __enter__(self) -> PartitionedParquetFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        for f in self.files.values():
            f.writer.close()

    def write(self, table: pa.Table) -> Iterator[tuple[tuple[str | None, ...], pa.Table]]:
        """Append ``table``'s rows to their files; yields each combination's rows as written
        (without the partition columns), for the caller's statistics."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        if table.num_rows == 0:
            return
        cols = self.partition_cols
        keys = [table.column(c).cast(pa.string()) for c in cols]
        combos = partition_values(keys)
        for values in combos:
            if len(combos) == 1:  # the usual batch: one key, nothing to pick out
                part = table.drop_columns(cols)
            else:
                mask = None
                for k, v in zip(keys, values, strict=True):
                    m = pc.is_null(k) if v is None else pc.equal(k, v)
                    mask = m if mask is None else pc.and_(mask, m)
                part = table.filter(mask).drop_columns(cols)
            open_file = self.files.get(values)
            if open_file is None:
                rel_dir = self.directory_of(values)
                name = f"part-{self.prefix}-{self.task}-{len(self.files):05d}.snappy.parquet"
                rel = f"{rel_dir}/{name}"
                full = f"{self.root.rstrip('/')}/{rel}"
                self.filesystem.create_dir(full.rsplit("/", 1)[0], recursive=True)
                writer = pq.ParquetWriter(
                    full,
                    part.schema,
                    filesystem=self.filesystem,
                    compression="snappy",
                    **parquet_column_options(part.schema),
                )
                open_file = self.files[values] = _OpenFile(rel, full, writer)
            open_file.writer.write_table(part)
            open_file.rows += part.num_rows
            yield values, part

    def directory_of(self, values: tuple[str | None, ...]) -> str:
        """The relative directory of one combination of partition values."""
        return "/".join(
            f"{c}={self.directory(v)}" for c, v in zip(self.partition_cols, values, strict=True)
        )
