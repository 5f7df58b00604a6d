"""SIGTERM in the middle of a read, as Kubernetes (pod deletion) and a shell send it.

A real ``ehingest run`` (emulator, Azurite, its own local Spark) whose readers are slowed by the
``EHINGEST_SLOW_READ_SECONDS`` hook receives SIGTERM while its Spark job reads. It must exit
within 15 s with the documented code, leaving no process of its tree (JVM, Python workers)
behind, its leases released and its write-ahead intents kept; a second run then takes over at
once (no wait for the lease expiry) and the sink holds every event once.

The Dagster (a run terminated through the instance) and Airflow (``on_kill``) surfaces are
tested in tests/integration/test_dagster_runs.py and tests/airflow/.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dagster_eventhub_ingest.cli.exit_codes import EXIT_TERMINATED
from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.settings import StoreSettings
from tests.support.cli import start_ehingest
from tests.support.landed import assert_exactly_once, landed_events, sent_events
from tests.support.processes import STOPPED_PROMPTLY_SECONDS, descendants, still_running

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

LEASE_EXPIRY = 120  # a takeover that waited for it would show


def wait_for(what: str, condition: Callable[[], bool], proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 300
    while not condition():
        assert proc.poll() is None, f"exited before {what}: " + log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {what}: " + log.read_text()[-3000:]
        time.sleep(0.1)


def test_sigterm_mid_read_stops_cleanly_and_the_next_run_takes_over_at_once(
    make_eventhub: Any, azurite_connection_string: str, container_name: str, tmp_path: Path
) -> None:
    hub = make_eventhub(partitions=2)
    sent = {p: [f"{p}-{i}-".encode() * 10 for i in range(1500)] for p in hub.partition_ids}
    for pid, bodies in sent.items():
        for i in range(0, len(bodies), 500):
            hub.send(pid, bodies[i : i + 500])
    out = tmp_path / "out"
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "eventhub": {
                    "eventhub_name": hub.name,
                    "credential": {"connection_string_env": "SIG_EH_CONN"},
                },
                "store": {
                    "container": container_name,
                    "credential": {"connection_string_env": "SIG_ST_CONN"},
                },
                "sink": {"format": "parquet", "path": str(out)},
                "lease_expiry_seconds": LEASE_EXPIRY,
                "join_grace_seconds": 0,
                "prefetch": 50,
                "report_lag_seconds": False,
                "spark": {"master": "local[2]"},
            }
        )
    )
    env = {
        **{k: v for k, v in os.environ.items() if k != "EHINGEST_FAULT"},
        "SIG_EH_CONN": hub.connection_string,
        "SIG_ST_CONN": azurite_connection_string,
    }
    store = PartitionStore(
        AzureBlobBackend.from_settings(
            StoreSettings(container=container_name, connection_string=azurite_connection_string)
        ),
        hub.settings().hub_ref(),
    )

    def spawn(owner: str, extra: dict[str, str]) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"{owner}.log"
        proc = start_ehingest(
            *("-v", "run", "--config", str(cfg), "--owner", owner, "--no-progress"),
            env={**env, **extra},
            log=log,
        )
        return proc, log

    def reading() -> bool:
        intents = [o for o in store.list_ownership().values() if o.intent is not None]
        workers = [p for p in descendants(first.pid) if p.name().startswith("python")]
        return len(intents) == 2 and len(workers) >= 2

    first, first_log = spawn("sig-a", {"EHINGEST_SLOW_READ_SECONDS": "0.4"})
    try:
        wait_for("read in progress", reading, first, first_log)
        time.sleep(1.0)  # the readers are receiving
        tree = descendants(first.pid)
        assert any(p.name() == "java" for p in tree), [p.name() for p in tree]
        sent_at = time.monotonic()
        os.kill(first.pid, signal.SIGTERM)
        code = first.wait(STOPPED_PROMPTLY_SECONDS + 15)
        took = time.monotonic() - sent_at
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
    text = first_log.read_text()
    assert code == EXIT_TERMINATED, text[-3000:]
    assert took < STOPPED_PROMPTLY_SECONDS, (took, text[-3000:])
    print(f"SIGTERM mid-read: exit {code} after {took:.1f} s")
    assert "stopped: the run stopped while reading and writing (SIGTERM received)" in text, text
    # The session's end in a hurry prints no traceback of its own (PySpark's accumulator
    # handler, through socketserver) and logs none above INFO. py4j logs a call in flight that
    # the JVM's end cut short at INFO, with its traceback: the CLI runs with -v here.
    assert "Exception occurred during processing of request" not in text, text[-3000:]
    assert tracebacks_above_info(text) == [], text[-3000:]
    assert still_running(tree) == [], text[-2000:]
    assert store.list_checkpoints() == {}  # nothing was checkpointed: the read never finished
    owns = store.list_ownership()
    assert set(owns) == set(hub.partition_ids)
    for own in owns.values():
        assert own.is_released, own  # released, not left to expire
        assert own.intent is not None and own.intent.owner_id == "sig-a"  # kept for the replay

    second, second_log = spawn("sig-b", {})
    try:
        started = time.monotonic()
        assert second.wait(600) == 0, second_log.read_text()[-3000:]
        took = time.monotonic() - started
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(second.pid, signal.SIGKILL)
    text = second_log.read_text()
    assert "reason=expired" not in text and took < LEASE_EXPIRY, (took, text[-3000:])
    print(f"SIGTERM mid-read: the next run took over at once and finished in {took:.1f} s")
    assert text.count("left by sig-a") >= 2, text[-3000:]  # both intents replayed
    assert_exactly_once(landed_events(out), sent_events(sent))


def tracebacks_above_info(log: str) -> list[str]:
    """The tracebacks in ``log`` but those logged at INFO or DEBUG: each as the log line
    (``<time> <LEVEL> <logger>: ...``) right before it, or as the line before it where that is
    not a log line (a traceback printed, not logged)."""
    found: list[str] = []
    previous = ""
    for line in log.splitlines():
        if line.startswith("Traceback (most recent call last):"):
            logged = re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (INFO|DEBUG) ", previous)
            if logged is None:
                found.append(previous)
        previous = line
    return found
