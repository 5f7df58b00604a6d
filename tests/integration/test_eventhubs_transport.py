"""The SDK's handshake without its 50 ms polls
(dagster_eventhub_ingest.resources.azure.transport): the loop's rules on a fake
``client_ready``, then real SDK clients against the emulator."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.azure.hub_client import EventHubClient
from dagster_eventhub_ingest.resources.azure.transport import prompt_ready, prompt_transport
from dagster_eventhub_ingest.resources.eventhubs_source import PartitionRange, read_range


class _Handshake:
    """``client_ready`` of a handshake that needs ``frames`` reads, each ``step`` seconds."""

    def __init__(self, frames: int, step: float = 0.0, error_at: int | None = None) -> None:
        self.frames, self.step, self.error_at, self.calls = frames, step, error_at, 0

    def __call__(self) -> bool:
        self.calls += 1
        if self.error_at is not None and self.calls == self.error_at:
            raise ConnectionResetError("handshake broke")
        time.sleep(self.step)
        return self.calls >= self.frames


def test_ready_as_soon_as_the_last_frame_arrived() -> None:
    ready = _Handshake(frames=8, step=0.002)
    started = time.monotonic()
    assert prompt_ready(ready) is True
    assert ready.calls == 8
    assert time.monotonic() - started < 0.2  # the SDK's loop: 7 x 50 ms more


def test_not_ready_after_the_wait_hands_back_to_the_sdks_loop() -> None:
    ready = _Handshake(frames=10**9, step=0.01)
    started = time.monotonic()
    assert prompt_ready(ready, wait=0.1) is False
    assert 0.1 <= time.monotonic() - started < 0.5


def test_an_answer_that_did_not_wait_is_not_asked_again_in_a_busy_loop() -> None:
    ready = _Handshake(frames=10**9, step=0.0)
    assert prompt_ready(ready, wait=0.1) is False
    assert ready.calls <= 150  # ~1 ms apart, not hundreds of thousands


def test_a_handshake_error_reaches_the_caller_unchanged() -> None:
    with pytest.raises(ConnectionResetError, match="handshake broke"):
        prompt_ready(_Handshake(frames=5, error_at=3))


class _Sleeps:
    """The ``time.sleep`` calls the SDK's client base makes on this thread once ``recording``
    (its handshake polls sleep 0.05 s per frame)."""

    def __init__(self) -> None:
        self.recording = False
        self.slept: list[float] = []


@pytest.fixture
def sdk_sleeps(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Sleeps]:
    import azure.eventhub._client_base as client_base

    sleeps = _Sleeps()
    real_time = client_base.time

    class _Time:
        def __getattr__(self, name: str) -> Any:
            return getattr(real_time, name)

        def sleep(self, seconds: float) -> None:
            if sleeps.recording and threading.current_thread() is threading.main_thread():
                sleeps.slept.append(seconds)
            real_time.sleep(seconds)

    monkeypatch.setattr(client_base, "time", _Time())
    yield sleeps


@pytest.mark.integration
def test_management_calls_and_a_read_make_no_handshake_poll(
    make_eventhub: Callable[..., Any], sdk_sleeps: _Sleeps
) -> None:
    assert prompt_transport() is not None  # the pinned SDK has the transport class
    hub = make_eventhub(partitions=2)
    hub.send("1", [b"a", b"b", b"c"])  # the producer keeps the SDK's transport
    settings = hub.settings()
    sdk_sleeps.recording = True
    client = settings.consumer_client()
    try:
        assert client.get_eventhub_properties()["partition_ids"] == ["0", "1"]
        assert client.get_partition_properties("1")["last_enqueued_sequence_number"] == 2
    finally:
        client.close()
    info = EventHubClient(settings).partition_info(["1"])["1"]
    assert info.last_enqueued_sequence_number == 2
    rows = [
        row
        for batch in read_range(settings, PartitionRange("1", 0, 2))
        for row in batch.column("body").to_pylist()
    ]
    assert rows == [b"a", b"b", b"c"]
    assert 0.05 not in sdk_sleeps.slept, sdk_sleeps.slept


@pytest.mark.integration
def test_the_sdks_own_transport_still_polls(
    make_eventhub: Callable[..., Any], sdk_sleeps: _Sleeps
) -> None:
    """The control: without the prompt transport the same call sleeps between frames (so the
    test above can fail)."""
    from azure.eventhub._transport._pyamqp_transport import PyamqpTransport

    hub = make_eventhub(partitions=1)
    client = hub.settings().consumer_client(amqp_transport=PyamqpTransport)
    sdk_sleeps.recording = True
    try:
        client.get_eventhub_properties()
    finally:
        client.close()
    assert 0.05 in sdk_sleeps.slept


@pytest.mark.integration
def test_a_wrong_key_is_refused_as_before(make_eventhub: Callable[..., Any]) -> None:
    from dagster_eventhub_ingest.resources.errors import ConfigurationError
    from dagster_eventhub_ingest.resources.settings import EventHubSettings

    hub = make_eventhub(partitions=1)
    wrong = hub.connection_string.replace("SharedAccessKey=", "SharedAccessKey=x")
    settings = EventHubSettings(eventhub_name=hub.name, connection_string=wrong)
    with pytest.raises(ConfigurationError, match="refused the credential") as err:
        EventHubClient(settings).partition_ids()
    assert "SharedAccessKey=" not in str(err.value)
