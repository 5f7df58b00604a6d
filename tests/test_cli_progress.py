"""``ehingest run``'s progress display and exit codes, without services."""

from __future__ import annotations

import io

from cli.run import EXIT_CONFIG, EXIT_FAILED, ProgressPrinter, exit_code_for
from ops.progress import PartitionProgress, RunProgress
from resources.errors import (
    ConfigurationError,
    DataLossError,
    EventHubUnavailableError,
    StoreUnavailableError,
)


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
