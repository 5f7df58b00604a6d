"""spark.readStream.format("eventhubs") with Trigger.AvailableNow: emulator, real Spark."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.fixtures.emulator import expired_hub
from tests.support.streams import run_available_now, run_available_now_once

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.integration]

MakeHub = Callable[..., Any]
ROOT = Path(__file__).resolve().parents[2]


def landed(spark: SparkSession, out: Path) -> list[tuple[str, int, bytes]]:
    """Every committed row (the file sink's metadata log), sorted; duplicates stay visible."""
    rows = spark.read.parquet(str(out)).select("partition", "sequenceNumber", "body").collect()
    return sorted((r.partition, r.sequenceNumber, bytes(r.body)) for r in rows)


def test_available_now_reads_all_in_bounded_batches_and_resumes(
    spark: SparkSession, make_eventhub: MakeHub, tmp_path: Path
) -> None:
    hub = make_eventhub(partitions=2)
    hub.send("0", [f"a{i}".encode() for i in range(30)])
    hub.send("1", [f"b{i}".encode() for i in range(15)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    progress = run_available_now(
        spark, hub, out, checkpoint, startingPosition="earliest", maxEventsPerTrigger="20"
    )
    # Admission control: no batch above 20 events; 45 events need 3.
    assert [p["numInputRows"] for p in progress] == [20, 20, 5]
    expected = [("0", i, f"a{i}".encode()) for i in range(30)]
    expected += [("1", i, f"b{i}".encode()) for i in range(15)]
    assert landed(spark, out) == sorted(expected)
    # The offsets in the checkpoint: {hub: {partition: next sequence number}}.
    last = max((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    assert json.loads(last.read_text().splitlines()[-1]) == {hub.name: {"0": 30, "1": 15}}

    # A second run reads only what arrived since, once.
    hub.send("1", [b"late"] * 3)
    progress = run_available_now(
        spark, hub, out, checkpoint, startingPosition="earliest", maxEventsPerTrigger="20"
    )
    assert [p["numInputRows"] for p in progress] == [3]
    assert landed(spark, out) == sorted(expected + [("1", n, b"late") for n in (15, 16, 17)])


def test_stream_retention_gap_follows_fail_on_data_loss(
    spark: SparkSession, make_eventhub: MakeHub, eventhub_emulator: Any, tmp_path: Path
) -> None:
    hub = expired_hub(make_eventhub, eventhub_emulator)  # 0..9 expired, 10..19 readable
    with pytest.raises(AssertionError) as err:
        run_available_now(spark, hub, tmp_path / "o1", tmp_path / "c1", startingOffsets='{"0": 0}')
    assert "DataLossError" in str(err.value) and "[0, 9] expired" in str(err.value)
    assert "failOnDataLoss=false" in str(err.value)

    run_available_now(
        spark,
        hub,
        tmp_path / "o2",
        tmp_path / "c2",
        startingOffsets='{"0": 0}',
        failOnDataLoss="false",
    )
    assert [s for _, s, _ in landed(spark, tmp_path / "o2")] == list(range(10, 20))


@pytest.mark.slow
def test_sigkill_mid_batch_then_restart_lands_every_event_once(
    spark: SparkSession, make_eventhub: MakeHub, tmp_path: Path
) -> None:
    hub = make_eventhub(partitions=2)
    expected = []
    for pid in ("0", "1"):
        bodies = [f"{pid}-{i}".encode() for i in range(200)]
        hub.send(pid, bodies)
        expected += [(pid, i, body) for i, body in enumerate(bodies)]
    out, checkpoint, marker = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "hanging"
    cmd = [
        sys.executable,
        str(ROOT / "tests" / "support" / "stream_child.py"),
        str(out),
        str(checkpoint),
        str(marker),
        hub.name,
        "0",
        "100",  # in the second of three batches of up to 150 events
    ]
    env = {**os.environ, "EHINGEST_TEST_CONN": hub.connection_string}

    # Run 1: killed (SIGKILL, driver JVM and Python workers alike) while a batch is running.
    child = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert child.poll() is None, "the query ended before reaching the crash point"
            assert time.monotonic() < deadline, "the query did not reach the crash point"
            time.sleep(0.5)
        time.sleep(1.0)  # let the batch's other task write its (uncommitted) file
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(60)
    committed_before = len(list((checkpoint / "commits").glob("[0-9]*")))
    assert committed_before >= 1, "the kill should come after at least one committed batch"
    assert len(list((checkpoint / "offsets").glob("[0-9]*"))) == committed_before + 1

    # Run 2: the same query restarted on the same checkpoint finishes the job.
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert landed(spark, out) == sorted(expected)


def test_a_stream_with_an_end_fails_saying_so(
    spark: SparkSession, make_eventhub: MakeHub, tmp_path: Path
) -> None:
    """Not PySpark's ``UnboundLocalError: cannot access local variable 'reader'``: the source
    refuses the end at the first call Spark makes, and that error is what the query reports."""
    hub = make_eventhub(partitions=1)
    hub.send("0", [b"x"] * 3)
    with pytest.raises(AssertionError) as err:
        run_available_now_once(
            spark, hub, tmp_path / "out", tmp_path / "chk", endingOffsets="latest"
        )
    message = str(err.value)
    assert "ConfigurationError: endingOffsets: a stream has no end" in message
    assert "UnboundLocalError" not in message
