"""A bounded pull over the SDK's callback-driven receive (executors, and the driver's probes)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from resources.errors import EventHubIngestError, EventHubUnavailableError, redact
from resources.settings import EventHubSettings

if TYPE_CHECKING:
    from azure.eventhub import EventData

logger = logging.getLogger(__name__)


def _unavailable(settings: EventHubSettings, what: str, exc: BaseException) -> EventHubIngestError:
    return EventHubUnavailableError(
        f"Event Hub {settings.eventhub_name!r} (consumer group {settings.consumer_group!r}): "
        f"{what} failed: {type(exc).__name__}: {redact(str(exc))}"
    )


class _Done:
    """Sentinel: the receive thread ended."""


class _BatchReceiver:
    """Runs ``receive_batch`` in a thread and hands event lists over through a bounded queue.

    The SDK's receive is callback-driven and never returns on its own; a bounded read needs to
    stop at an exact sequence number and to yield from a generator, so the callback feeds a queue
    (a few batches deep: backpressure keeps a slow consumer from buffering the partition) and
    ``close()`` stops the client. An empty list means nothing arrived for ``wait_seconds``
    (measured here, between batches, including connection set-up).
    """

    def __init__(
        self,
        settings: EventHubSettings,
        partition_id: str,
        *,
        starting_position: int | str | datetime,
        prefetch: int,
        max_batch_size: int,
        wait_seconds: float,
    ) -> None:
        self._settings = settings
        self._partition_id = partition_id
        self._wait = wait_seconds
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=4)
        self._stop = threading.Event()
        self._closing = False
        self._client = settings.consumer_client()
        self._thread = threading.Thread(
            target=self._run,
            kwargs={
                "starting_position": starting_position,
                "prefetch": prefetch,
                "max_batch_size": max_batch_size,
            },
            name=f"eventhubs-receive-{partition_id}",
            daemon=True,
        )

    def __enter__(self) -> _BatchReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _run(self, **kwargs: Any) -> None:
        def on_batch(_ctx: Any, events: list[EventData]) -> None:
            if not self._stop.is_set():
                self._put(list(events))

        def on_error(_ctx: Any, exc: Exception) -> None:
            self._put(exc)
            self._stop.set()

        try:
            self._client.receive_batch(
                on_batch,
                partition_id=self._partition_id,
                starting_position=kwargs["starting_position"],
                starting_position_inclusive=True,
                max_batch_size=kwargs["max_batch_size"],
                # No SDK wait: with one it holds a partial batch back until the wait is over
                # (the tail of every range would cost a full receive_timeout). The queue's
                # timeout in __iter__ detects silence instead.
                max_wait_time=None,
                prefetch=kwargs["prefetch"],
                on_error=on_error,
            )
        except Exception as exc:
            self._put(exc)
        finally:
            self._put(_Done())

    def __iter__(self) -> Iterator[list[EventData]]:
        while True:
            try:
                item = self._queue.get(timeout=self._wait)
            except queue.Empty:
                item = []
            if isinstance(item, _Done):
                if self._stop.is_set():
                    return
                raise EventHubUnavailableError(
                    f"Event Hub {self._settings.eventhub_name!r} partition "
                    f"{self._partition_id}: the receiver stopped unexpectedly"
                )
            if isinstance(item, BaseException):
                raise _unavailable(
                    self._settings, f"receiving from partition {self._partition_id}", item
                ) from item
            yield item

    def close(self, *, wait: bool = True) -> None:
        """Stop receiving and close the client (idempotent).

        ``wait=False`` closes in a daemon thread: detaching the link and the receive thread's
        exit take 0.3-1 s that a reader which already has its whole range need not wait for
        (it is a task's tail, paid once per task otherwise).
        """
        if self._closing:
            return
        self._closing = True
        self._stop.set()
        if wait:
            self._close_client()
        else:
            threading.Thread(
                target=self._close_client,
                name=f"eventhubs-close-{self._partition_id}",
                daemon=True,
            ).start()

    def _close_client(self) -> None:
        try:
            self._client.close()
        except Exception:  # closing a half-open AMQP link must not mask the real error
            logger.debug("closing the consumer of partition %s failed", self._partition_id)
        # The receive thread leaves its blocking read within one AMQP poll (<1 s).
        if self._thread.is_alive():
            self._thread.join(timeout=5)
