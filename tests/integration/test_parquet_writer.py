"""The ``parquet`` sink written from Arrow (``ParquetBatchWriter``) against Spark's own writer, on
a real local SparkSession and real files: the same table, replacing Spark's batches, exactly once
through failed tasks and jobs."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from dagster_eventhub_ingest.ops.sinks.batch import BATCH_COLUMN, batch_key
from dagster_eventhub_ingest.ops.sinks.parquet_columns import NO_STATISTICS_COLUMNS, PLAIN_COLUMNS
from dagster_eventhub_ingest.ops.sinks.parquet_files import NULL_DIRECTORY, spark_directory_value
from dagster_eventhub_ingest.ops.sinks.parquet_writer import (
    ParquetBatchWriter,
    ParquetTaskMessage,
    parquet_fused_applies,
    write_parquet_from_arrow,
)
from dagster_eventhub_ingest.ops.sinks.read import output_schema, read_batches, read_sink
from dagster_eventhub_ingest.ops.sinks.spark_writer import write_spark
from dagster_eventhub_ingest.ops.sinks.sql import in_ranges, key_column
from dagster_eventhub_ingest.ops.sinks.staging import clean_batch_staging
from dagster_eventhub_ingest.ops.sinks.verify import verify_written
from dagster_eventhub_ingest.resources.eventhubs_source.schema import arrow_schema
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.sink import SinkSettings
from tests.support.sink_rows import events, expected, keys

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark

#: Partition values that need escaping, or none, or are null or empty (Spark: both null).
AWKWARD = ["a b", "x/y", "k=v", "50%", "ünï", None, "", "q?#'\"*:[]{}^\\", "plain"]


def _ranges(raw: dict[str, tuple[int, int]]) -> dict[str, SeqRange]:
    return {p: SeqRange(*r) for p, r in raw.items()}


def _keys(raw: dict[str, tuple[int, int]]) -> dict[str, str]:
    return {p: batch_key(p, s, e) for p, (s, e) in raw.items()}


def keyed(spark: SparkSession, raw: dict[str, tuple[int, int]], *, awkward: bool = True) -> Any:
    """Events of ``raw`` with the output schema (``eh_batch`` last), ``partitionKey`` cycling
    through :data:`AWKWARD`."""
    df = events(spark, raw)
    if awkward:
        values = F.array(*[F.lit(v).cast("string") for v in AWKWARD])
        pick = (F.col("sequenceNumber") % len(AWKWARD) + 1).cast("int")
        df = df.withColumn("partitionKey", F.element_at(values, pick))
    return df.withColumn(BATCH_COLUMN, key_column(_ranges(raw), _keys(raw)))


def spark_write(df: DataFrame, sink: SinkSettings, raw: dict[str, tuple[int, int]]) -> None:
    write_spark(df.where(in_ranges(_ranges(raw))), sink)


def arrow_write(df: DataFrame, sink: SinkSettings, raw: dict[str, tuple[int, int]]) -> None:
    write_parquet_from_arrow(df, sink, list(_keys(raw).values()))


def layout(root: Path) -> list[str]:
    """The visible directories holding data files (what a reader of the sink lists)."""
    return sorted(
        str(f.parent.relative_to(root))
        for f in root.rglob("*.parquet")
        if not any(part.startswith((".", "_")) for part in f.relative_to(root).parts)
    )


def hidden(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith((".", "_")) and p.is_dir())


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(str(v) for v in r) for r in df.select(*sorted(df.columns)).collect()),
    )


def column_choices(root: Path) -> set[tuple[str, str, str, bool | None, bool]]:
    """Per column of every visible file: physical and logical type, compression, whether it
    has a dictionary page where the sink chooses (:data:`PLAIN_COLUMNS`; elsewhere each writer
    falls back to plain pages by its own measure) and whether it has statistics."""
    found = set()
    for f in root.rglob("*.parquet"):
        if any(part.startswith((".", "_")) for part in f.relative_to(root).parts):
            continue
        meta = pq.ParquetFile(f).metadata
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                col = group.column(c)
                found.add(
                    (
                        col.path_in_schema,
                        f"{col.physical_type} {meta.schema.column(c).logical_type}",
                        col.compression,
                        col.has_dictionary_page if col.path_in_schema in PLAIN_COLUMNS else None,
                        col.statistics is not None,
                    )
                )
    return found


@pytest.mark.parametrize(
    "partition_by", [(), ("partitionKey",), ("partition", "partitionKey"), ("sequenceNumber",)]
)
def test_the_same_table_as_sparks_writer(
    spark: SparkSession, tmp_path: Path, partition_by: tuple[str, ...]
) -> None:
    raw = {"0": (0, 29), "1": (100, 119)}
    df = keyed(spark, raw).cache()
    by_spark = SinkSettings(path=str(tmp_path / "spark"), partition_by=partition_by)
    by_arrow = SinkSettings(path=str(tmp_path / "arrow"), partition_by=partition_by)
    spark_write(df, by_spark, raw)
    arrow_write(df, by_arrow, raw)
    assert layout(tmp_path / "arrow") and set(layout(tmp_path / "arrow")) == set(
        layout(tmp_path / "spark")
    )
    assert hidden(tmp_path / "arrow") == []
    batch_keys = list(_keys(raw).values())
    for read in (
        lambda s: spark.read.parquet(s.path),
        lambda s: read_sink(spark, s),
        lambda s: read_batches(spark, s, batch_keys, schema=df.schema),
        lambda s: read_batches(spark, s, batch_keys),
    ):
        ours, theirs = read(by_arrow), read(by_spark)
        assert ours.schema == theirs.schema
        assert ours.count() == 50 and rows(ours) == rows(theirs)
    choices = column_choices(tmp_path / "arrow")
    assert choices == column_choices(tmp_path / "spark")
    assert {c[0] for c in choices if c[3] is False} == set(PLAIN_COLUMNS) - set(partition_by)
    assert {c[0] for c in choices if not c[4]} == set(NO_STATISTICS_COLUMNS)
    verify_written(spark, by_arrow, batch_keys, 50, str(by_arrow.path), schema=df.schema)


def test_directory_values_are_escaped_as_spark_escapes_them(spark: SparkSession) -> None:
    utils = spark.sparkContext._jvm.org.apache.spark.sql.catalyst.catalog.ExternalCatalogUtils  # type: ignore[union-attr]
    values = [chr(c) for c in range(1, 256)] + ["a b", "€ü", "x/y=z%", "", "__x", ".x"]
    for value in values:
        assert spark_directory_value(value) == utils.getPartitionValueString(value), repr(value)
    assert spark_directory_value(None) == NULL_DIRECTORY


def test_the_column_types_spark_reads_back(spark: SparkSession, tmp_path: Path) -> None:
    raw = {"0": (0, 9)}
    sink = SinkSettings(path=str(tmp_path / "arrow"))
    arrow_write(keyed(spark, raw, awkward=False), sink, raw)
    back = spark.read.parquet(str(sink.path))
    assert back.schema == output_schema()
    row = back.where("sequenceNumber = 3").first()
    assert row is not None
    assert row.body == b"\x03" * 10 and row.properties == {"n": "3"}
    assert row.enqueuedTime == events(spark, raw).where("sequenceNumber = 3").first().enqueuedTime  # type: ignore[union-attr]
    f = next((tmp_path / "arrow").rglob("*.parquet"))
    meta = pq.ParquetFile(f).schema.column(4)  # enqueuedTime (the files drop eh_batch)
    assert meta.name == "enqueuedTime" and meta.physical_type == "INT64"
    assert "isAdjustedToUTC=true, timeUnit=microseconds" in str(meta.logical_type)


def test_a_batch_spark_wrote_is_replaced_and_the_others_kept(
    spark: SparkSession, tmp_path: Path
) -> None:
    sink = SinkSettings(path=str(tmp_path / "sink"), partition_by=("partition",))
    first, second = {"0": (0, 9), "1": (0, 9)}, {"0": (10, 19)}
    spark_write(keyed(spark, first), sink, first)
    spark_write(keyed(spark, second), sink, second)
    spark_files = {p.name for p in (tmp_path / "sink").rglob("part-*.parquet")}
    # The upgrade: the first batch rewritten by this writer, with a changed body.
    again = keyed(spark, first).withColumn("body", F.lit(b"new"))
    arrow_write(again, sink, first)
    out = read_sink(spark, sink)
    assert keys(out) == expected({"0": (0, 19), "1": (0, 9)})
    bodies = {(r.partition, r.sequenceNumber): r.body for r in out.collect()}
    assert all(bodies[("1", s)] == b"new" and bodies[("0", s)] == b"new" for s in range(10))
    assert all(bodies[("0", s)] != b"new" for s in range(10, 20))
    for key in ("0-0-9", "1-0-9"):
        written = {
            p.name for p in (tmp_path / "sink").glob(f"partition=*/eh_batch={key}/*.parquet")
        }
        assert written and not (written & spark_files), key
    assert {p.name for p in (tmp_path / "sink").glob("partition=0/eh_batch=0-10-19/*.parquet")} <= (
        spark_files
    )
    # Both writers' batches read as one, by every reader the run uses.
    everything = ["0-0-9", "1-0-9", "0-10-19"]
    mixed = read_batches(spark, sink, everything, schema=again.schema)
    assert mixed.count() == 30 and mixed.schema == read_batches(spark, sink, everything).schema
    assert spark.read.parquet(str(sink.path)).count() == 30
    verify_written(spark, sink, everything, 30, str(sink.path), with_stats=True)
    # And back: Spark's writer replaces what this one wrote.
    spark_write(keyed(spark, first), sink, first)
    assert keys(read_sink(spark, sink)) == expected({"0": (0, 19), "1": (0, 9)})
    assert b"new" not in {r.body for r in read_sink(spark, sink).collect()}


def _table(spark: SparkSession, raw: dict[str, tuple[int, int]]) -> pa.Table:
    df = keyed(spark, raw)
    return pa.Table.from_batches(df._collect_as_arrow())  # type: ignore[attr-defined]


def test_a_failed_task_attempt_never_reaches_the_output(
    spark: SparkSession, tmp_path: Path
) -> None:
    raw = {"0": (0, 59)}
    table = _table(spark, raw).cast(arrow_schema(output_schema()))
    sink = SinkSettings(path=str(tmp_path / "sink"), partition_by=("partitionKey",))
    writer = ParquetBatchWriter.for_sink(sink, ["0-0-59"], output_schema())
    writer = pickle.loads(pickle.dumps(writer))  # as the tasks get it

    def failing() -> Any:
        yield from table.slice(0, 30).to_batches()
        raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError, match="executor lost"):
        writer.write(failing())
    # An attempt that died without cleaning up (its process killed) left a complete file.
    killed = ParquetBatchWriter.for_sink(sink, ["0-0-59"], output_schema())
    killed.attempt = writer.attempt
    killed.write(iter(table.slice(0, 30).to_batches()))
    # The retried task and another task of the same job.
    messages = [
        writer.write(iter(table.slice(0, 30).to_batches(max_chunksize=7))),
        writer.write(iter(table.slice(30).to_batches())),
    ]
    writer.commit(list(messages))
    out = read_sink(spark, sink)
    assert keys(out) == expected(raw)
    reported = {p.name for m in messages for p in m.parts}
    assert {p.name for p in (tmp_path / "sink").rglob("*.parquet")} == reported
    assert hidden(tmp_path / "sink") == []


def test_a_failed_job_keeps_the_earlier_attempt_then_a_rewrite_is_exactly_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    raw = {"0": (0, 299), "1": (0, 299)}
    sink = SinkSettings(path=str(tmp_path / "sink"))
    good = keyed(spark, raw, awkward=False)
    arrow_write(good, sink, raw)
    before = rows(read_sink(spark, sink))
    boom = F.when(
        (F.col("partition") == "1") & (F.col("sequenceNumber") == 250),
        F.raise_error(F.lit("crash")),
    ).otherwise(F.col("body"))
    with pytest.raises(Exception, match="crash"):
        arrow_write(good.withColumn("body", boom), sink, raw)
    assert rows(read_sink(spark, sink)) == before
    assert hidden(tmp_path / "sink") == []
    arrow_write(good, sink, raw)
    assert keys(read_sink(spark, sink)) == expected(raw)


def test_a_commit_without_files_keeps_the_earlier_data(spark: SparkSession, tmp_path: Path) -> None:
    raw = {"0": (0, 9)}
    sink = SinkSettings(path=str(tmp_path / "sink"))
    arrow_write(keyed(spark, raw), sink, raw)
    arrow_write(keyed(spark, raw).limit(0), sink, raw)
    assert keys(read_sink(spark, sink)) == expected(raw)
    writer = ParquetBatchWriter.for_sink(sink, ["0-0-9"], output_schema())
    writer.commit([ParquetTaskMessage(parts=(), outside=0), None])
    assert keys(read_sink(spark, sink)) == expected(raw)
    assert hidden(tmp_path / "sink") == []


def test_rows_outside_the_ranges_make_the_commit_write_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    raw = {"0": (0, 9)}
    sink = SinkSettings(path=str(tmp_path / "sink"))
    arrow_write(keyed(spark, raw), sink, raw)
    wider = keyed(spark, {"0": (0, 19)}).withColumn(
        BATCH_COLUMN, key_column(_ranges(raw), _keys(raw))
    )
    arrow_write(wider.withColumn("body", F.lit(b"wrong")), sink, raw)
    out = read_sink(spark, sink)
    assert keys(out) == expected(raw) and b"wrong" not in {r.body for r in out.collect()}
    assert hidden(tmp_path / "sink") == []


@pytest.mark.parametrize("partition_by", [(), ("partition",)])
def test_leftover_staging_of_the_batch_is_removed_and_a_concurrent_runs_is_kept(
    spark: SparkSession, tmp_path: Path, partition_by: tuple[str, ...]
) -> None:
    sink = SinkSettings(path=str(tmp_path / "sink"), partition_by=partition_by)
    out = tmp_path / "sink"
    nest = "partition=0/" if partition_by else ""
    raw = {"0": (10, 19)}
    # What a driver killed mid-commit left: this batch's staging, with a complete file ...
    ours = out / ".ehingest-staging-aaaa" / "_commit" / nest / f"{BATCH_COLUMN}=0-10-19"
    ours.mkdir(parents=True)
    (ours / "part-x.snappy.parquet").write_bytes(b"partial")
    # ... a concurrent run's staging of another batch, one too new to hold a batch yet, and
    # Spark's of this batch.
    theirs = out / ".ehingest-staging-bbbb" / nest / f"{BATCH_COLUMN}=1-0-9"
    theirs.mkdir(parents=True)
    (theirs / "part-y.snappy.parquet").write_bytes(b"theirs")
    (out / ".ehingest-staging-cccc").mkdir()
    sparks = out / ".spark-staging-dddd" / nest / f"{BATCH_COLUMN}=0-10-19"
    sparks.mkdir(parents=True)
    arrow_write(keyed(spark, raw), sink, raw)
    assert hidden(out) == [".ehingest-staging-bbbb", ".ehingest-staging-cccc"]
    assert (theirs / "part-y.snappy.parquet").read_bytes() == b"theirs"
    assert keys(read_sink(spark, sink)) == expected(raw)
    # Spark's path removes this writer's staging of its batch too (one rule).
    assert clean_batch_staging(sink, ["1-0-9"]) == [str(out / ".ehingest-staging-bbbb")]


def test_which_sinks_the_writer_takes() -> None:
    schema = output_schema()
    assert parquet_fused_applies(SinkSettings(path="/data/events"), schema)
    assert parquet_fused_applies(
        SinkSettings(path="/data/events", partition_by=("partition", "sequenceNumber")), schema
    )
    assert parquet_fused_applies(
        SinkSettings(path="/data/e", sources="many"), output_schema("many")
    )
    # A timestamp directory is rendered in Spark's session time zone: Spark's path.
    assert not parquet_fused_applies(
        SinkSettings(path="/data/events", partition_by=("enqueuedTime",)), schema
    )
    assert not parquet_fused_applies(SinkSettings(table="events"), schema)
    assert not parquet_fused_applies(SinkSettings(format="orc", path="/data/events"), schema)
    assert not parquet_fused_applies(
        SinkSettings(path="abfss://c@acct.dfs.core.windows.net/events"), schema
    )
    without_key = type(schema)([f for f in schema.fields if f.name != BATCH_COLUMN])
    assert not parquet_fused_applies(SinkSettings(path="/data/events"), without_key)


def test_the_writer_keeps_secrets_out_of_its_repr() -> None:
    writer = ParquetBatchWriter(
        "abfss://c@acct.dfs.core.windows.net/events",
        [BATCH_COLUMN],
        output_schema().json(),
        ["0-0-9"],
        {"account_key": "s3cr3t-key=="},
    )
    assert "s3cr3t" not in repr(writer) and "s3cr3t" not in str(writer)
    assert pickle.loads(pickle.dumps(writer)).storage_options == {"account_key": "s3cr3t-key=="}
