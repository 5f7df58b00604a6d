"""Idempotent sinks on a real local SparkSession: parquet path, table, partition_by, deltalake."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pyspark.sql import functions as F

from dagster_eventhub_ingest.ops.sinks.batch import BATCH_COLUMN, batch_key
from dagster_eventhub_ingest.ops.sinks.read import read_sink
from dagster_eventhub_ingest.ops.sinks.write import write_batch
from dagster_eventhub_ingest.resources.errors import ConfigurationError, SinkError
from dagster_eventhub_ingest.resources.eventhubs_source import eventhubs_schema
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.sink import SinkSettings
from tests.support.sink_rows import T0, events, expected, keys

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from dagster_eventhub_ingest.ops.sinks.statistics import StatsMethod

pytestmark = pytest.mark.spark

SINK_KINDS = ["parquet", "table", "deltalake"]


def make_sink(kind: str, tmp_path: Path, partition_by: tuple[str, ...] = ()) -> SinkSettings:
    if kind == "table":
        return SinkSettings(table=f"events_{uuid.uuid4().hex[:10]}", partition_by=partition_by)
    return SinkSettings(format=kind, path=str(tmp_path / kind), partition_by=partition_by)


@pytest.mark.parametrize("kind", SINK_KINDS)
def test_write_twice_leaves_rows_once_and_stats(
    spark: SparkSession, tmp_path: Path, kind: str
) -> None:
    ranges = {"0": (0, 49), "1": (100, 129)}
    sink = make_sink(kind, tmp_path)
    df = events(spark, ranges, body_size=7)
    first = write_batch(df, sink, ranges)
    again = write_batch(df, sink, ranges)
    assert keys(read_sink(spark, sink)) == expected(ranges)
    for result in (first, again):
        p0, p1 = result.partitions["0"], result.partitions["1"]
        assert (p0.events, p0.bytes, p0.first_sequence_number, p0.last_sequence_number) == (
            50,
            350,
            0,
            49,
        )
        assert p0.last_offset == "4900" and p1.last_offset == "12900"
        assert p1.first_enqueued_time == T0 + timedelta(seconds=100)
        assert p1.last_enqueued_time == T0 + timedelta(seconds=129)
        assert p0.missing_events == 0 and p0.batch_key == "0-0-49"
        assert result.events == 80 and result.bytes == 560
    assert first.output_location == again.output_location
    if kind != "table":
        assert first.output_location == str(tmp_path / kind)
    meta = first.metadata()
    assert meta["partitions"]["1"]["last_offset"] == "12900" and meta["events"] == 80


@pytest.mark.parametrize("kind", SINK_KINDS)
def test_batches_accumulate_and_a_replay_replaces_only_its_batch(
    spark: SparkSession, tmp_path: Path, kind: str
) -> None:
    sink = make_sink(kind, tmp_path)
    b1 = {"0": (0, 9), "1": (0, 4)}
    b2 = {"0": (10, 19)}
    write_batch(events(spark, b1), sink, b1)
    write_batch(events(spark, b2), sink, b2)
    # A peer replays only partition 1's intent of the first batch (its checkpoint never moved).
    write_batch(events(spark, {"1": (0, 4)}), sink, {"1": (0, 4)})
    out = read_sink(spark, sink)
    assert keys(out) == expected({"0": (0, 19), "1": (0, 4)})
    batches = {r[BATCH_COLUMN] for r in out.select(BATCH_COLUMN).distinct().collect()}
    assert batches == {batch_key("0", 0, 9), batch_key("1", 0, 4), batch_key("0", 10, 19)}


@pytest.mark.parametrize("kind", SINK_KINDS)
def test_partition_by(spark: SparkSession, tmp_path: Path, kind: str) -> None:
    ranges = {"0": (0, 5), "3": (0, 5)}
    sink = make_sink(kind, tmp_path, partition_by=("partition",))
    write_batch(events(spark, ranges), sink, ranges)
    write_batch(events(spark, ranges), sink, ranges)
    assert keys(read_sink(spark, sink)) == expected(ranges)
    if kind != "table":
        root = tmp_path / kind
        assert (root / "partition=3" / f"{BATCH_COLUMN}=3-0-5").is_dir()
        assert (root / "partition=0" / f"{BATCH_COLUMN}=0-0-5").is_dir()


@pytest.mark.parametrize("kind", SINK_KINDS)
def test_crash_mid_write_then_rewrite_is_exactly_once(
    spark: SparkSession, tmp_path: Path, kind: str
) -> None:
    from pyspark.sql import functions as F

    ranges = {"0": (0, 299), "1": (0, 299)}
    sink = make_sink(kind, tmp_path)
    good = events(spark, ranges)
    write_batch(good, sink, ranges)
    # A retry of the same intent dies in one task while the others have written their files.
    boom = F.when(
        (F.col("partition") == "1") & (F.col("sequenceNumber") == 250),
        F.raise_error(F.lit("crash")),
    ).otherwise(F.col("body"))
    with pytest.raises(SinkError) as err:
        write_batch(good.withColumn("body", boom), sink, ranges)
    assert "crash" in str(err.value) and "cannot write batch" in str(err.value)
    assert err.value.retryable  # a task that died mid-write: the next attempt may pass
    # The crashed attempt is invisible: the committed batch is intact, once.
    assert keys(read_sink(spark, sink)) == expected(ranges)
    write_batch(good, sink, ranges)
    assert keys(read_sink(spark, sink)) == expected(ranges)


@pytest.mark.parametrize("kind", SINK_KINDS)
def test_rows_outside_the_ranges_are_never_written(
    spark: SparkSession, tmp_path: Path, kind: str
) -> None:
    sink = make_sink(kind, tmp_path)
    df = events(spark, {"0": (0, 19), "2": (0, 3)})
    with pytest.raises(SinkError) as err:
        write_batch(df, sink, {"0": (0, 9)})
    assert "14 event(s) outside the batch ranges" in str(err.value)
    if kind == "deltalake":
        # Refused before the commit: nothing became visible.
        assert read_sink(spark, sink).count() == 0
    else:
        assert keys(read_sink(spark, sink)) == expected({"0": (0, 9)})


def test_skipped_events_show_as_missing(spark: SparkSession, tmp_path: Path) -> None:
    sink = make_sink("parquet", tmp_path)
    df = events(spark, {"0": (0, 9)}).where("sequenceNumber NOT IN (3, 4)")
    result = write_batch(df, sink, {"0": (0, 9)})
    assert result.partitions["0"].events == 8 and result.partitions["0"].missing_events == 2


#: Partition ids SQL text would read differently: a quote, backslashes (Spark's unescaping keeps
#: the one of ``\%`` and drops the one of ``\c``), variable substitution, a newline.
ODD_IDS = ["a'b\\c", "\\%_\\", "${spark.app.name}", "${x}", "-- x\n/*", "é'"]


@pytest.mark.parametrize("escaped", ["false", "true"])
def test_partition_ids_reach_sql_unchanged(spark: SparkSession, escaped: str) -> None:
    from dagster_eventhub_ingest.ops.sinks.sql import sql_string

    key = "spark.sql.parser.escapedStringLiterals"
    previous = spark.conf.get(key, None)
    spark.conf.set(key, escaped)
    try:
        row = spark.range(1).select(*(F.expr(sql_string(v)) for v in [*ODD_IDS, "0"])).first()
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)
    assert row is not None and list(row) == [*ODD_IDS, "0"]
    assert sql_string("0") == "'0'"  # plain ids stay readable in plans


@pytest.mark.parametrize(
    ("kind", "method"), [("parquet", "observe"), ("parquet", "readback"), ("deltalake", "observe")]
)
def test_a_partition_id_with_a_quote_and_a_backslash_is_keyed_and_filtered(
    spark: SparkSession, tmp_path: Path, kind: str, method: StatsMethod
) -> None:
    odd = "a'b\\c"
    ranges = {odd: (0, 4), "${x}": (0, 2), "0": (10, 14)}
    sink = make_sink(kind, tmp_path)
    result = write_batch(events(spark, ranges), sink, ranges, stats_method=method)
    assert {
        p: (s.events, s.first_sequence_number, s.last_offset) for p, s in result.partitions.items()
    } == {
        odd: (5, 0, "400"),
        "${x}": (3, 0, "200"),
        "0": (5, 10, "1400"),
    }
    rows = read_sink(spark, sink).select("partition", "sequenceNumber", BATCH_COLUMN).collect()
    assert sorted((r[0], r[1]) for r in rows) == expected(ranges)
    assert {r[0]: r[2] for r in rows} == {p: batch_key(p, a, b) for p, (a, b) in ranges.items()}
    # Ids one unescaping away from the odd one are other partitions: outside the batch.
    lookalikes = {"a'bc": (0, 4), "a'b\\\\c": (0, 1), "a\\'b\\c": (2, 2)}
    with pytest.raises(SinkError, match=r"holds 8 event\(s\) outside the batch ranges"):
        write_batch(events(spark, {**ranges, **lookalikes}), sink, ranges, stats_method=method)


@pytest.mark.parametrize("fmt", ["parquet", "orc"])
def test_every_stats_method_gives_the_same_statistics(
    spark: SparkSession, tmp_path: Path, fmt: str
) -> None:
    # Holes (skipped events), bodies of different sizes, a partition with no event left.
    ranges = {"0": (5, 24), "1": (0, 9), "2": (40, 49)}
    df = events(spark, ranges).where(
        "NOT (partition = '0' AND sequenceNumber IN (5, 11)) AND partition != '2'"
    )
    df = df.withColumn("body", F.expr("repeat(body, CAST(sequenceNumber % 4 AS INT) + 1)"))
    results = {
        method: write_batch(
            df, SinkSettings(format=fmt, path=str(tmp_path / method)), ranges, stats_method=method
        )
        for method in ("observe", "split", "readback")
    }
    zero = results["observe"].partitions
    assert zero["0"].events == 18 and zero["0"].missing_events == 2
    assert (zero["0"].first_sequence_number, zero["0"].last_sequence_number) == (6, 24)
    assert zero["0"].last_offset == "2400"
    assert zero["0"].bytes == sum(10 * (s % 4 + 1) for s in range(6, 25) if s != 11)
    assert zero["0"].first_enqueued_time == T0 + timedelta(seconds=6)
    assert zero["2"].events == 0 and zero["2"].last_offset is None
    assert results["split"].partitions == zero
    assert results["readback"].partitions == zero
    default = write_batch(df, SinkSettings(format=fmt, path=str(tmp_path / "default")), ranges)
    assert default.partitions == zero


def test_a_batch_of_many_partitions_reads_its_statistics_back(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dagster_eventhub_ingest.ops.sinks.verify
    from dagster_eventhub_ingest.ops.sinks.statistics import _SPLIT_FROM_PARTITIONS

    ranges = {str(p): (10 * p, 10 * p + 4) for p in range(_SPLIT_FROM_PARTITIONS)}
    df = events(spark, ranges)
    observed = write_batch(
        df, SinkSettings(path=str(tmp_path / "observe")), ranges, stats_method="observe"
    )
    read_back: list[list[str]] = []
    real = dagster_eventhub_ingest.ops.sinks.verify.read_back_stats

    def spy(spark: SparkSession, sink: SinkSettings, keys: list[str], schema: Any) -> object:
        read_back.append(sorted(keys))
        return real(spark, sink, keys, schema)

    monkeypatch.setattr(dagster_eventhub_ingest.ops.sinks.verify, "read_back_stats", spy)
    default = write_batch(df, SinkSettings(path=str(tmp_path / "default")), ranges)
    assert read_back == [sorted(batch_key(p, a, b) for p, (a, b) in ranges.items())]
    assert default.partitions == observed.partitions
    assert default.events == 5 * len(ranges)


def test_the_stats_method_follows_format_partitions_and_partition_by() -> None:
    from dagster_eventhub_ingest.ops.sinks.statistics import (
        _SPLIT_FROM_PARTITIONS,
        choose_stats_method,
    )

    many, few = _SPLIT_FROM_PARTITIONS, _SPLIT_FROM_PARTITIONS - 1
    parquet = SinkSettings(format="parquet", path="/x")
    assert choose_stats_method(parquet, many) == "split"
    assert choose_stats_method(SinkSettings(table="t", format="delta"), many) == "split"
    assert choose_stats_method(parquet, few) == "observe"
    assert choose_stats_method(parquet, few, "split") == "split"
    assert choose_stats_method(parquet, many, "readback") == "readback"
    assert choose_stats_method(SinkSettings(format="json", path="/x"), many) == "observe"
    # Where the read-back cannot serve, split is observe even when asked for.
    deltalake = SinkSettings(format="deltalake", path="/x")
    assert (
        choose_stats_method(deltalake, many)
        == choose_stats_method(deltalake, 1, "split")
        == "observe"
    )
    for column in ("sequenceNumber", "offset", "enqueuedTime"):
        by = SinkSettings(format="parquet", path="/x", partition_by=(column,))
        assert choose_stats_method(by, many) == choose_stats_method(by, many, "split") == "observe"
    by_key = SinkSettings(format="parquet", path="/x", partition_by=("partitionKey",))
    assert choose_stats_method(by_key, many) == "split"


def test_split_reads_back_offsets_that_are_not_plain_numbers_exactly(
    spark: SparkSession, tmp_path: Path
) -> None:
    # The read-back aggregates offsets as numbers where they round-trip; every other offset
    # must come back as the string the hub gave, never a reformatted number.
    odd = {"0": "7:1200:x", "1": "0042", "2": "99999999999999999999", "3": "-5"}
    ranges = {p: (0, 3) for p in ("0", "1", "2", "3", "4")}
    base = events(spark, ranges)
    last_offset = F.expr(
        "CASE WHEN sequenceNumber = 3 THEN CASE partition "
        + " ".join(f"WHEN '{p}' THEN '{o}'" for p, o in odd.items())
        + " ELSE offset END ELSE offset END"
    )
    df = base.withColumn("offset", last_offset)
    split = write_batch(df, SinkSettings(path=str(tmp_path / "s")), ranges, stats_method="split")
    observed = write_batch(
        df, SinkSettings(path=str(tmp_path / "o")), ranges, stats_method="observe"
    )
    assert {p: s.last_offset for p, s in split.partitions.items()} == {**odd, "4": "300"}
    assert split.partitions == observed.partitions


def test_split_statistics_keep_their_types_under_a_partitioned_output(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Partition directories read back as strings: split must still give typed statistics.
    ranges = {"0": (8, 12), "1": (0, 3)}
    df = events(spark, ranges)
    observed = write_batch(
        df, SinkSettings(path=str(tmp_path / "o")), ranges, stats_method="observe"
    )
    by = ("partitionKey",)
    split = write_batch(
        df, SinkSettings(path=str(tmp_path / "s"), partition_by=by), ranges, stats_method="split"
    )
    assert split.partitions == observed.partitions
    assert isinstance(split.partitions["0"].first_enqueued_time, datetime)
    assert isinstance(split.partitions["0"].last_sequence_number, int)


def test_split_refuses_read_back_rows_outside_their_batch_range() -> None:
    from dagster_eventhub_ingest.ops.sinks.statistics import row_from_split

    ranges = {"0": SeqRange(10, 19)}
    keys = {"0": batch_key("0", 10, 19, None)}
    good = {"n": 10, "fs": 10, "ls": 19, "lo": "1900", "ft": None, "lt": None}
    row = row_from_split({"b0": 99}, {keys["0"]: good}, ranges, keys, "/sink")
    assert (row["n0"], row["b0"], row["fs0"], row["ls0"], row["lo0"]) == (10, 99, 10, 19, "1900")
    for first, last in ((9, 18), (11, 20)):
        bad = {**good, "fs": first, "ls": last}
        with pytest.raises(SinkError, match=rf"\[{first}, {last}\] outside its range \[10, 19\]"):
            row_from_split({"b0": 99}, {keys["0"]: bad}, ranges, keys, "/sink")


@pytest.mark.parametrize("kind", ["parquet", "deltalake"])
def test_unwritable_path_is_a_sink_error(spark: SparkSession, tmp_path: Path, kind: str) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the sink's parent directory should be")
    sink = SinkSettings(format=kind, path=str(blocker / "events"))
    with pytest.raises(SinkError) as err:
        write_batch(events(spark, {"0": (0, 3)}), sink, {"0": (0, 3)})
    msg = str(err.value)
    assert str(blocker / "events") in msg
    assert "writable" in msg
    assert not err.value.retryable  # a bad path stays bad: fail at once (CLI exit 2)


def test_an_unknown_data_source_class_is_found_before_writing(spark: SparkSession) -> None:
    from dagster_eventhub_ingest.ops.sinks.checks import check_sink_format

    with pytest.raises(ConfigurationError) as err:
        check_sink_format(SinkSettings(format="com.example.NoSuchSource", path="/x"), spark)
    assert "'com.example.NoSuchSource'" in str(err.value) and "parquet" in str(err.value)
    # A source that exists but cannot read (write-only) passes; so do the built-in formats,
    # without even starting a session.
    noop = "org.apache.spark.sql.execution.datasources.noop.NoopDataSource"
    check_sink_format(SinkSettings(format=noop, path="/x"), spark)
    check_sink_format(SinkSettings(format="parquet", path="/x"), pytest.fail)
    check_sink_format(SinkSettings(format="deltalake", path="/x"), pytest.fail)


def test_unknown_spark_format_is_a_sink_error(spark: SparkSession, tmp_path: Path) -> None:
    # A misspelt format is refused where the settings are made, before anything runs ...
    with pytest.raises(ConfigurationError, match="'parqet' is not a known format; did you mean"):
        SinkSettings(format="parqet", path=str(tmp_path / "x"))
    # ... a data source class Spark does not have fails at the write, naming it.
    sink = SinkSettings(format="com.example.NoSuchSource", path=str(tmp_path / "x"))
    with pytest.raises(SinkError, match=r"com\.example\.NoSuchSource") as err:
        write_batch(events(spark, {"0": (0, 3)}), sink, {"0": (0, 3)})
    assert not err.value.retryable


def test_bad_sink_settings(spark: SparkSession, tmp_path: Path) -> None:
    df = events(spark, {"0": (0, 3)})
    with pytest.raises(ConfigurationError, match="'nope' is not a column of the output"):
        write_batch(
            df, SinkSettings(path=str(tmp_path / "a"), partition_by=("nope",)), {"0": (0, 3)}
        )
    with pytest.raises(ConfigurationError, match="format 'deltalake' needs a path"):
        write_batch(df, SinkSettings(format="deltalake", table="t"), {"0": (0, 3)})
    with pytest.raises(ConfigurationError, match="ends at 2 before its start 3"):
        write_batch(df, SinkSettings(path=str(tmp_path / "a")), {"0": (3, 2)})
    with pytest.raises(ConfigurationError, match="'eh_batch' is not a column of the output"):
        write_batch(
            df, SinkSettings(path=str(tmp_path / "a"), partition_by=(BATCH_COLUMN,)), {"0": (0, 3)}
        )


def test_existing_foreign_table_is_refused(spark: SparkSession) -> None:
    name = f"foreign_{uuid.uuid4().hex[:8]}"
    spark.range(3).write.saveAsTable(name)
    with pytest.raises(SinkError, match="without the 'eh_batch' partition column") as err:
        write_batch(events(spark, {"0": (0, 3)}), SinkSettings(table=name), {"0": (0, 3)})
    assert not err.value.retryable


def test_deltalake_table_is_a_readable_delta_table(spark: SparkSession, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    ranges = {"0": (0, 99)}
    sink = make_sink("deltalake", tmp_path)
    write_batch(events(spark, ranges), sink, ranges)
    write_batch(events(spark, ranges), sink, ranges)
    table = DeltaTable(str(tmp_path / "deltalake"))
    assert table.version() == 2  # create, then one transaction per write
    data = table.to_pyarrow_table()
    assert data.num_rows == 100
    assert sorted(data.column("sequenceNumber").to_pylist()) == list(range(100))
    assert data.schema.field("enqueuedTime").type.tz == "UTC"
    # Only the latest write's files are live; the first write's were removed in the same commit.
    assert len(table.file_uris()) >= 1
    assert all("eh_batch=0-0-99" in uri for uri in table.file_uris())


def _staging(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob(".spark-staging-*")) if path.exists() else []


def _staged_batches(path: Path) -> list[str]:
    """Batch folders (with their files) left in any Spark staging directory under ``path``.

    A task of a failed job that Spark was still stopping can recreate an empty attempt folder
    (``_temporary/.../attempt_*``) after the abort removed the staging: no batch, no data, and
    not told apart from a concurrent run's staging that has no batch yet, so it is left.
    """
    return sorted(
        str(p.relative_to(path))
        for p in path.glob(".spark-staging-*/**/eh_batch=*")
        if any(f.is_file() for f in p.rglob("*"))
    )


@pytest.mark.parametrize("partition_by", [(), ("partition",)])
def test_leftover_staging_of_the_batch_is_removed_and_a_concurrent_runs_is_kept(
    spark: SparkSession, tmp_path: Path, partition_by: tuple[str, ...]
) -> None:
    sink = make_sink("parquet", tmp_path, partition_by)
    out = Path(str(sink.path))
    write_batch(events(spark, {"0": (0, 9)}), sink, {"0": (0, 9)})
    nest = "partition=0/" if partition_by else ""
    # What a driver killed mid-write leaves (Spark names staging by a job uuid of its own) ...
    ours = out / ".spark-staging-1111" / "_temporary/0/_temporary/attempt_1" / nest
    (ours / f"{BATCH_COLUMN}=0-10-19").mkdir(parents=True)
    (ours / f"{BATCH_COLUMN}=0-10-19" / "part-00000.parquet").write_bytes(b"partial")
    # ... a concurrent run's staging of another batch, and one too new to hold a batch yet.
    theirs = out / ".spark-staging-2222" / nest / f"{BATCH_COLUMN}=1-0-9"
    theirs.mkdir(parents=True)
    (theirs / "part-00000.parquet").write_bytes(b"theirs")
    (out / ".spark-staging-3333").mkdir()
    ranges = {"0": (10, 19)}
    write_batch(events(spark, ranges), sink, ranges)
    assert _staging(out) == [".spark-staging-2222", ".spark-staging-3333"]
    assert (theirs / "part-00000.parquet").read_bytes() == b"theirs"
    assert keys(read_sink(spark, sink)) == expected({"0": (0, 19)})


def test_a_failed_write_leaves_no_staging_of_its_batch(spark: SparkSession, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    sink = make_sink("parquet", tmp_path)
    out = Path(str(sink.path))
    ranges = {"0": (0, 299), "1": (0, 299)}
    good = events(spark, ranges)
    write_batch(good, sink, ranges)
    boom = F.when(
        (F.col("partition") == "1") & (F.col("sequenceNumber") == 250),
        F.raise_error(F.lit("crash")),
    ).otherwise(F.col("body"))
    with pytest.raises(SinkError, match="crash"):
        write_batch(good.withColumn("body", boom), sink, ranges)
    assert _staged_batches(out) == []
    write_batch(good, sink, ranges)
    assert _staged_batches(out) == [] and keys(read_sink(spark, sink)) == expected(ranges)


def test_a_session_started_on_another_thread_writes_delta_from_the_runs_thread(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A run starts its session on a thread
    (dagster_eventhub_ingest.ops.run.ingestor.SparkIngestor.start_early); a classic session is
    active only in the thread that created it, and Spark finds the Delta writer (a Python data
    source) through the writing thread's active session."""
    from pyspark.sql import SparkSession as Session

    from dagster_eventhub_ingest.ops.run.ingestor import SparkIngestor
    from dagster_eventhub_ingest.resources.settings import EventHubSettings

    jvm = spark._jvm
    assert jvm is not None
    jvm.SparkSession.clearActiveSession()  # as in a process whose session another thread made
    hub = EventHubSettings(
        eventhub_name="hub",
        connection_string="Endpoint=sb://ns.example/;SharedAccessKeyName=k;SharedAccessKey=s",
    )
    sink = SinkSettings(format="deltalake", path=str(tmp_path / "delta"))
    ingestor = SparkIngestor(None, hub, sink, spark_factory=lambda: Session.builder.getOrCreate())
    ingestor.start_early()
    session = ingestor.spark
    assert jvm.SparkSession.getActiveSession().isDefined()
    ranges = {"0": (0, 9)}
    result = write_batch(events(session, ranges), sink, ranges)
    assert result.events == 10


@pytest.mark.parametrize("partition_by", [(), ("partition",)])
def test_verification_reads_only_the_batches_own_directories(
    spark: SparkSession, tmp_path: Path, partition_by: tuple[str, ...]
) -> None:
    """A long-lived sink holds a directory per batch ever written; reading all of them back to
    verify one batch grew with every run (8,000 batches: 25 s). Only the batch's files are read,
    with partition columns as written, and never a crashed attempt's staging."""
    from dagster_eventhub_ingest.ops.sinks.read import read_batches

    sink = make_sink("parquet", tmp_path, partition_by)
    for start in range(0, 50, 10):
        write_batch(events(spark, {"0": (start, start + 9)}), sink, {"0": (start, start + 9)})
    ranges = {"0": (50, 59), "1": (0, 4)}
    result = write_batch(events(spark, ranges), sink, ranges)
    assert result.events == 15
    batches = [batch_key("0", 50, 59), batch_key("1", 0, 4)]
    # A crashed attempt's staging of the same key, as Spark leaves it under the sink's root.
    staging = Path(sink.path or "") / ".spark-staging-x" / f"{BATCH_COLUMN}={batches[0]}"
    staging.mkdir(parents=True)
    (staging / "part-0.parquet").write_bytes(b"not parquet")
    df = read_batches(spark, sink, batches)
    files = df.inputFiles()
    assert files and all(any(f"{BATCH_COLUMN}={k}/" in f for k in batches) for f in files)
    assert not any(".spark-staging" in f for f in files)
    assert keys(df) == expected(ranges)
    assert dict(df.groupBy("partition").count().collect()) == {"0": 10, "1": 5}


def test_the_batch_directories_are_globbed_on_the_driver(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark looks for a streaming sink's metadata under a lone load path without globbing it:
    a batch of several keys (one ``{k1,k2}`` pattern) logged a FileNotFoundException and its
    stack at every verification. The driver globs the pattern and Spark gets the directories,
    which exist; the pattern itself only when there is nothing to find (Spark's PATH_NOT_FOUND,
    as before) or a directory Spark would glob again."""
    from pyspark.sql.readwriter import DataFrameReader

    from dagster_eventhub_ingest.ops.sinks.read import _glob_directories, read_batches

    sink = make_sink("parquet", tmp_path)
    ranges = {"0": (0, 4), "1": (0, 2)}
    write_batch(events(spark, ranges), sink, ranges)
    root = str(sink.path)
    batches = [batch_key("0", 0, 4), batch_key("1", 0, 2)]
    wanted = [f"{BATCH_COLUMN}={k}" for k in batches]

    found = _glob_directories(spark, f"{root}/{BATCH_COLUMN}={{{batches[0]},{batches[1]},9-0-1}}")
    assert found is not None and [p.rsplit("/", 1)[1] for p in found] == wanted
    assert _glob_directories(spark, f"{root}/{BATCH_COLUMN}={{9-0-1,9-2-3}}") is None

    loaded: list[object] = []
    load = DataFrameReader.load

    def recording(
        self: DataFrameReader, path: object = None, *args: object, **kw: object
    ) -> object:
        loaded.append(path)
        return load(self, path, *args, **kw)

    monkeypatch.setattr(DataFrameReader, "load", recording)
    df = read_batches(spark, sink, batches)
    assert keys(df) == expected(ranges)
    (paths,) = loaded
    assert isinstance(paths, list) and [p.rsplit("/", 1)[1] for p in paths] == wanted

    # A partition value holding a glob character (Spark leaves "}" unescaped in a directory
    # name): Spark would read the directory's path as a glob, so it gets the pattern.
    for value in ("a}b", "c"):
        (tmp_path / "odd" / f"p={value}" / f"{BATCH_COLUMN}={batches[0]}").mkdir(parents=True)
    assert _glob_directories(spark, f"{tmp_path}/odd/[^._]*/{BATCH_COLUMN}={batches[0]}") is None
    (tmp_path / "odd" / "p=a}b" / f"{BATCH_COLUMN}={batches[0]}").rmdir()
    found = _glob_directories(spark, f"{tmp_path}/odd/[^._]*/{BATCH_COLUMN}={batches[0]}")
    assert found is not None and [p.split("/odd/", 1)[1] for p in found] == [
        f"p=c/{BATCH_COLUMN}={batches[0]}"
    ]


@pytest.mark.parametrize("fmt", ["delta", "iceberg", "hudi", "avro"])
def test_table_formats_on_a_path_are_read_through_their_own_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """A table format's files under its path are not its table (an overwritten batch's old
    files stay until vacuumed): only Spark's own file formats are read by a glob."""
    import dagster_eventhub_ingest.ops.sinks.read
    from dagster_eventhub_ingest.ops.sinks.read import read_batches

    class Read:
        def where(self, condition: object) -> str:
            return "filtered read of the whole sink"

    seen: list[SinkSettings] = []
    monkeypatch.setattr(
        dagster_eventhub_ingest.ops.sinks.read,
        "read_sink",
        lambda spark, sink: seen.append(sink) or Read(),
    )
    sink = make_sink(fmt, tmp_path)
    read = read_batches(object(), sink, [batch_key("0", 0, 9)])  # type: ignore[arg-type]
    assert read == "filtered read of the whole sink"
    assert seen == [sink]


def keys_of(df: DataFrame) -> list[tuple[str, int]]:
    return [
        (r.partition, r.sequenceNumber) for r in df.select("partition", "sequenceNumber").collect()
    ]


def test_batch_keys_that_are_not_plain_are_read_through_the_whole_sink(
    spark: SparkSession, tmp_path: Path
) -> None:
    from dagster_eventhub_ingest.ops.sinks.read import read_batches

    sink = make_sink("parquet", tmp_path)
    ranges = {"a{b},c": (0, 2)}
    assert write_batch(events(spark, ranges), sink, ranges).events == 3
    df = read_batches(spark, sink, [batch_key("a{b},c", 0, 2)])
    assert keys(df) == expected(ranges)


def _column_encodings(path: Path) -> dict[str, set[str]]:
    """Every encoding each column of the Parquet files under ``path`` uses."""
    import pyarrow.parquet as pq

    out: dict[str, set[str]] = {}
    files = sorted(path.rglob("*.parquet"))
    assert files
    for file in files:
        meta = pq.ParquetFile(file).metadata
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                column = meta.row_group(g).column(c)
                out.setdefault(column.path_in_schema, set()).update(column.encodings)
    return out


@pytest.mark.parametrize("kind", ["parquet", "deltalake"])
def test_parquet_writes_the_per_event_columns_without_a_dictionary(
    spark: SparkSession, tmp_path: Path, kind: str
) -> None:
    """Sequence numbers, offsets and enqueued times are unique per event, so Parquet's
    dictionary for them is work it then drops: they are written plain. Rows repeating a few
    values of each (a dictionary Parquet would keep, as the plain write of the same rows, the
    control, shows) tell that apart; the other columns keep their dictionary. Both Parquet
    writers (parquet-mr for ``parquet``, pyarrow in ``deltalake``'s tasks) write the same way,
    and neither keeps the bodies' smallest and largest value in the footer."""
    import pyarrow.parquet as pq

    ranges = {"0": (0, 9)}
    rows = [
        (
            b"same body",
            "0",
            str(seq * 100),
            seq,
            T0 + timedelta(seconds=seq),
            None,
            "k",
            {},
            {},
            None,
        )
        for seq in list(range(10)) * 300
    ]
    df = spark.createDataFrame(rows, eventhubs_schema()).repartition(2)
    result = write_batch(df, make_sink(kind, tmp_path), ranges)
    assert result.events == 3000
    ours = _column_encodings(tmp_path / kind)
    df.write.parquet(str(tmp_path / "control"))
    control = _column_encodings(tmp_path / "control")
    dictionary = {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}
    for column in ("sequenceNumber", "offset", "enqueuedTime"):
        assert control[column] & dictionary, (column, control[column])
        assert not ours[column] & dictionary, (column, ours[column])
    for column in ("body", "partition", "partitionKey"):
        assert ours[column] & dictionary, (column, ours[column])
    stats: dict[str, set[bool]] = {}
    for file in (tmp_path / kind).rglob("*.parquet"):
        meta = pq.ParquetFile(file).metadata
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                chunk = meta.row_group(g).column(c)
                stats.setdefault(chunk.path_in_schema, set()).add(chunk.is_stats_set)
    assert stats["body"] == {False}
    for column in ("sequenceNumber", "offset", "enqueuedTime", "partition"):
        assert stats[column] == {True}, column


def test_parquet_bodies_carry_no_statistics_and_times_are_microsecond_timestamps(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A Parquet path sink's footers hold no smallest and largest body (nobody prunes by an
    opaque payload; parquet-mr would keep two whole bodies per column chunk), while every other
    column keeps its statistics, as Spark's own write of the same rows (the control) has them
    for the body too. ``enqueuedTime`` is Parquet's microsecond timestamp (INT64), not Spark's
    INT96, and reads back to the microsecond it was written, beside a batch of INT96 files."""
    import pyarrow.parquet as pq

    ranges = {"0": (0, 99)}
    times = [T0 + timedelta(seconds=seq, microseconds=seq * 7) for seq in range(100)]
    rows = [
        (
            f"body {seq:03d}".encode() * 40,
            "0",
            str(seq * 100),
            seq,
            times[seq],
            None,
            "k",
            {},
            {},
            None,
        )
        for seq in range(100)
    ]
    df = spark.createDataFrame(rows, eventhubs_schema()).repartition(2)
    sink = make_sink("parquet", tmp_path)
    assert write_batch(df, sink, ranges).events == 100
    key = "spark.sql.parquet.outputTimestampType"
    ours = spark.conf.get(key)
    spark.conf.set(key, "INT96")  # Spark's default: the control, and a batch written before
    try:
        df.write.parquet(str(tmp_path / "control"))
        earlier = df.withColumn("sequenceNumber", F.col("sequenceNumber") + 100)
        assert write_batch(earlier, sink, {"0": (100, 199)}).events == 100
    finally:
        spark.conf.set(key, ours)

    def chunks(path: Path, name: str) -> list[Any]:
        found = []
        for file in sorted(path.rglob("*.parquet")):
            meta = pq.ParquetFile(file).metadata
            index = meta.schema.names.index(name)
            found += [meta.row_group(g).column(index) for g in range(meta.num_row_groups)]
        assert found, (path, name)
        return found

    written = tmp_path / "parquet" / f"{BATCH_COLUMN}={batch_key('0', 0, 99)}"
    before = tmp_path / "parquet" / f"{BATCH_COLUMN}={batch_key('0', 100, 199)}"
    control = tmp_path / "control"
    assert not any(c.is_stats_set for c in chunks(written, "body"))
    assert all(c.is_stats_set for c in chunks(control, "body"))
    for column in ("sequenceNumber", "offset", "enqueuedTime"):
        assert all(c.is_stats_set for c in chunks(written, column)), column
    for path, physical in ((written, "INT64"), (control, "INT96"), (before, "INT96")):
        assert {c.physical_type for c in chunks(path, "enqueuedTime")} == {physical}, path
    schema = pq.ParquetFile(next(written.rglob("*.parquet"))).schema_arrow
    assert str(schema.field("enqueuedTime").type) == "timestamp[us, tz=UTC]"
    # One table of files of both kinds reads as one; Spark hands back naive times in the
    # session's time zone, UTC here (SESSION_CONF).
    back = read_sink(spark, sink).orderBy("sequenceNumber").collect()
    assert [row.sequenceNumber for row in back] == list(range(200))
    assert [row.enqueuedTime.replace(tzinfo=timezone.utc) for row in back] == times + times


@pytest.mark.parametrize("fmt", ["json", "orc"])
@pytest.mark.parametrize("partition_by", [(), ("partition",)])
def test_json_and_orc_batches_verify_and_report_their_statistics(
    spark: SparkSession, tmp_path: Path, fmt: str, partition_by: tuple[str, ...]
) -> None:
    """The read-back takes the written columns as given (JSON infers nothing, bodies come back
    from base64): the batch verifies, a replay replaces it, and the statistics are the rows'."""
    ranges = {"0": (0, 19), "1": (100, 109)}
    sink = SinkSettings(format=fmt, path=str(tmp_path / fmt), partition_by=partition_by)
    df = events(spark, ranges, body_size=9)
    for result in (write_batch(df, sink, ranges), write_batch(df, sink, ranges)):
        assert result.events == 30
        first, second = result.partitions["0"], result.partitions["1"]
        assert (first.first_sequence_number, first.last_sequence_number) == (0, 19)
        assert (second.first_sequence_number, second.last_sequence_number) == (100, 109)
    assert keys(read_sink(spark, sink)) == expected(ranges)


def test_verification_reads_the_batch_without_inferring_its_schema(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A read of the batch given the written columns (the verification's read on a sink it
    reads through Spark) runs no job for a footer's schema: the jobs of a count over a known
    schema and no more. On a local ``parquet`` path the verification runs no Spark job at all:
    it counts the batch's rows from its files' footers on the driver."""
    from dagster_eventhub_ingest.ops.sinks.read import read_batches
    from dagster_eventhub_ingest.ops.sinks.verify import verify_written

    ranges = {"0": (0, 49), "1": (100, 129)}
    sink = SinkSettings(path=str(tmp_path / "parquet"))
    df = events(spark, ranges, body_size=7)
    write_batch(df, sink, ranges)
    key = batch_key("0", 0, 49)
    context, tracker = spark.sparkContext, spark.sparkContext.statusTracker()

    def jobs(group: str, action: Any) -> int:
        context.setJobGroup(group, group)
        try:
            action()
        finally:
            context.setJobGroup("", "")
        return len(tracker.getJobIdsForGroup(group))

    plain = jobs(
        f"count-{uuid.uuid4().hex}",
        lambda: spark.read.schema(df.schema).parquet(str(tmp_path / "parquet")).count(),
    )
    given = jobs(
        f"given-{uuid.uuid4().hex}",
        lambda: read_batches(spark, sink, [key], schema=df.schema).count(),
    )
    inferred = jobs(
        f"inferred-{uuid.uuid4().hex}", lambda: read_batches(spark, sink, [key]).count()
    )
    assert given == plain < inferred
    verify = jobs(
        f"verify-{uuid.uuid4().hex}",
        lambda: verify_written(spark, sink, [key], 50, sink.path or "", schema=df.schema),
    )
    assert verify == 0


@pytest.mark.spark
def test_a_local_parquet_batch_is_counted_from_the_files_a_reader_sees(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The verification's count of a local ``parquet`` sink (footers on the driver) is Spark's
    count of the same batches: under the ``partition_by`` directories, only the batch's keys,
    nothing in hidden directories or files (staging, ``_SUCCESS``, checksums); a file gone is
    a failed verification."""
    import shutil

    from dagster_eventhub_ingest.ops.sinks.read import read_batches
    from dagster_eventhub_ingest.ops.sinks.verify import parquet_batch_rows, verify_written

    ranges = {"0": (0, 9), "1": (0, 4), "2": (20, 26)}
    sink = SinkSettings(path=str(tmp_path / "p"), partition_by=("partition",))
    df = events(spark, ranges)
    write_batch(df, sink, ranges)
    keys = {p: batch_key(p, *r) for p, r in ranges.items()}
    both = [keys["0"], keys["1"]]
    assert parquet_batch_rows(sink, both) == 15 == read_batches(spark, sink, both).count()
    assert parquet_batch_rows(sink, [keys["2"]]) == 7
    root = tmp_path / "p"
    data = sorted((root / "partition=0" / f"eh_batch={keys['0']}").glob("part-*.parquet"))
    assert data
    hidden = root / ".ehingest-staging-x" / "partition=0" / f"eh_batch={keys['0']}"
    hidden.mkdir(parents=True)
    shutil.copy(data[0], hidden / data[0].name)
    shutil.copy(data[0], data[0].parent / f"_{data[0].name}")
    shutil.copy(data[0], data[0].parent / f".{data[0].name}")
    assert parquet_batch_rows(sink, both) == 15 == read_batches(spark, sink, both).count()
    data[0].unlink()
    with pytest.raises(SinkError, match=r"15 event\(s\) were written but \d+ are readable"):
        verify_written(spark, sink, both, 15, sink.path or "")


_NO_PANDAS = """
import json, sys
from dagster_eventhub_ingest.resources.spark.session import local_spark_session
from dagster_eventhub_ingest.ops.sinks.statistics import choose_stats_method
from dagster_eventhub_ingest.ops.sinks.write import write_batch
from dagster_eventhub_ingest.resources.sink import SinkSettings

spark = local_spark_session("no-pandas-test", master="local[2]", register_source=False)
ranges = {str(p): (10 * p, 10 * p + 4) for p in range(4)}
df = spark.sql(
    "SELECT CAST(CONCAT('b', s) AS BINARY) body, CAST(p AS STRING) `partition`,"
    " CAST(s * 100 AS STRING) offset, s sequenceNumber,"
    " TIMESTAMP_SECONDS(1700000000 + s) enqueuedTime, CAST(NULL AS STRING) publisher,"
    " CAST(NULL AS STRING) partitionKey, MAP('n', CAST(s AS STRING)) properties,"
    " MAP_FROM_ARRAYS(ARRAY(), ARRAY()) systemProperties"
    " FROM (SELECT p, 10 * p + i s FROM RANGE(4) AS t1(p) CROSS JOIN RANGE(5) AS t2(i))"
).selectExpr("body", "`partition`", "offset", "sequenceNumber", "enqueuedTime", "publisher",
             "partitionKey", "properties",
             "CAST(systemProperties AS MAP<STRING, STRING>) systemProperties")
sink = SinkSettings(format="parquet", path=sys.argv[1])
result = write_batch(df, sink, ranges)
print(json.dumps({
    "method": choose_stats_method(sink, len(ranges)),
    "stats": {p: [s.events, s.first_sequence_number, s.last_sequence_number, s.last_offset]
              for p, s in result.partitions.items()},
    "pandas": "pandas" in sys.modules,
}))
"""


def test_a_batch_written_and_verified_in_a_fresh_driver_leaves_pandas_unimported(
    tmp_path: Path,
) -> None:
    """The read-back statistics (the default from 4 partitions) without pyspark's ``lit``,
    which imports pandas: 0.3-0.4 s of CPU in a cold run's verification."""
    from tests.support.fixtures.spark import script_in_fresh_jvm

    seen = script_in_fresh_jvm(_NO_PANDAS, str(tmp_path / "sink"))
    assert seen == {
        "method": "split",
        "stats": {str(p): [5, 10 * p, 10 * p + 4, str(100 * (10 * p + 4))] for p in range(4)},
        "pandas": False,
    }


@pytest.mark.parametrize("kind", SINK_KINDS)
def test_a_sink_written_before_a_column_existed_gains_it(
    spark: SparkSession, tmp_path: Path, kind: str
) -> None:
    """A sink an earlier version created has no ``amqpBody`` column. The next batch still lands
    every column it has (none is dropped to fit the old schema); the old rows read it as null."""
    sink = make_sink(kind, tmp_path)
    old, new = {"0": (0, 9)}, {"0": (10, 19)}
    write_batch(events(spark, old).drop("amqpBody"), sink, old)
    body = bytes([0x53, 0x77, 0xA1, 0x02, 0x68, 0x69])  # an amqp-value section: "hi"
    fresh = events(spark, new).withColumn(
        "amqpBody", F.when(F.col("sequenceNumber") >= 0, F.lit(body))
    )
    write_batch(fresh, sink, new)
    landed = read_sink(spark, sink)
    assert "amqpBody" in landed.columns
    rows = {
        r.sequenceNumber: r.amqpBody for r in landed.select("sequenceNumber", "amqpBody").collect()
    }
    assert sorted(rows) == list(range(0, 20))
    assert all(rows[s] is None for s in range(0, 10))
    assert all(bytes(rows[s]) == body for s in range(10, 20))
