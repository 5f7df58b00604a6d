"""``ehingest run``'s progress display and exit codes, without services."""

from __future__ import annotations

import io
import re
import signal
from pathlib import Path

from dagster_eventhub_ingest.cli.exit_codes import (
    EXIT_CODES,
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    exit_code_for,
)
from dagster_eventhub_ingest.cli.run import ProgressPrinter
from dagster_eventhub_ingest.ops.run.progress import PartitionProgress, RunProgress
from dagster_eventhub_ingest.resources.errors import (
    ConfigurationError,
    DataLossError,
    EventHubUnavailableError,
    RunCancelledError,
    SinkError,
    StoreUnavailableError,
)
from dagster_eventhub_ingest.resources.ranges import SeqRange
from tests.support.raising import raised_from


def _progress(phase: str, landed: int) -> RunProgress:
    return RunProgress(
        "cli-1",
        phase,
        12.4,
        {
            "0": PartitionProgress(
                "0", target_events=100, landed_events=landed, done=landed == 100
            ),
            "1": PartitionProgress("1", target_events=0, done=True),
        },
        spark_tasks=(1, 4) if phase == "reading" else None,
    )


def test_terminal_gets_a_bar_redrawn_in_place() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, tty=True)
    printer(_progress("reading", 0))
    printer(_progress("finished", 100))
    text = out.getvalue()
    assert text.startswith("\r[------------------------------]   0% reading: 0/100 events")
    assert "Spark tasks 1/4" in text
    assert "\r[##############################] 100% finished: 100/100 events landed" in text
    assert text.endswith("\n") and text.count("\n") == 1


def test_a_log_gets_plain_throttled_lines() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, tty=False, min_interval=60)
    printer(_progress("snapshot", 0))
    printer(_progress("reading", 0))  # within the interval: dropped
    printer(_progress("finished", 100))
    lines = out.getvalue().splitlines()
    assert lines == [
        "progress 0%: snapshot: 0/100 events landed; 1/2 partitions up to date; 12 s",
        "progress 100%: finished: 100/100 events landed; 2/2 partitions up to date; 12 s",
    ]
    assert "\r" not in out.getvalue()


def test_exit_code_follows_the_retryable_flag() -> None:
    assert exit_code_for(ConfigurationError("x")) == EXIT_CONFIG
    assert exit_code_for(DataLossError("x")) == EXIT_CONFIG  # retrying cannot help
    assert exit_code_for(StoreUnavailableError("x")) == EXIT_FAILED
    assert exit_code_for(EventHubUnavailableError("x")) == EXIT_FAILED
    assert exit_code_for(RuntimeError("x")) == EXIT_FAILED
    assert exit_code_for(SinkError("x")) == EXIT_CONFIG  # one raised on purpose: a layout
    assert exit_code_for(SinkError("x", retryable=True)) == EXIT_FAILED
    assert exit_code_for(RunCancelledError("x", signal=signal.SIGTERM)) == EXIT_TERMINATED == 143
    assert exit_code_for(RunCancelledError("x", signal=signal.SIGINT)) == EXIT_INTERRUPTED == 130


def test_exit_codes_are_one_table_and_docs_run_md_shows_it() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "run.md").read_text()
    section = text.split("### Exit codes", 1)[1].split("\n#", 1)[0]
    documented = {int(c): m for c, m in re.findall(r"^\| (\d+) \| (.+) \|$", section, re.M)}
    assert documented == EXIT_CODES
    # Every code `run` and `status` exit with is one of them, and means one thing.
    codes = {exit_code_for(e) for e in (ConfigurationError("x"), StoreUnavailableError("x"))}
    assert codes <= set(EXIT_CODES) and len(codes) == 2


def test_a_sink_errors_exit_code_follows_its_cause() -> None:
    """The exit code follows the cause's type and errno; text around it does not count (real
    Spark, JVM and Azure failures: tests/unit/test_failures.py,
    tests/integration/test_spark_failures.py)."""
    import errno
    import os

    from dagster_eventhub_ingest.ops.sinks.failures import sink_error

    permanent = [
        PermissionError(errno.EACCES, "fine, retry"),
        OSError(errno.EROFS, os.strerror(errno.EROFS)),
        FileNotFoundError(errno.ENOENT, "x"),
        OSError("Generic LocalFileSystem error: (os error 13)"),  # delta-rs
        TypeError("unsupported operand"),
        raised_from(
            RuntimeError("An error occurred while calling o81.save"), PermissionError(13, "x")
        ),
    ]
    transient = [
        ConnectionResetError(errno.ECONNRESET, "Connection reset by peer, permission denied"),
        TimeoutError("Read timed out"),
        RuntimeError("Python worker exited unexpectedly (crashed)"),  # nothing typed: retried
        # A full disk or quota, whatever the text around it: freeing space helps.
        *(
            raised_from(RuntimeError("file does not exist"), OSError(code, os.strerror(code)))
            for code in (errno.ENOSPC, errno.EDQUOT)
        ),
    ]
    for cause in permanent:
        err = sink_error("sink parquet path '/out': cannot write batch", cause)
        assert not err.retryable and exit_code_for(err) == EXIT_CONFIG, cause
    for cause in transient:
        err = sink_error("sink parquet path '/out': cannot write batch", cause)
        assert err.retryable and exit_code_for(err) == EXIT_FAILED, cause


def test_the_startup_phase_is_the_process_age_to_the_centisecond() -> None:
    """dagster_eventhub_ingest.cli.run.process_age_seconds: psutil's create_time adds a boot time in
    whole seconds, which read a 0.3 s start-up as anything up to 1.3 s."""
    import subprocess
    import sys
    import time

    code = (
        "import time; time.sleep(0.3); "
        "from dagster_eventhub_ingest.cli.run import process_age_seconds as a; print(a())"
    )
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    elapsed = time.monotonic() - t0
    age = float(out.stdout)
    assert 0.3 <= age <= elapsed + 0.02, (age, elapsed)


def test_totals_are_this_runs_share_and_each_partition_is_shown() -> None:
    """Two runs split four partitions: each run's total is its own two, and it reaches it."""
    parts = {
        "0": PartitionProgress("0", target_events=100, landed_events=40, mine=True),
        "1": PartitionProgress("1", target_events=100, mine=True),
        "2": PartitionProgress("2", target_events=100, done=True),
        "3": PartitionProgress("3", target_events=100, done=True),
    }
    parts["1"].reading = SeqRange(0, 99)
    parts["1"].read_events = 30
    progress = RunProgress("run-a", "reading", 31.0, parts, spark_start_seconds=12.34)
    assert (progress.landed_events, progress.target_events) == (40, 200)
    assert progress.line() == (
        "reading: 40/200 events landed of this run's share (partitions 0, 1); "
        "partition 0 landed 40/100; partition 1 read 30/100, landed 0/100; "
        "2/4 partitions up to date (2, 3 by peers); Spark started in 12.3 s; 31 s"
    )
    starting = RunProgress("run-a", "spark starting", 50.0, parts, spark_start_seconds=45.2)
    assert starting.line() == "starting the Spark session: 45 s so far; 50 s"
