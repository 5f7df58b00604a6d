"""``ehingest emulator serve`` / ``send`` as a user runs them: separate processes, clean stops."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from dagster_eventhub_ingest.cli.main import main as ehingest
from dagster_eventhub_ingest.emulator.testing import EmulatedHub

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def serve(*args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Run ``python -m dagster_eventhub_ingest.emulator serve --port 0 ...``; yield (connection
    string, process)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster_eventhub_ingest.emulator", "serve", "--port", "0", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("Endpoint="):
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise AssertionError(f"emulator did not start: {line!r} {err!r}")
        yield line, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_serve_send_restart_and_clean_stop(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve("--hub", "demo:2", "--consumer-group", "spark", "--data-dir", str(data)) as (
        conn,
        proc,
    ):
        assert conn.endswith(";UseDevelopmentEmulator=true") and "EntityPath" not in conn
        assert conn.startswith("Endpoint=sb://127.0.0.1:")
        result = CliRunner().invoke(
            ehingest,
            [
                "emulator",
                "send",
                "--connection-string",
                conn,
                "--hub",
                "demo",
                "--count",
                "50",
                "--size",
                "100",
                "--partition",
                "1",
            ],
        )
        assert result.exit_code == 0, result.output
        assert "sent 50 events of 100 bytes to demo" in result.output
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 0
        assert "hub demo: 2 partitions, consumer groups: $Default, spark" in err
        assert "emulator stopped" in err

    # A later emulator process over the same data dir serves what the producer sent.
    with serve("--data-dir", str(data)) as (conn, proc):
        hub = EmulatedHub("demo", conn, ("0", "1"))
        events = hub.receive("1", "-1", expected=50, consumer_group="spark")
        assert [e.sequence_number for e in events] == list(range(50))
        assert all(len(e.body_as_str()) == 100 for e in events)
        assert events[7].body_as_str().startswith("000000000007")
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=15)
        assert proc.returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "--hub", "demo"], "'demo' is not NAME:PARTITIONS"),
        (["serve", "--hub", "demo:x"], "partition count 'x' is not a number"),
        (["serve"], "no hub to serve"),
        (["serve", "--hub", "bad name:2"], "hub name 'bad name' is not valid"),
        (["serve", "--hub", "d:1", "--key", "justakey"], "is not NAME=VALUE"),
        (["serve", "--hub", "d:1", "--idle-timeout", "-1"], "must be >= 0 seconds"),
        (
            [
                "send",
                "--connection-string",
                "x",
                "--hub",
                "h",
                "--partition",
                "0",
                "--partition-key",
                "k",
            ],
            "give --partition or --partition-key, not both",
        ),
    ],
)
def test_bad_input_is_named(args: list[str], message: str) -> None:
    result = CliRunner().invoke(ehingest, ["emulator", *args])
    assert result.exit_code != 0
    assert message in result.output


def test_send_never_prints_the_key() -> None:
    conn = "SharedAccessKeyName=k;SharedAccessKey=TOPSECRET"  # no Endpoint
    result = CliRunner().invoke(
        ehingest,
        ["emulator", "send", "--connection-string", conn, "--hub", "h", "--count", "1"],
    )
    assert result.exit_code != 0
    assert "--connection-string" in result.output
    assert "TOPSECRET" not in result.output


def test_serve_with_own_key_refuses_the_default_one() -> None:
    with serve("--hub", "demo:1", "--key", "sender=c2VuZGVyLWtleQ==") as (conn, _proc):
        assert "SharedAccessKeyName=sender;SharedAccessKey=c2VuZGVyLWtleQ==;" in conn
        ok = CliRunner().invoke(
            ehingest,
            ["emulator", "send", "--connection-string", conn, "--hub", "demo", "--count", "3"],
        )
        assert ok.exit_code == 0, ok.output
        default = conn.replace("sender", "RootManageSharedAccessKey").replace(
            "c2VuZGVyLWtleQ==", "SAS_KEY_VALUE"
        )
        refused = CliRunner().invoke(
            ehingest,
            ["emulator", "send", "--connection-string", default, "--hub", "demo", "--count", "1"],
        )
        assert refused.exit_code != 0
        assert "InvalidSignature" in refused.output and "SAS_KEY_VALUE" not in refused.output
