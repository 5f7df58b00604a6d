"""One live process per owner id, with real ``ehingest run`` processes (Azurite, the emulator,
local Spark): a second process started with a live process's owner id is refused before it
reads anything; a retry of a process killed with SIGKILL takes its leases over at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import start_ehingest, write_config
from tests.support.landed import assert_exactly_once, landed_events, sent_events

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _spawn(config: Path, owner: str, log: Path, fault: str | None = None) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("EHINGEST_FAULT", None)
    if fault:
        env["EHINGEST_FAULT"] = fault
    return start_ehingest("-v", "run", "--config", str(config), "--owner", owner, env=env, log=log)


def _reap(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


def _setup(
    make_eventhub,
    monkeypatch: pytest.MonkeyPatch,
    conn: str,
    container: str,
    tmp_path: Path,
    **extra,
):
    from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
    from dagster_eventhub_ingest.resources.store.settings import StoreSettings

    hub = make_eventhub(partitions=4)
    sent = {p: [f"{p}-{i}-".encode() * 10 for i in range(120)] for p in hub.partition_ids}
    for pid, bodies in sent.items():
        hub.send(pid, bodies)
    monkeypatch.setenv("DUP_EH_CONN", hub.connection_string)
    monkeypatch.setenv("DUP_ST_CONN", conn)
    out = tmp_path / "out"
    cfg = write_config(
        tmp_path,
        hub,
        container,
        name="run",
        eh_conn_env="DUP_EH_CONN",
        store_conn_env="DUP_ST_CONN",
        **{
            "strategy": "greedy",
            "lease_expiry_seconds": None,  # the product's, unless the test sets one
            "receive_timeout_seconds": 10,
            **extra,
        },
    )
    settings = StoreSettings(container=container, connection_string=conn)
    backend = AzureBlobBackend.from_settings(settings)
    backend.ensure_container(create=True)
    store = PartitionStore(backend, hub.settings().hub_ref())
    return hub, sent, out, cfg, store


def _heartbeat_instance(store, owner: str) -> str:
    from dagster_eventhub_ingest.ops.balancing.liveness import list_heartbeats

    hb = list_heartbeats(store).get(owner)
    return hb.instance if hb is not None else ""


def test_a_second_process_with_a_live_owner_id_is_refused_and_the_first_lands_every_event_once(
    make_eventhub,
    monkeypatch: pytest.MonkeyPatch,
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
) -> None:
    _hub, sent, out, cfg, store = _setup(
        make_eventhub, monkeypatch, azurite_connection_string, container_name, tmp_path
    )
    first = _spawn(cfg, "same", tmp_path / "first.log")
    second = None
    try:
        for _ in range(600):  # the first has taken the owner id (its heartbeat is written)
            if _heartbeat_instance(store, "same") or first.poll() is not None:
                break
            time.sleep(0.2)
        token = _heartbeat_instance(store, "same")
        assert token.split("/")[2] == str(first.pid), (tmp_path / "first.log").read_text()
        # Paused (SIGSTOP) so it is surely still running while the second one starts, however
        # fast this machine; a stopped process is as alive as a busy one.
        os.killpg(first.pid, signal.SIGSTOP)
        try:
            second = _spawn(cfg, "same", tmp_path / "second.log")
            assert second.wait(300) == 2, (tmp_path / "second.log").read_text()
        finally:
            os.killpg(first.pid, signal.SIGCONT)
        log2 = (tmp_path / "second.log").read_text()
        assert "owner id 'same' is in use by another live process" in log2
        assert f"pid {first.pid}" in log2 and "own owner id" in log2
        assert "Traceback" not in log2
        # It claimed nothing and recorded no intent: every lease and the heartbeat are the
        # first's; the same log has no claim or intent line.
        assert "claimed hub=" not in log2 and "intent hub=" not in log2
        assert _heartbeat_instance(store, "same") == token
        for own in store.list_ownership().values():
            assert own.owner_id in ("", "same") and own.instance in ("", token)
        assert first.wait(600) == 0, (tmp_path / "first.log").read_text()
    finally:
        _reap(first)
        if second is not None:
            _reap(second)
    assert_exactly_once(landed_events(out), sent_events(sent))


def test_a_retry_of_a_killed_process_with_the_same_owner_id_takes_over_at_once(
    make_eventhub,
    monkeypatch: pytest.MonkeyPatch,
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
) -> None:
    # A lease expiry far beyond the test's patience: only an immediate takeover can finish.
    _hub, sent, out, cfg, store = _setup(
        make_eventhub,
        monkeypatch,
        azurite_connection_string,
        container_name,
        tmp_path,
        lease_expiry_seconds=3600,
    )
    killed = _spawn(cfg, "cron-job", tmp_path / "killed.log", fault="after_intent:1")
    try:
        assert killed.wait(300) == -signal.SIGKILL, (tmp_path / "killed.log").read_text()
    finally:
        _reap(killed)
    owns = store.list_ownership()
    assert owns and all(o.owner_id == "cron-job" and o.intent is not None for o in owns.values())
    retry = _spawn(cfg, "cron-job", tmp_path / "retry.log")
    try:
        assert retry.wait(600) == 0, (tmp_path / "retry.log").read_text()
    finally:
        _reap(retry)
    log = (tmp_path / "retry.log").read_text()
    assert "taking over from an ended process with this owner id" in log
    assert f"pid {killed.pid}" in log and "watching it" not in log
    assert "replaying pending intent" in log
    assert_exactly_once(landed_events(out), sent_events(sent))
