"""One live process per owner id (dagster_eventhub_ingest.ops.balancing.liveness.take_owner_id), on
the in-memory store.

The processes here are instance tokens; tests/integration/test_duplicate_owner_integration.py runs
the same rules with real ``ehingest run`` processes on Azurite and the emulator.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from dagster_eventhub_ingest.ops.balancing import claim_cycle
from dagster_eventhub_ingest.ops.balancing.liveness import (
    OwnerInstance,
    delete_heartbeat,
    list_heartbeats,
    take_owner_id,
    write_heartbeat,
)
from dagster_eventhub_ingest.resources.errors import ConfigurationError, DuplicateOwnerError
from dagster_eventhub_ingest.resources.store.memory import InMemoryBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import HubRef

HUB = HubRef("ns.example", "hub", "$Default")
EXPIRY = timedelta(seconds=60)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now


def _store(backend: InMemoryBackend, inst: OwnerInstance) -> PartitionStore:
    return PartitionStore(backend, HUB, instance=inst.token())


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _first(backend: InMemoryBackend, inst: OwnerInstance, partitions: int = 2) -> None:
    """``inst`` runs as owner "job": heartbeat, claims, an intent on partition 0."""
    store = _store(backend, inst)
    take_owner_id(store, "job", inst, expiry=EXPIRY)
    for pid in map(str, range(partitions)):
        own = store.claim(pid, "job", None)
        assert own is not None and own.instance == inst.token()
        if pid == "0":
            store.record_intent(own, 0, 9)


def test_a_second_live_process_with_the_same_owner_id_is_refused_before_any_claim() -> None:
    backend = InMemoryBackend()
    first = OwnerInstance.current()
    first.start()  # running in this very process: alive
    try:
        _first(backend, first)
        second = OwnerInstance.current()
        before = {r.name: r.etag for r in backend.list("")}
        with pytest.raises(DuplicateOwnerError) as err:
            take_owner_id(_store(backend, second), "job", second, expiry=EXPIRY)
    finally:
        first.stop()
    msg = str(err.value)
    assert "'job'" in msg and f"pid {first.pid}" in msg and "own owner id" in msg
    assert isinstance(err.value, ConfigurationError) and not err.value.retryable
    assert {r.name: r.etag for r in backend.list("")} == before  # nothing written


def test_a_killed_predecessor_with_the_same_owner_id_is_taken_over_at_once() -> None:
    backend = InMemoryBackend()
    killed = replace(OwnerInstance.current(), pid=_dead_pid())
    _first(backend, killed)
    retry = OwnerInstance.current()
    store = _store(backend, retry)
    slept: list[float] = []
    hb = take_owner_id(store, "job", retry, expiry=EXPIRY, sleep=slept.append)
    assert slept == [] and hb.instance == retry.token()
    owns = store.list_ownership()
    # Its leases are released with their intent kept, so the claim cycle replays it.
    assert all(o.is_released for o in owns.values())
    assert owns["0"].intent is not None and (owns["0"].intent.start, owns["0"].intent.end) == (0, 9)
    held = claim_cycle(
        store, "job", "greedy", targets=["0", "1"], expiry=EXPIRY, join_grace=0, sleep=slept.append
    )
    assert sorted(held) == ["0", "1"] and {o.instance for o in held.values()} == {retry.token()}


def test_an_earlier_attempt_of_the_same_step_is_dead_and_an_ended_run_in_this_process_too() -> None:
    backend = InMemoryBackend()
    # Another host: only the attempt number tells (a Dagster step retry on another pod).
    first = replace(OwnerInstance.current(attempt=0), host="other-pod")
    _first(backend, first)
    retry = OwnerInstance.current(attempt=1)
    take_owner_id(_store(backend, retry), "job", retry, expiry=EXPIRY, sleep=pytest.fail)
    # A run that ended in this process (not started/stopped any more) left its heartbeat.
    later = OwnerInstance.current()
    take_owner_id(_store(backend, later), "job", later, expiry=EXPIRY, sleep=pytest.fail)


def test_an_unknown_process_is_watched_refused_if_it_writes_taken_over_once_silent() -> None:
    clock = Clock()
    backend = InMemoryBackend(clock)
    remote = replace(OwnerInstance.current(), host="elsewhere")
    _first(backend, remote)
    remote_store = _store(backend, remote)

    def remote_renews(seconds: float) -> None:
        clock.now += timedelta(seconds=seconds)
        write_heartbeat(remote_store, "job", list_heartbeats(remote_store)["job"])

    me = OwnerInstance.current()
    with pytest.raises(DuplicateOwnerError, match="in use by another live process"):
        take_owner_id(_store(backend, me), "job", me, expiry=EXPIRY, sleep=remote_renews)

    waited: list[float] = []

    def remote_silent(seconds: float) -> None:
        waited.append(seconds)
        clock.now += timedelta(seconds=seconds)

    me = OwnerInstance.current()
    take_owner_id(_store(backend, me), "job", me, expiry=EXPIRY, sleep=remote_silent)
    assert 59 <= sum(waited) <= 61  # bounded by the expiry after its last write
    # The displaced process learns it at its next heartbeat and stops.
    with pytest.raises(DuplicateOwnerError, match="took this owner id over"):
        write_heartbeat(remote_store, "job", list_heartbeats(remote_store)["job"])
    # Leaving, it does not delete the new process's heartbeat.
    delete_heartbeat(remote_store, "job")
    assert list_heartbeats(remote_store)["job"].instance == me.token()


def test_two_processes_starting_together_one_wins() -> None:
    backend = InMemoryBackend()
    a, b = OwnerInstance.current(), OwnerInstance.current()
    a.start()
    b.start()
    try:
        take_owner_id(_store(backend, a), "job", a, expiry=EXPIRY)
        with pytest.raises(DuplicateOwnerError):
            take_owner_id(_store(backend, b), "job", b, expiry=EXPIRY)
    finally:
        a.stop()
        b.stop()


def test_instance_tokens_round_trip_and_foreign_tokens_are_never_judged_dead() -> None:
    inst = OwnerInstance.current(attempt=3)
    assert OwnerInstance.parse(inst.token()) == inst
    assert inst.token().isascii() and len(inst.token()) < 128
    assert OwnerInstance.parse("") is None and OwnerInstance.parse("x/y") is None
    assert inst.judge("") == "unknown" and inst.judge("garbage") == "unknown"
