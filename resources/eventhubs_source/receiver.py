"""A bounded pull of one partition (executors, and the driver's position probes).

:class:`_PartitionPull` is the reader's: its own AMQP receiver
(:mod:`dagster_eventhub_ingest.resources.amqp`), every event decoded from its bytes.
:class:`_BatchReceiver` is the SDK's public ``receive_batch``, run only when asked for
(``EHINGEST_SDK_RECEIVE=1``: a way around the reader's receiver, values as the SDK decodes them).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dagster_eventhub_ingest.resources.amqp.cbs import Cbs, audience_of, token_source
from dagster_eventhub_ingest.resources.amqp.connection import Connection, Endpoint
from dagster_eventhub_ingest.resources.amqp.errors import AmqpError
from dagster_eventhub_ingest.resources.amqp.receiver import PartitionReceiver, source_address
from dagster_eventhub_ingest.resources.errors import (
    EventHubIngestError,
    EventHubUnavailableError,
    redact,
)
from dagster_eventhub_ingest.resources.eventhubs_source.events import ColumnRows
from dagster_eventhub_ingest.resources.eventhubs_source.message import decode_event
from dagster_eventhub_ingest.resources.settings import EventHubSettings

if TYPE_CHECKING:
    from azure.eventhub import EventData

logger = logging.getLogger(__name__)

#: Reconnects in a row before a read fails (the SDK's ``retry_total``), and their back-off:
#: ``BACKOFF_FACTOR * 2**n`` seconds, at most ``BACKOFF_MAX_SECONDS`` (the SDK's exponential).
MAX_RETRIES = 3
BACKOFF_FACTOR = 0.8
BACKOFF_MAX_SECONDS = 120.0
#: How long opening a connection, authorizing and attaching may take (the SDK's auth timeout).
HANDSHAKE_TIMEOUT_SECONDS = 60.0
#: ``EHINGEST_SDK_RECEIVE=1``: read with the SDK's public receive instead.
SDK_RECEIVE_ENV = "EHINGEST_SDK_RECEIVE"


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
        inclusive: bool = True,
    ) -> None:
        self._settings = settings
        self._partition_id = partition_id
        self._wait = wait_seconds
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=4)
        self._stop = threading.Event()
        self._closed = False
        self._client = settings.consumer_client()
        self._thread = threading.Thread(
            target=self._run,
            kwargs={
                "starting_position": starting_position,
                "prefetch": prefetch,
                "max_batch_size": max_batch_size,
                "inclusive": inclusive,
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
                starting_position_inclusive=kwargs["inclusive"],
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

        ``wait=False`` closes in a daemon thread: detaching the link (and the receive thread's
        exit) take 0.3-1 s that a reader which already has its whole range need not wait for.
        """
        if self._closed:
            return
        self._closed = True
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


class _PartitionPull:
    """Pulls one partition's events on the calling thread, with the reader's own AMQP receiver.

    The connection, its authorization and the link are the project's own
    (:mod:`dagster_eventhub_ingest.resources.amqp`): nothing of azure-eventhub runs here, nothing
    is shared with any other receiver in the process. Each message is decoded from its bytes
    (:func:`~dagster_eventhub_ingest.resources.eventhubs_source.message.decode_event`); with
    ``columns`` (the reader's) and the native step loaded, runs of plain transfers arrive as
    :class:`~dagster_eventhub_ingest.resources.eventhubs_source.events.ColumnRows` among the
    events, in the order received. An empty list means nothing arrived for ``wait_seconds``.

    A connection that fails (or a link the service detaches) is opened again at the next
    sequence number the caller has not seen, inclusive: up to :data:`MAX_RETRIES` times in a
    row, after the SDK's exponential back-off; what a new connection cannot cure (an unknown
    hub, consumer group or partition, a refused token, a stolen link) fails at once. Either way
    the error is an :class:`~dagster_eventhub_ingest.resources.errors.EventHubUnavailableError`
    naming the hub, the consumer group and the partition.
    """

    def __init__(
        self,
        settings: EventHubSettings,
        partition_id: str,
        *,
        starting_position: int | str | datetime,
        prefetch: int,
        wait_seconds: float,
        end: int | None = None,
        columns: bool = False,
        inclusive: bool = True,
    ) -> None:
        self._settings = settings
        self._partition_id = partition_id
        self._wait = wait_seconds
        self._prefetch = prefetch
        # Where a reconnect resumes: the start until an event arrived, then the sequence number
        # after the last one seen (inclusive).
        self._next: int | str | datetime = starting_position
        self._inclusive = inclusive
        self._end = end
        self._native = None
        if columns:
            from dagster_eventhub_ingest.resources.eventhubs_source.fastpath.loader import (
                amqp_columns,
            )

            self._native = amqp_columns()
        self._endpoint = Endpoint.of(settings)
        self._tokens = token_source(settings)
        self._conn: Connection | None = None
        self._cbs: Cbs | None = None
        self._link: PartitionReceiver | None = None
        self._closed = False

    def __enter__(self) -> _PartitionPull:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def sequence_number(message: Any) -> int | None:
        """The sequence number of a received event, or of the last row of a native run."""
        if type(message) is ColumnRows:
            return message.last_seq
        seq: int | None = message.seq
        return seq

    def _open(self) -> PartitionReceiver:
        settings = self._settings
        conn = Connection(self._endpoint, timeout=HANDSHAKE_TIMEOUT_SECONDS)
        self._conn = conn
        conn.open()
        self._cbs = Cbs(conn, self._tokens, audience_of(settings))
        self._cbs.authorize()
        link = PartitionReceiver(
            conn,
            source_address(
                settings.namespace,
                settings.eventhub_name,
                settings.consumer_group,
                self._partition_id,
            ),
            self._next,
            inclusive=self._inclusive,
            prefetch=self._prefetch,
            end=self._end,
            decode=decode_event,
            native=self._native,
            run=ColumnRows,
        )
        link.attach()
        self._link = link
        return link

    def _drop(self) -> None:
        conn, self._conn, self._cbs, self._link = self._conn, None, None, None
        if conn is not None:
            conn.close()

    def __iter__(self) -> Iterator[list[Any]]:
        retried = 0
        last = time.monotonic()
        while not self._closed:
            try:
                link = self._link or self._open()
                assert self._cbs is not None
                self._cbs.renew_if_due()
                messages = link.receive(max(0.0, self._wait - (time.monotonic() - last)))
            except AmqpError as exc:
                self._drop()
                if self._closed:
                    return
                if not exc.retryable or retried >= MAX_RETRIES:
                    raise self._failed(exc) from exc
                logger.info(
                    "Event Hub %s consumer group %s partition %s: %s; reconnecting at %s",
                    self._settings.eventhub_name,
                    self._settings.consumer_group,
                    self._partition_id,
                    redact(str(exc)),
                    self._next,
                )
                time.sleep(min(BACKOFF_FACTOR * 2**retried, BACKOFF_MAX_SECONDS))
                retried += 1
                continue
            if messages:
                seq = self.sequence_number(messages[-1])
                if seq is not None:
                    nxt = self._next
                    self._next = seq + 1 if not isinstance(nxt, int) else max(nxt, seq + 1)
                    self._inclusive = True
                retried = 0
                last = time.monotonic()
                yield messages
            elif time.monotonic() - last >= self._wait:
                last = time.monotonic()
                yield []

    def _failed(self, exc: AmqpError) -> EventHubIngestError:
        return _unavailable(self._settings, f"receiving from partition {self._partition_id}", exc)

    def close(self, *, wait: bool = True) -> None:
        """Stop the pull and close its connection, at once (a few frames written, no answer
        awaited: nothing to wait for, ``wait`` or not). Idempotent."""
        self._closed = True
        self._drop()


def first_event_at(
    settings: EventHubSettings,
    partition_id: str,
    position: int | str | datetime,
    *,
    inclusive: bool,
    wait_seconds: float,
) -> tuple[int, str] | None:
    """Sequence number and offset of the first event at ``position`` (a sequence number, an
    offset, an enqueued time), or None when none arrives within ``wait_seconds``.

    Received as a read receives (each message decoded from its bytes), so the event found there
    cannot fail the look-up, whatever it holds; the SDK's public receive with
    ``EHINGEST_SDK_RECEIVE=1``.
    """
    if sdk_receive():
        receiver = _BatchReceiver(
            settings,
            partition_id,
            starting_position=position,
            prefetch=1,
            max_batch_size=1,
            wait_seconds=wait_seconds,
            inclusive=inclusive,
        )
        with receiver:
            for events in receiver:
                if not events:
                    return None
                seq = events[0].sequence_number
                if seq is not None:
                    return int(seq), str(events[0].offset)
        return None
    pull = _PartitionPull(
        settings,
        partition_id,
        starting_position=position,
        prefetch=1,
        wait_seconds=wait_seconds,
        inclusive=inclusive,
    )
    with pull:
        for received in pull:
            if not received:
                return None
            for event in received:
                if event.seq is not None:
                    return event.seq, event.offset or ""
    return None


def sdk_receive() -> bool:
    """Whether reads use the SDK's public receive (``EHINGEST_SDK_RECEIVE=1``) instead of the
    reader's own receiver."""
    return os.environ.get(SDK_RECEIVE_ENV) == "1"
