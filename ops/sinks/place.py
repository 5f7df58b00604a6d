"""What a sink says about itself, read where the driver reads the sink: its record and its keys.

Two things a run asks of the sink before it writes: the source it belongs to (the record of
:mod:`dagster_eventhub_ingest.ops.sinks.source`) and the batch keys already committed in it (the
run's checkpoint of last resort, docs/run.md). One place per kind of sink:

* :class:`LocalPlace`: a Spark format on a local or mounted path (every node sees it at the
  same place). The record is the file ``_ehingest_source.json`` in the sink's folder, created
  atomically: a temporary file hard-linked to that name (the link fails when the name exists, so
  one writer wins and nobody reads half a file). The keys are the ``eh_batch=`` directories.
* :class:`SparkPathPlace`: a Spark format anywhere else (``abfss://``, ...), reached through
  the session as the sink itself is (the cluster's file system settings; Spark Connect too).
  The record is a one-line text dataset under the same name; the keys are the ``eh_batch=``
  directories (globbed by the driver's Hadoop file system on a classic session, a distinct over
  the column on Spark Connect).
* :class:`DeltaPlace`: ``deltalake``. The record is the Delta table's properties, set in the
  transaction that creates the table (the first writer wins) or, on a table written before
  records existed, in one that only sets them (a concurrent change fails it). The keys come
  from the log's add actions.
* :class:`TablePlace`: a catalog table. Its properties, set when the table is created
  (``writeTo(...).tableProperty(...).create()``: fails if it exists) or by ``ALTER TABLE ... SET
  TBLPROPERTIES``; the keys from ``SHOW PARTITIONS``.

Names starting with ``_`` are skipped by Spark's, pyarrow's and Delta's readers and by Delta's
``vacuum``: the record is never read as data.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from dagster_eventhub_ingest.ops.sinks.batch import BATCH_COLUMN
from dagster_eventhub_ingest.ops.sinks.checks import sink_location
from dagster_eventhub_ingest.ops.sinks.storage import delta_uri, hidden_name, is_local_path
from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.failures import already_exists
from dagster_eventhub_ingest.resources.sink import DELTALAKE_FORMAT, SinkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

__all__ = ["RECORD_NAME", "SinkPlace", "sink_place"]

#: The record's name in a path sink's folder (a file, or a Spark-written text dataset).
RECORD_NAME = "_ehingest_source.json"

SessionFn = Callable[[], "SparkSession"]


class SinkPlace(Protocol):
    """How a run reads and records what a sink says about itself (see the module docstring)."""

    #: Where the record is kept, for messages ("the file .../_ehingest_source.json").
    where: str

    def read_record(self) -> dict[str, str] | None:
        """The recorded properties (``ehingest.*``), or None when nothing is recorded."""
        ...

    def holds_data(self) -> bool:
        """Whether anything was written there (a sink written before records existed)."""
        ...

    def create_record(self, properties: Mapping[str, str]) -> None:
        """Record ``properties`` unless a record exists (a concurrent writer may win: read
        again to know)."""
        ...

    def batch_keys(self) -> list[str] | None:
        """Every batch key committed in the sink; None when it cannot be told."""
        ...


def sink_place(sink: SinkSettings, spark: SessionFn) -> SinkPlace:
    """The place of ``sink``; ``spark`` starts or returns the session, called only where a
    table or a path outside this machine needs it."""
    if sink.path is None:
        return TablePlace(sink, spark)
    if sink.format == DELTALAKE_FORMAT:
        return DeltaPlace(sink)
    if is_local_path(sink.path):
        return LocalPlace(sink)
    return SparkPathPlace(sink, spark)


def _key_of(directory: str) -> str | None:
    """The batch key of an ``eh_batch=<key>`` directory name (Spark escapes as ``%XX``)."""
    prefix = f"{BATCH_COLUMN}="
    if not directory.startswith(prefix):
        return None
    return urllib.parse.unquote(directory[len(prefix) :])


def _parse_lines(lines: list[str], where: str) -> dict[str, str] | None:
    """The record in ``lines`` (one JSON object per line, written once each)."""
    found: list[dict[str, str]] = []
    for line in lines:
        if not line.strip():
            continue
        value = json.loads(line)
        if not isinstance(value, dict):
            raise ValueError("not a JSON object")
        found.append({str(k): str(v) for k, v in value.items()})
    distinct = {json.dumps(f, sort_keys=True) for f in found}
    if len(distinct) > 1:
        raise ConfigurationError(
            f"{where} holds {len(distinct)} different records (two runs created it at the same "
            "moment): nothing was claimed. Keep the one of the source this sink belongs to and "
            "delete the other, or delete the record and the sink's content."
        )
    return found[0] if found else None


class LocalPlace:
    """A Spark format's local or mounted path, read and written by the driver directly."""

    def __init__(self, sink: SinkSettings) -> None:
        assert sink.path is not None
        path = sink.path
        self.root = urllib.parse.urlsplit(path).path if path.startswith("file:") else path
        self.root = os.path.abspath(self.root)
        self.depth = len(sink.partition_by)
        self.record = os.path.join(self.root, RECORD_NAME)
        self.where = f"the file {self.record}"

    def read_record(self) -> dict[str, str] | None:
        """The record file (or a Spark-written record folder), parsed; None when absent."""
        for attempt in range(10):
            try:
                if os.path.isdir(self.record):
                    lines = []
                    for name in sorted(os.listdir(self.record)):
                        if not hidden_name(name):
                            with open(os.path.join(self.record, name), encoding="utf-8") as f:
                                lines += f.read().splitlines()
                else:
                    with open(self.record, encoding="utf-8") as f:
                        lines = f.read().splitlines()
                return _parse_lines(lines, self.where)
            except FileNotFoundError:
                return None
            except ValueError as exc:
                # Being written by a writer whose file system has no hard links (below).
                if attempt == 9:
                    raise ConfigurationError(
                        f"{self.where} cannot be read ({exc}); nothing was claimed. It records "
                        "the source this sink belongs to: restore it, or delete it to let the "
                        "next run record its own source."
                    ) from None
                time.sleep(0.2)
        return None

    def holds_data(self) -> bool:
        """Whether the folder holds anything but hidden names."""
        try:
            return any(not hidden_name(name) for name in os.listdir(self.root))
        except (FileNotFoundError, NotADirectoryError):
            return False

    def create_record(self, properties: Mapping[str, str]) -> None:
        """Write the record under a temporary name, then link it to its own (create-only)."""
        os.makedirs(self.root, exist_ok=True)
        text = json.dumps(dict(properties), sort_keys=True) + "\n"
        temporary = os.path.join(self.root, f".{RECORD_NAME}.{uuid.uuid4().hex}")
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(temporary, self.record)
        except FileExistsError:
            pass  # another writer recorded first: the caller reads its record
        except OSError:
            # A file system without hard links (some network mounts): create-only, then write.
            with (
                contextlib.suppress(FileExistsError),
                open(self.record, "x", encoding="utf-8") as f,
            ):
                f.write(text)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temporary)

    def batch_keys(self) -> list[str] | None:
        """The ``eh_batch=`` directories under the ``partition_by`` levels."""
        try:
            return [key for key, _ in self.batch_directories()]
        except FileNotFoundError:
            return [] if not os.path.exists(self.root) else None
        except OSError:
            return None

    def batch_directories(self) -> list[tuple[str, str]]:
        """Each ``eh_batch=`` directory under the ``partition_by`` levels a reader of the sink
        sees (no hidden names): its batch key and its path. Raises ``OSError`` when a level
        cannot be listed (``FileNotFoundError`` without the folder)."""
        levels = [self.root]
        for _ in range(self.depth):
            levels = [
                entry.path
                for level in levels
                for entry in os.scandir(level)
                if entry.is_dir() and not hidden_name(entry.name)
            ]
        return [
            (key, entry.path)
            for level in levels
            for entry in os.scandir(level)
            if entry.is_dir() and (key := _key_of(entry.name)) is not None
        ]


class DeltaPlace:
    """A ``deltalake`` table: its properties and its log, through delta-rs."""

    def __init__(self, sink: SinkSettings) -> None:
        assert sink.path is not None
        self.sink = sink
        self.uri = delta_uri(sink.path)
        self.options = dict(sink.storage_options) or None
        self.where = f"the Delta table properties of {self.uri}"

    def _table(self):  # -> DeltaTable | None
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.uri, storage_options=self.options):
            return None
        return DeltaTable(self.uri, storage_options=self.options)

    def read_record(self) -> dict[str, str] | None:
        """The table's ``ehingest.*`` properties; None without a table or a record."""
        table = self._table()
        if table is None:
            return None
        found = {
            k: v
            for k, v in table.metadata().configuration.items()
            if k.startswith("ehingest.") and v is not None
        }
        return found or None

    def holds_data(self) -> bool:
        """Whether the Delta table exists."""
        return self._table() is not None

    def create_record(self, properties: Mapping[str, str]) -> None:
        """Create the table with the properties, or set them on a table that has none."""
        from deltalake import DeltaTable
        from deltalake.exceptions import CommitFailedError

        from dagster_eventhub_ingest.ops.sinks.read import delta_output_schema

        table = self._table()
        try:
            if table is None:
                DeltaTable.create(
                    self.uri,
                    schema=delta_output_schema(self.sink.sources),
                    mode="ignore",  # a concurrent creator won: its properties stay
                    partition_by=[*self.sink.partition_by, BATCH_COLUMN],
                    configuration=dict(properties),
                    raise_if_key_not_exists=False,
                    storage_options=self.options,
                )
            else:
                table.alter.set_table_properties(dict(properties), raise_if_not_exists=False)
        except CommitFailedError:
            pass  # another writer changed the table first: the caller reads again

    def batch_keys(self) -> list[str] | None:
        """The batch keys of the files the log adds."""
        import pyarrow as pa

        table = self._table()
        if table is None:
            return []
        actions = pa.table(table.get_add_actions(flatten=True))
        column = f"partition.{BATCH_COLUMN}"
        if actions.num_rows == 0 or column not in actions.column_names:
            return []
        return sorted({k for k in actions.column(column).to_pylist() if k is not None})


def _sql_value(value: str) -> str:
    """``value`` as a string literal for ``TBLPROPERTIES`` (names of hubs, groups, formats)."""
    if "'" in value or "\\" in value or "${" in value:
        raise ConfigurationError(f"sink record: {value!r} cannot be stored as a table property")
    return f"'{value}'"


class TablePlace:
    """A catalog table: its properties and its partitions, through the session."""

    def __init__(self, sink: SinkSettings, spark: SessionFn) -> None:
        assert sink.table is not None
        self.sink = sink
        self.table = sink.table
        self._spark = spark
        self.where = f"the table properties of {sink.table}"

    def _exists(self) -> bool:
        return bool(self._spark().catalog.tableExists(self.table))

    def read_record(self) -> dict[str, str] | None:
        """The table's ``ehingest.*`` properties; None without a table or a record."""
        if not self._exists():
            return None
        rows = self._spark().sql(f"SHOW TBLPROPERTIES {self.table}").collect()
        found = {r["key"]: r["value"] for r in rows if str(r["key"]).startswith("ehingest.")}
        return found or None

    def holds_data(self) -> bool:
        """Whether the table exists."""
        return self._exists()

    def create_record(self, properties: Mapping[str, str]) -> None:
        """Create the (empty) table with the properties, or set them on one without."""
        spark = self._spark()
        if self._exists():
            pairs = ", ".join(f"{_sql_value(k)} = {_sql_value(v)}" for k, v in properties.items())
            spark.sql(f"ALTER TABLE {self.table} SET TBLPROPERTIES ({pairs})")
            return
        from pyspark.errors import AnalysisException
        from pyspark.sql import functions as F

        from dagster_eventhub_ingest.ops.sinks.read import output_schema

        writer = (
            spark.createDataFrame([], output_schema(self.sink.sources))
            .writeTo(self.table)
            .using(self.sink.format)
        )
        partitions = [F.col(c) for c in (*self.sink.partition_by, BATCH_COLUMN)]
        writer = writer.partitionedBy(*partitions)
        for key, value in properties.items():
            writer = writer.tableProperty(key, value)
        try:
            writer.create()
        except AnalysisException as exc:
            if not already_exists(exc):
                raise

    def batch_keys(self) -> list[str] | None:
        """The table's ``eh_batch`` partition values."""
        if not self._exists():
            return []
        spark = self._spark()
        try:
            rows = spark.sql(f"SHOW PARTITIONS {self.table}").collect()
        except Exception:  # a format without catalog partitions (Delta): ask the column
            values = spark.table(self.table).select(BATCH_COLUMN).distinct().collect()
            return sorted(str(r[0]) for r in values if r[0] is not None)
        keys = set()
        for row in rows:
            for part in str(row[0]).split("/"):
                key = _key_of(part)
                if key is not None:
                    keys.add(key)
        return sorted(keys)


class SparkPathPlace:
    """A Spark format's path outside this machine, read and written through the session."""

    def __init__(self, sink: SinkSettings, spark: SessionFn) -> None:
        assert sink.path is not None
        self.sink = sink
        self.root = sink.path.rstrip("/")
        self.record = f"{self.root}/{RECORD_NAME}"
        self._spark = spark
        self.where = f"the record {self.record}"

    def read_record(self) -> dict[str, str] | None:
        """The record dataset's lines, parsed; None when absent."""
        from dagster_eventhub_ingest.ops.sinks.read import nothing_there

        try:
            rows = self._spark().read.text(self.record).collect()
        except Exception as exc:
            if nothing_there(exc):
                return None
            raise
        try:
            return _parse_lines([str(r[0]) for r in rows], self.where)
        except ValueError as exc:
            raise ConfigurationError(
                f"{self.where} cannot be read ({exc}); nothing was claimed. Restore it, or "
                "delete it to let the next run record its own source."
            ) from None

    def holds_data(self) -> bool:
        """Whether any batch is committed there."""
        return bool(self.batch_keys())

    def create_record(self, properties: Mapping[str, str]) -> None:
        """Write the record as a one-line text dataset, unless one exists."""
        line = json.dumps(dict(properties), sort_keys=True)
        frame = self._spark().createDataFrame([(line,)], "value string").coalesce(1)
        try:
            frame.write.mode("errorifexists").text(self.record)
        except Exception as exc:
            if not already_exists(exc):
                raise

    def batch_keys(self) -> list[str] | None:
        """The ``eh_batch=`` directories (a glob on the driver, or a distinct over the
        column where the session has no JVM here)."""
        from dagster_eventhub_ingest.ops.sinks.read import nothing_there, read_sink
        from dagster_eventhub_ingest.resources.spark.kind import is_connect_session

        spark = self._spark()
        levels = "[^._]*/" * len(self.sink.partition_by)
        if not is_connect_session(spark):
            try:
                jvm = spark.sparkContext._jvm
                assert jvm is not None
                pattern = jvm.org.apache.hadoop.fs.Path(f"{self.root}/{levels}{BATCH_COLUMN}=*")
                fs = pattern.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())
                found = fs.globStatus(pattern) or []
                return sorted(
                    key
                    for s in found
                    if s.isDirectory() and (key := _key_of(str(s.getPath().getName()))) is not None
                )
            except Exception:  # the column below says it too
                pass
        try:
            values = read_sink(spark, self.sink).select(BATCH_COLUMN).distinct().collect()
        except Exception as exc:
            if nothing_there(exc):
                return []
            return None
        return sorted(str(r[0]) for r in values if r[0] is not None)


def batch_in_sink(
    sink: SinkSettings, key: str, spark: Callable[[], SparkSession] | None = None
) -> bool | None:
    """Whether a batch with this key is committed in the sink; None when it cannot be told.

    A batch directory appears only at the job's commit, a ``deltalake`` batch only in the
    log (``dagster_eventhub_ingest.ops.sinks.place``). Tables and paths outside this machine
    are asked through ``spark`` (returns the session); without it they are not looked at.
    """
    from dagster_eventhub_ingest.ops.sinks.place import sink_place

    def no_session() -> SparkSession:
        raise LookupError("no session")

    try:
        keys = sink_place(sink, spark or no_session).batch_keys()
    except Exception:  # unreadable, or no session: cannot tell
        logger.debug("could not list the batches of %s", sink_location(sink), exc_info=True)
        return None
    return None if keys is None else key in keys
